"""What the decoder expects of an import, what a prefiller announces, and the check.

A request of ``num_tokens`` tokens occupies ``ceil(num_tokens / block_size)`` pages of
``block_size`` rows of ``row_bytes`` each. The final page may hold fewer rows (a prompt
length that is not a multiple of the block size): only its valid rows are read, and the
rest of its destination stays as leased (zero). That is a normal case, never an error.
"""

from __future__ import annotations

from dataclasses import dataclass

from hisparse.transport.errors import AnnouncementRefused


@dataclass(frozen=True)
class ImportRequest:
    """The decoder's own view of a request to import: nothing here comes from the prefiller.

    ``prefiller`` is the NIXL agent name the decoder is configured to import it from.
    """

    req_id: str
    num_tokens: int
    row_bytes: int
    block_size: int
    prefiller: str

    def __post_init__(self) -> None:
        if self.num_tokens < 1 or self.row_bytes < 1 or self.block_size < 1:
            raise ValueError(
                f"an import request needs positive tokens, row bytes and block size, got "
                f"{self.num_tokens}, {self.row_bytes}, {self.block_size}"
            )

    @property
    def page_bytes(self) -> int:
        return self.row_bytes * self.block_size

    @property
    def num_pages(self) -> int:
        return -(-self.num_tokens // self.block_size)

    def valid_bytes(self, page: int) -> int:
        """Bytes of page ``page`` that hold KV (the final page may be partly filled)."""
        if not 0 <= page < self.num_pages:
            raise IndexError(f"page {page} outside 0..{self.num_pages - 1}")
        rows = min(self.block_size, self.num_tokens - page * self.block_size)
        return rows * self.row_bytes


@dataclass(frozen=True)
class PageDescriptor:
    """One announced page: where it lies in the prefiller's registered memory."""

    page: int
    addr: int
    nbytes: int
    dev_id: int = 0


@dataclass(frozen=True)
class Announcement:
    """A prefiller's claim: "agent ``agent`` holds request ``req_id``'s pages here"."""

    agent: str
    req_id: str
    num_tokens: int
    row_bytes: int
    block_size: int
    pages: tuple[PageDescriptor, ...]


def check_announcement(ann: Announcement, request: ImportRequest) -> None:
    """Refuse an announcement that does not match ``request`` exactly; no side effects."""
    if ann.agent != request.prefiller:
        raise AnnouncementRefused(
            "agent", f"announced by {ann.agent!r}, configured prefiller is {request.prefiller!r}"
        )
    if ann.req_id != request.req_id:
        raise AnnouncementRefused("request", f"names {ann.req_id!r}, expected {request.req_id!r}")
    if (ann.row_bytes, ann.block_size) != (request.row_bytes, request.block_size):
        raise AnnouncementRefused(
            "geometry",
            f"row bytes {ann.row_bytes} / block size {ann.block_size}, the request has "
            f"{request.row_bytes} / {request.block_size}",
        )
    if ann.num_tokens != request.num_tokens or len(ann.pages) != request.num_pages:
        raise AnnouncementRefused(
            "pages",
            f"{len(ann.pages)} pages of {ann.num_tokens} tokens, the request has "
            f"{request.num_pages} pages of {request.num_tokens} tokens",
        )
    for i, desc in enumerate(ann.pages):
        if desc.page != i:
            raise AnnouncementRefused("descriptor", f"descriptor {i} names page {desc.page}")
        if desc.nbytes != request.page_bytes:
            raise AnnouncementRefused(
                "descriptor", f"page {i} is {desc.nbytes} bytes, a page is {request.page_bytes}"
            )
        if desc.addr <= 0 or desc.dev_id < 0:
            raise AnnouncementRefused(
                "descriptor", f"page {i} at address {desc.addr:#x} device {desc.dev_id}"
            )
