"""The transport boundary: begin an import, poll its chunks, finish it.

``begin`` checks the announcement and the leases and prepares every chunk before any READ
is posted, so a refusal leaves nothing behind. ``poll`` posts chunks (at most ``window``
posted and not yet seen done) and reports each chunk's state; the first failure fails the
whole import with ``ImportFailed`` and posts nothing more. ``finish`` releases what the
transport holds for the import (the caller releases its staging leases). Implementations
supply the four ``_prepare`` / ``_post`` / ``_check`` / ``_drop`` hooks.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hisparse.transport.errors import AnnouncementRefused, ImportFailed
from hisparse.transport.geometry import Announcement, ImportRequest, check_announcement
from hisparse.transport.staging import StagingLease, StagingPool


class ChunkState(enum.Enum):
    PENDING = "pending"
    POSTED = "posted"
    DONE = "done"
    FAILED = "failed"


@dataclass
class ImportHandle:
    """One request's import in flight: its chunks (page index lists) and their states."""

    request: ImportRequest
    announcement: Announcement
    leases: tuple[StagingLease, ...]
    chunks: tuple[tuple[int, ...], ...]
    states: list[ChunkState]
    tokens: list[Any] = field(default_factory=list)
    error: ImportFailed | None = None

    @property
    def done(self) -> bool:
        return all(s is ChunkState.DONE for s in self.states)

    @property
    def ended(self) -> bool:
        return self.done or self.error is not None


class Transport:
    """Reads announced pages into the staging slots leased for a request."""

    def __init__(self, pool: StagingPool, chunk_pages: int = 1, window: int = 1) -> None:
        if chunk_pages < 1 or window < 1:
            raise ValueError(f"chunk pages and window must be positive: {chunk_pages}, {window}")
        self.pool = pool
        self.chunk_pages = chunk_pages
        self.window = window
        self.live: dict[str, ImportHandle] = {}

    def begin(
        self, request: ImportRequest, ann: Announcement, leases: Sequence[StagingLease]
    ) -> ImportHandle:
        """Check everything, prepare every chunk; ``AnnouncementRefused`` changes nothing."""
        check_announcement(ann, request)
        if request.page_bytes != self.pool.page_bytes:
            raise AnnouncementRefused(
                "geometry", f"pages of {request.page_bytes} bytes, staging slots hold "
                f"pages of {self.pool.page_bytes}"
            )
        if request.req_id in self.live:
            raise AnnouncementRefused("request", f"{request.req_id!r} is already importing")
        if len(leases) != request.num_pages or len({ls.slot for ls in leases}) != len(leases):
            raise AnnouncementRefused(
                "destination", f"{len(leases)} leases for {request.num_pages} pages"
            )
        for lease in leases:
            if lease.owner != request.req_id or not self.pool.holds(lease):
                raise AnnouncementRefused(
                    "destination", f"{lease} is not a live lease of {request.req_id!r}"
                )
        n = request.num_pages
        chunks = tuple(
            tuple(range(i, min(i + self.chunk_pages, n))) for i in range(0, n, self.chunk_pages)
        )
        handle = ImportHandle(
            request, ann, tuple(leases), chunks, [ChunkState.PENDING] * len(chunks)
        )
        handle.tokens = self._prepare(handle)  # may refuse; holds nothing if it does
        self.live[request.req_id] = handle
        return handle

    def poll(self, handle: ImportHandle) -> list[ChunkState]:
        """Advance ``handle`` without blocking; returns a copy of its chunk states."""
        if handle.ended:
            return list(handle.states)
        for i, state in enumerate(handle.states):
            if state is ChunkState.POSTED:
                try:
                    if self._check(handle, i):
                        handle.states[i] = ChunkState.DONE
                except ImportFailed as exc:
                    self._fail(handle, i, exc)
                    return list(handle.states)
        budget = self.window - handle.states.count(ChunkState.POSTED)
        for i, state in enumerate(handle.states):
            if budget <= 0:  # at most ``window`` chunks posted and not yet seen done
                break
            if state is ChunkState.PENDING:
                try:
                    finished = self._post(handle, i)
                except ImportFailed as exc:
                    self._fail(handle, i, exc)
                    return list(handle.states)
                handle.states[i] = ChunkState.DONE if finished else ChunkState.POSTED
                budget -= 1
        return list(handle.states)

    def wait(self, handle: ImportHandle, max_polls: int = 10_000_000) -> ImportHandle:
        """Poll until the import ends (a bounded busy loop: a hung READ is a failure)."""
        for _ in range(max_polls):
            if handle.ended:
                return handle
            self.poll(handle)
        if not handle.ended:
            first = next(i for i, s in enumerate(handle.states) if s is not ChunkState.DONE)
            self._fail(handle, first, ImportFailed(handle.request.req_id, -1, "no completion"))
        return handle

    def finish(self, handle: ImportHandle) -> None:
        """Forget the import and drop what the transport holds for it (idempotent)."""
        if self.live.get(handle.request.req_id) is handle:
            del self.live[handle.request.req_id]
            self._drop(handle)

    def _fail(self, handle: ImportHandle, chunk: int, exc: ImportFailed) -> None:
        handle.error = exc if exc.chunk == chunk else ImportFailed(
            handle.request.req_id, chunk, str(exc))
        for i, state in enumerate(handle.states):
            if state is not ChunkState.DONE:
                handle.states[i] = ChunkState.FAILED

    # -- implementation hooks ---------------------------------------------------------

    def _prepare(self, handle: ImportHandle) -> list[Any]:
        """Per-chunk transfer state; raise ``AnnouncementRefused`` holding nothing."""
        raise NotImplementedError

    def _post(self, handle: ImportHandle, chunk: int) -> bool:
        """Post chunk ``chunk``'s READ; True if it completed already."""
        raise NotImplementedError

    def _check(self, handle: ImportHandle, chunk: int) -> bool:
        """Whether posted chunk ``chunk`` completed; ``ImportFailed`` if it failed."""
        raise NotImplementedError

    def _drop(self, handle: ImportHandle) -> None:
        """Release the per-chunk transfer state."""
        raise NotImplementedError
