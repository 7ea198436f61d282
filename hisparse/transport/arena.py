"""Which page rows of a prefiller's registered buffer hold which request's pages.

A prefiller registers one buffer of ``num_pages`` page rows once (its agent metadata is
published once) and places each request's pages in free rows; the announcement names
them by address, so a request's rows need not be contiguous. O(pages) per put or drop.
"""

from __future__ import annotations

from hisparse.transport.errors import TransportError


class PageArena:
    """Free-row bookkeeping of a prefiller's page buffer."""

    def __init__(self, num_pages: int) -> None:
        self.num_pages = num_pages
        self._free = list(range(num_pages - 1, -1, -1))
        self.held: dict[str, list[int]] = {}

    @property
    def num_free(self) -> int:
        return len(self._free)

    def put(self, req_id: str, n: int) -> list[int]:
        """``n`` free rows for ``req_id``'s pages, or ``TransportError`` holding nothing."""
        if req_id in self.held:
            raise TransportError(f"the prefiller already holds request {req_id!r}")
        if not 1 <= n <= len(self._free):
            raise TransportError(
                f"the prefiller holds {len(self._free)} free pages of {self.num_pages}, "
                f"request {req_id!r} has {n}: raise its pages"
            )
        rows = [self._free.pop() for _ in range(n)]
        self.held[req_id] = rows
        return rows

    def drop(self, req_id: str) -> None:
        """Forget ``req_id``'s pages (idempotent)."""
        self._free += reversed(self.held.pop(req_id, []))
