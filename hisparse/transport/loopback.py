"""In-process loopback transport: the oracle the NIXL transport is compared against.

A ``LoopbackPrefiller`` holds pages in a NumPy buffer and announces them with their real
addresses; the loopback transport resolves an announced address inside the buffers of
the prefillers it knows (as NIXL does with registered memory) and copies the valid bytes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hisparse.transport.base import ImportHandle, Transport
from hisparse.transport.errors import AnnouncementRefused, ImportFailed
from hisparse.transport.geometry import Announcement, PageDescriptor
from hisparse.transport.staging import StagingPool


class LoopbackPrefiller:
    """A prefiller in this process: ``pages`` (one row per page) under agent ``name``."""

    def __init__(self, name: str, pages: np.ndarray) -> None:
        if pages.ndim != 2 or pages.dtype != np.uint8:
            raise ValueError("pages must be a 2-D uint8 array, one row per page")
        self.name = name
        self.pages = np.ascontiguousarray(pages)
        self.alive = True

    @property
    def base(self) -> int:
        return int(self.pages.ctypes.data)

    def announce(
        self, req_id: str, num_tokens: int, row_bytes: int, block_size: int
    ) -> Announcement:
        """The honest announcement of all held pages as request ``req_id``."""
        stride = self.pages.shape[1]
        descs = tuple(
            PageDescriptor(i, self.base + i * stride, stride) for i in range(self.pages.shape[0])
        )
        return Announcement(self.name, req_id, num_tokens, row_bytes, block_size, descs)

    def kill(self) -> None:
        """The prefiller goes away: every later READ from it fails."""
        self.alive = False


class LoopbackTransport(Transport):
    """Copies from in-process prefillers' buffers into staging slots."""

    def __init__(self, pool: StagingPool, chunk_pages: int = 1, window: int = 1) -> None:
        super().__init__(pool, chunk_pages, window)
        self.peers: dict[str, LoopbackPrefiller] = {}

    def connect(self, peer: LoopbackPrefiller) -> None:
        self.peers[peer.name] = peer

    def _prepare(self, handle: ImportHandle) -> list[Any]:
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
        return [None] * len(handle.chunks)

    def _post(self, handle: ImportHandle, chunk: int) -> bool:
        peer = self.peers[handle.announcement.agent]
        if not peer.alive:
            raise ImportFailed(handle.request.req_id, chunk, f"prefiller {peer.name!r} is gone")
        flat = peer.pages.reshape(-1)
        for page in handle.chunks[chunk]:
            valid = handle.request.valid_bytes(page)
            off = handle.announcement.pages[page].addr - peer.base
            self.pool.view(handle.leases[page].slot)[:valid] = flat[off : off + valid]
        return True

    def _check(self, handle: ImportHandle, chunk: int) -> bool:
        return True

    def _drop(self, handle: ImportHandle) -> None:
        return None
