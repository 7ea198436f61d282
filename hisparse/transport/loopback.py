"""In-process loopback transport: the oracle the NIXL transport is compared against.

A ``LoopbackPrefiller`` holds pages in a NumPy buffer and announces them with their real
addresses; the loopback transport resolves an announced address inside the buffers of
the prefillers it knows, and a local address inside the staging pool or a registered
block region (as NIXL does with registered memory), and copies the valid bytes through
the staging pool's ``write``: a host pool assigns, a ``DeviceStagingPool`` (the CUDA
executor's) copies host to device on the executor's stream, so the READ is ordered
before the copy out of the slot, the mirror and every decode that follows.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hisparse.transport.arena import PageArena
from hisparse.transport.base import ImportHandle, Segment, Transport
from hisparse.transport.errors import AnnouncementRefused, ImportFailed, TransportError
from hisparse.transport.geometry import Announcement, PageDescriptor
from hisparse.transport.staging import StagingPool, buffer_address


class LoopbackPrefiller:
    """A prefiller in this process: ``pages`` (one row per page) under agent ``name``.

    ``put`` places a request's pages in free rows (``announce`` then names those rows);
    a request never put is announced as every row (one request filling the buffer).
    """

    def __init__(self, name: str, pages: np.ndarray) -> None:
        if pages.ndim != 2 or pages.dtype != np.uint8:
            raise ValueError("pages must be a 2-D uint8 array, one row per page")
        self.name = name
        self.pages = np.ascontiguousarray(pages)
        self.arena = PageArena(self.pages.shape[0])
        self.alive = True

    @property
    def base(self) -> int:
        return int(self.pages.ctypes.data)

    def put(self, req_id: str, pages: np.ndarray) -> None:
        """Hold ``pages`` (one row per page) as request ``req_id``'s prefill KV."""
        if pages.ndim != 2 or pages.shape[1] != self.pages.shape[1]:
            raise ValueError(f"pages of {pages.shape[1:]} bytes, rows hold {self.pages.shape[1]}")
        rows = self.arena.put(req_id, pages.shape[0])
        self.pages[rows] = pages

    def drop(self, req_id: str) -> None:
        self.arena.drop(req_id)

    def announce(
        self, req_id: str, num_tokens: int, row_bytes: int, block_size: int, layers: int = 1
    ) -> Announcement:
        """The honest announcement of request ``req_id``'s pages."""
        stride = self.pages.shape[1]
        rows = self.arena.held.get(req_id, range(self.pages.shape[0]))
        descs = tuple(
            PageDescriptor(i, self.base + row * stride, stride) for i, row in enumerate(rows)
        )
        return Announcement(self.name, req_id, num_tokens, row_bytes, block_size, descs, layers)

    def kill(self) -> None:
        """The prefiller goes away: every later READ from it fails."""
        self.alive = False


class LoopbackTransport(Transport):
    """Copies from in-process prefillers' buffers into staging slots or registered blocks."""

    def __init__(self, pool: StagingPool, chunk_pages: int = 1, window: int = 1) -> None:
        super().__init__(pool, chunk_pages, window)
        self.peers: dict[str, LoopbackPrefiller] = {}

    def connect(self, peer: LoopbackPrefiller) -> None:
        self.peers[peer.name] = peer

    def disconnect(self, name: str) -> None:
        self.peers.pop(name, None)

    def close(self) -> None:
        """Drop live imports (ended ones), peers and block registrations (idempotent)."""
        for handle in list(self.live.values()):
            self.finish(handle)
        self.peers.clear()
        self.deregister_all()

    def _prepare(self, handle: ImportHandle) -> None:
        peer = self.peers.get(handle.announcement.agent)
        if peer is None:
            raise AnnouncementRefused("agent", f"{handle.announcement.agent!r} is not connected")
        size = peer.pages.nbytes
        for desc in handle.announcement.pages:
            off = desc.addr - peer.base
            if off < 0 or off + desc.nbytes > size:
                raise AnnouncementRefused(
                    "descriptor", f"page {desc.page} lies outside {peer.name!r}'s memory"
                )

    def _bind(self, handle: ImportHandle, chunk: int, segs: list[Segment]) -> Any:
        return list(segs)

    def _local(self, addr: int, n: int) -> Any:
        """The ``n`` bytes at local ``addr``: a view of the staging buffer or of a
        registered region (host or device memory, as the buffer is)."""
        pool = self.pool.buffer
        base = buffer_address(pool)
        if base <= addr and addr + n <= base + pool.nbytes:
            return pool[addr - base : addr - base + n]
        region = self._region_of(addr, n)
        if region is None:  # the bind checks make this unreachable
            raise TransportError(f"local address {addr:#x} is not registered")
        flat = region.reshape(-1)
        start = addr - buffer_address(region)
        return flat[start : start + n]

    def _post(self, handle: ImportHandle, chunk: int) -> bool:
        peer = self.peers[handle.announcement.agent]
        if not peer.alive:
            raise ImportFailed(handle.request.req_id, chunk, f"prefiller {peer.name!r} is gone",
                               "prefiller_lost")
        flat = peer.pages.reshape(-1)
        for local, remote, n, _ in handle.tokens[chunk]:
            off = remote - peer.base
            self.pool.write(self._local(local, n), flat[off : off + n])
        return True

    def _check(self, handle: ImportHandle, chunk: int) -> bool:
        return True

    def _drop(self, handle: ImportHandle) -> None:
        for i, dests in enumerate(handle.dests):
            if dests is None:
                handle.tokens[i] = None

    def _register(self, buf: Any) -> None:
        return None

    def _deregister(self, buf: Any) -> None:
        return None
