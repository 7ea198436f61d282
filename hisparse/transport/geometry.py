"""What the decoder expects of an import, what a prefiller announces, and the check.

A request of ``num_tokens`` tokens occupies ``ceil(num_tokens / block_size)`` pages; a
page holds ``layers`` layer blocks one after another (layer-major), each ``block_size``
rows of ``row_bytes``. The final page may hold fewer rows (a prompt length that is not a
multiple of the block size): only its valid rows are read (one segment per layer), and
the rest of its destination stays zero. That is a normal case, never an error.
"""

from __future__ import annotations

from dataclasses import dataclass

from hisparse.transport.errors import AnnouncementRefused


@dataclass(frozen=True)
class ImportRequest:
    """The decoder's own view of a request to import: nothing here comes from the prefiller.

    ``prefiller`` is the NIXL agent name the decoder is configured to import it from;
    ``layers`` the layer blocks of one page (each cache's bytes of the page).
    """

    req_id: str
    num_tokens: int
    row_bytes: int
    block_size: int
    prefiller: str
    layers: int = 1

    def __post_init__(self) -> None:
        if min(self.num_tokens, self.row_bytes, self.block_size, self.layers) < 1:
            raise ValueError(
                f"an import request needs positive tokens, row bytes, block size and "
                f"layers, got {self.num_tokens}, {self.row_bytes}, {self.block_size}, "
                f"{self.layers}"
            )

    @property
    def block_bytes(self) -> int:
        """Bytes of one layer's block of a page."""
        return self.row_bytes * self.block_size

    @property
    def page_bytes(self) -> int:
        return self.block_bytes * self.layers

    def valid_rows(self, page: int) -> int:
        """Rows of page ``page`` that hold KV (the final page may be partly filled)."""
        if not 0 <= page < self.num_pages:
            raise IndexError(f"page {page} outside 0..{self.num_pages - 1}")
        return min(self.block_size, self.num_tokens - page * self.block_size)

    def segments(self, page: int) -> tuple[tuple[int, int], ...]:
        """(offset in the page, bytes) of each layer's valid rows of page ``page``."""
        n = self.valid_rows(page) * self.row_bytes
        return tuple((layer * self.block_bytes, n) for layer in range(self.layers))

    @property
    def num_pages(self) -> int:
        return -(-self.num_tokens // self.block_size)

    def valid_bytes(self, page: int) -> int:
        """Bytes of page ``page`` that hold KV (the final page may be partly filled)."""
        return self.valid_rows(page) * self.row_bytes * self.layers


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
    layers: int = 1


def check_announcement(ann: Announcement, request: ImportRequest) -> None:
    """Refuse an announcement that does not match ``request`` exactly; no side effects."""
    if ann.agent != request.prefiller:
        raise AnnouncementRefused(
            "agent", f"announced by {ann.agent!r}, configured prefiller is {request.prefiller!r}"
        )
    if ann.req_id != request.req_id:
        raise AnnouncementRefused("request", f"names {ann.req_id!r}, expected {request.req_id!r}")
    if (ann.row_bytes, ann.block_size, ann.layers) != (
        request.row_bytes, request.block_size, request.layers
    ):
        raise AnnouncementRefused(
            "geometry",
            f"row bytes {ann.row_bytes} / block size {ann.block_size} / layers "
            f"{ann.layers}, the request has {request.row_bytes} / {request.block_size} / "
            f"{request.layers}",
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
