"""The transport boundary: begin an import, bind its chunks' destinations, poll, finish.

``begin`` checks the announcement before any READ is posted, so a refusal leaves nothing
behind. A chunk (``chunk_pages`` pages) is posted only once its destinations are bound:
one per page, a ``StagingLease`` of this request (the host target reads through the
bounded staging pool, a few chunks at a time) or a ``BlockDest`` (the device target lands
directly in registered blocks). ``bind`` checks every destination (live, owned by the
request, inside registered memory, not claimed by another page) before it holds
anything. ``poll`` posts bound chunks (at most ``window`` posted and not yet seen done)
and reports each chunk's state; the first failure, or ``abort``, fails the whole import
with ``ImportFailed`` and posts nothing more, but a chunk already posted is still polled
until its READ ends (a READ in flight still writes its destination), so ``ended`` means
no write is outstanding. ``finish`` drops what the transport holds for the import (the
caller releases its staging leases). Implementations supply the ``_prepare`` /
``_bind`` / ``_post`` / ``_check`` / ``_drop`` hooks and ``_register`` / ``_deregister``.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hisparse.transport.errors import AnnouncementRefused, ImportFailed, TransportError
from hisparse.transport.geometry import Announcement, ImportRequest, check_announcement
from hisparse.transport.staging import StagingLease, StagingPool, buffer_address


class ChunkState(enum.Enum):
    PENDING = "pending"
    POSTED = "posted"
    DONE = "done"
    FAILED = "failed"


@dataclass(frozen=True)
class BlockDest:
    """A page landing directly in registered blocks (device target): per layer the
    address of the block's first row; each layer's block holds ``block_bytes``."""

    owner: str
    addrs: tuple[int, ...]


Dest = StagingLease | BlockDest
Segment = tuple[int, int, int, int]
"""One contiguous copy of a READ: (local address, remote address, bytes, remote device)."""


@dataclass
class ImportHandle:
    """One request's import in flight: its chunks (page index lists) and their states."""

    request: ImportRequest
    announcement: Announcement
    chunks: tuple[tuple[int, ...], ...]
    states: list[ChunkState]
    dests: list[tuple[Dest, ...] | None] = field(default_factory=list)
    tokens: list[Any] = field(default_factory=list)
    error: ImportFailed | None = None

    @property
    def leases(self) -> tuple[StagingLease, ...]:
        """The staging leases bound so far, in page order of their chunks."""
        return tuple(d for ds in self.dests if ds is not None for d in ds
                     if isinstance(d, StagingLease))

    @property
    def done(self) -> bool:
        return all(s is ChunkState.DONE for s in self.states)

    @property
    def in_flight(self) -> int:
        """Chunks posted whose READ has not been seen to end (still writing)."""
        return self.states.count(ChunkState.POSTED)

    @property
    def ended(self) -> bool:
        return self.done or (self.error is not None and self.in_flight == 0)

    def bound(self, chunk: int) -> bool:
        return self.dests[chunk] is not None


class Transport:
    """Reads announced pages into staging slots or registered blocks leased for a request."""

    def __init__(self, pool: StagingPool, chunk_pages: int = 1, window: int = 1) -> None:
        if chunk_pages < 1 or window < 1:
            raise ValueError(f"chunk pages and window must be positive: {chunk_pages}, {window}")
        self.pool = pool
        self.chunk_pages = chunk_pages
        self.window = window
        self.live: dict[str, ImportHandle] = {}
        self.regions: dict[int, Any] = {}  # base address -> registered block memory
        self._claimed: dict[int, str] = {}  # block address -> request whose page lands there

    # -- registered block memory (the device target's destination) ---------------------

    def register(self, buf: Any) -> None:
        """Register ``buf`` (a contiguous byte array: a device pool, a NumPy array for the
        reference executor, a CuPy array in VRAM for the CUDA one) as block memory."""
        if buf.dtype != np.uint8 or not buf.flags.c_contiguous or buf.nbytes == 0:
            raise TransportError("block memory must be a non-empty contiguous uint8 array")
        base = buffer_address(buf)
        if base in self.regions:
            return
        self._register(buf)
        self.regions[base] = buf

    def deregister_all(self) -> None:
        """Drop every block-memory registration (after every import ended)."""
        if any(not h.ended for h in self.live.values()):
            raise TransportError("block memory is still being written by an import")
        for buf in list(self.regions.values()):
            self._deregister(buf)
        self.regions.clear()

    def close(self) -> None:
        """Forget ended imports and drop every block registration (idempotent)."""
        for handle in list(self.live.values()):
            self.finish(handle)
        self.deregister_all()

    def _region_of(self, addr: int, nbytes: int) -> Any:
        for base, buf in self.regions.items():
            if base <= addr and addr + nbytes <= base + buf.nbytes:
                return buf
        return None

    # -- one import ----------------------------------------------------------------------

    def begin(
        self,
        request: ImportRequest,
        ann: Announcement,
        leases: Sequence[Dest] | None = None,
    ) -> ImportHandle:
        """Check everything; with ``leases`` (one per page) bind every chunk now.
        ``AnnouncementRefused`` changes nothing."""
        check_announcement(ann, request)
        if request.page_bytes != self.pool.page_bytes:
            raise AnnouncementRefused(
                "geometry", f"pages of {request.page_bytes} bytes, staging slots hold "
                f"pages of {self.pool.page_bytes}"
            )
        if request.req_id in self.live:
            raise AnnouncementRefused("request", f"{request.req_id!r} is already importing")
        if leases is not None and (
            len(leases) != request.num_pages
            or len({ls.slot for ls in leases if isinstance(ls, StagingLease)})
            != sum(isinstance(ls, StagingLease) for ls in leases)
        ):
            raise AnnouncementRefused(
                "destination", f"{len(leases)} leases for {request.num_pages} pages"
            )
        n = request.num_pages
        chunks = tuple(
            tuple(range(i, min(i + self.chunk_pages, n))) for i in range(0, n, self.chunk_pages)
        )
        handle = ImportHandle(
            request, ann, chunks, [ChunkState.PENDING] * len(chunks),
            [None] * len(chunks), [None] * len(chunks),
        )
        self._prepare(handle)  # may refuse; holds nothing if it does
        if leases is not None:
            done: list[int] = []
            try:
                for i, pages in enumerate(chunks):
                    dests = [leases[p] for p in pages]
                    self._bind_checked(handle, i, dests, self._checked(handle, i, dests))
                    done.append(i)
            except AnnouncementRefused:
                self._unbind(handle, done)
                raise
        self.live[request.req_id] = handle
        return handle

    def bind(self, handle: ImportHandle, chunk: int, dests: Sequence[Dest]) -> None:
        """Give chunk ``chunk`` its destinations (one per page); a refusal changes nothing."""
        if self.live.get(handle.request.req_id) is not handle or handle.error is not None:
            raise AnnouncementRefused("request", f"{handle.request.req_id!r} is not importing")
        if not 0 <= chunk < len(handle.chunks) or handle.bound(chunk):
            raise AnnouncementRefused("destination", f"chunk {chunk} is bound or absent")
        segs = self._checked(handle, chunk, dests)
        self._bind_checked(handle, chunk, dests, segs)

    def _checked(self, handle: ImportHandle, chunk: int, dests: Sequence[Dest]
                 ) -> list[Segment]:
        """Every destination of the chunk checked; its segments. Holds nothing."""
        req, ann = handle.request, handle.announcement
        pages = handle.chunks[chunk]
        if len(dests) != len(pages):
            raise AnnouncementRefused(
                "destination", f"{len(dests)} destinations for chunk {chunk}'s {len(pages)} pages"
            )
        segs: list[Segment] = []
        seen: set[int] = set()
        for page, dest in zip(pages, dests, strict=True):
            if dest.owner != req.req_id:
                raise AnnouncementRefused(
                    "destination", f"{dest} is not a destination of {req.req_id!r}")
            remote, dev = ann.pages[page].addr, ann.pages[page].dev_id
            if isinstance(dest, StagingLease):
                if not self.pool.holds(dest) or dest.slot in seen:
                    raise AnnouncementRefused(
                        "destination", f"{dest} is not a live lease of {req.req_id!r}")
                seen.add(dest.slot)
                local = self.pool.address(dest.slot)
                segs += [(local + off, remote + off, n, dev) for off, n in req.segments(page)]
                continue
            if len(dest.addrs) != req.layers:
                raise AnnouncementRefused(
                    "destination", f"{len(dest.addrs)} block addresses for {req.layers} layers")
            for layer, (off, n) in enumerate(req.segments(page)):
                addr = dest.addrs[layer]
                if self._region_of(addr, req.block_bytes) is None:
                    raise AnnouncementRefused(
                        "destination", f"block {addr:#x} of page {page} is not registered")
                if addr in self._claimed or addr in seen:
                    raise AnnouncementRefused(
                        "destination", f"block {addr:#x} of page {page} is claimed")
                seen.add(addr)
                segs.append((addr, remote + off, n, dev))
        return segs

    def _bind_checked(self, handle: ImportHandle, chunk: int, dests: Sequence[Dest],
                      segs: list[Segment]) -> None:
        handle.tokens[chunk] = self._bind(handle, chunk, segs)  # may refuse, holding nothing
        handle.dests[chunk] = tuple(dests)
        for d in dests:
            if isinstance(d, BlockDest):
                for addr in d.addrs:
                    self._claimed[addr] = handle.request.req_id

    def _unbind(self, handle: ImportHandle, chunks: Sequence[int]) -> None:
        for i in chunks:
            for d in handle.dests[i] or ():
                if isinstance(d, BlockDest):
                    for addr in d.addrs:
                        self._claimed.pop(addr, None)
            handle.dests[i] = None
        self._drop(handle)

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
        if handle.error is not None:
            return list(handle.states)
        budget = self.window - handle.in_flight
        for i, state in enumerate(handle.states):
            if budget <= 0:  # at most ``window`` chunks posted and not yet seen done
                break
            if state is ChunkState.PENDING and handle.bound(i):
                try:
                    finished = self._post(handle, i)
                except ImportFailed as exc:
                    self._fail(handle, i, exc)
                    return list(handle.states)
                handle.states[i] = ChunkState.DONE if finished else ChunkState.POSTED
                budget -= 1
        return list(handle.states)

    def abort(self, handle: ImportHandle, why: str = "aborted") -> None:
        """Fail the import now: nothing more is posted; READs in flight are still polled
        until they end (``ended``)."""
        if not handle.done and handle.error is None:
            handle.error = ImportFailed(handle.request.req_id, -1, why)
            for i, state in enumerate(handle.states):
                if state is ChunkState.PENDING:
                    handle.states[i] = ChunkState.FAILED

    def wait(self, handle: ImportHandle, max_polls: int = 10_000_000) -> ImportHandle:
        """Poll until the import ends (a bounded busy loop: a hung READ is a failure).
        Every chunk must be bound, or the import aborted."""
        if handle.error is None and not all(handle.bound(i) for i in range(len(handle.chunks))):
            raise TransportError(f"{handle.request.req_id!r} has chunks without destinations")
        for _ in range(max_polls):
            if handle.ended:
                return handle
            self.poll(handle)
        if not handle.ended:
            first = next(i for i, s in enumerate(handle.states) if s is not ChunkState.DONE)
            self._fail(handle, first, ImportFailed(handle.request.req_id, first, "no completion"))
            for i, state in enumerate(handle.states):  # a hung READ: its handle is dropped
                if state is ChunkState.POSTED:
                    handle.states[i] = ChunkState.FAILED
        return handle

    def finish(self, handle: ImportHandle) -> None:
        """Forget an ended import and drop what the transport holds for it (idempotent)."""
        if self.live.get(handle.request.req_id) is handle:
            if not handle.ended:
                raise TransportError(f"{handle.request.req_id!r} has READs in flight")
            del self.live[handle.request.req_id]
            self._unbind(handle, range(len(handle.chunks)))

    def _fail(self, handle: ImportHandle, chunk: int, exc: ImportFailed) -> None:
        if handle.error is None:
            handle.error = exc if exc.chunk == chunk else ImportFailed(
                handle.request.req_id, chunk, str(exc), exc.reason)
        for i, state in enumerate(handle.states):
            if state is ChunkState.PENDING or i == chunk:
                handle.states[i] = ChunkState.FAILED

    # -- implementation hooks ---------------------------------------------------------

    def _prepare(self, handle: ImportHandle) -> None:
        """Check what only the transport can (the remote memory); raise
        ``AnnouncementRefused`` holding nothing."""
        raise NotImplementedError

    def _bind(self, handle: ImportHandle, chunk: int, segs: list[Segment]) -> Any:
        """The chunk's transfer state for its checked segments; refuse holding nothing."""
        raise NotImplementedError

    def _post(self, handle: ImportHandle, chunk: int) -> bool:
        """Post chunk ``chunk``'s READ; True if it completed already."""
        raise NotImplementedError

    def _check(self, handle: ImportHandle, chunk: int) -> bool:
        """Whether posted chunk ``chunk`` completed; ``ImportFailed`` if it failed."""
        raise NotImplementedError

    def _drop(self, handle: ImportHandle) -> None:
        """Release the transfer state of every chunk no longer bound."""
        raise NotImplementedError

    def _register(self, buf: Any) -> None:
        """Make ``buf`` a READ destination."""
        raise NotImplementedError

    def _deregister(self, buf: Any) -> None:
        raise NotImplementedError
