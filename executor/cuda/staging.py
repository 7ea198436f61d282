"""The P/D import staging pool in VRAM, for the CUDA executor.

A host import READs each page into a staging slot, then the CUDA executor copies it
device -> pinned host blocks (``write_host_blocks``: a cache's blocks of every page that
landed in one launch; ``write_host_block`` one block) and the mirror copies it device ->
device into its resident rows. With the slots in VRAM every one of those copies, the zeroing of a
slot as it is leased, and a loopback READ (host -> device) run on the executor's compute
stream, so stream order alone keeps a slot from being overwritten before its bytes were
copied out, and every decode launched later sees the bytes. A writer outside that stream
(a NIXL READ) first calls ``fence``. Built by ``CudaExecutor.staging_pool``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from hisparse.executor.cuda.backend import load_cupy
from hisparse.transport.errors import TransportError
from hisparse.transport.staging import StagingPool, on_device


class DeviceStagingPool(StagingPool):
    """``StagingPool`` whose buffer is a CuPy array on GPU ``device``.

    ``stream`` is the executor's compute stream; ``before_write`` (the executor's
    ``order_after_spills``) runs before a READ writes device memory, so a resident block
    a queued spill still reads is written only after that spill has read it.
    """

    def __init__(
        self, capacity_bytes: int, slots: int, page_bytes: int, *, stream: Any,
        device: int = 0, before_write: Callable[[], None] | None = None,
    ) -> None:
        self._cupy = load_cupy()
        self.stream = stream
        self.device = device
        self._before_write = before_write
        super().__init__(capacity_bytes, slots, page_bytes)

    def _allocate(self, nbytes: int) -> Any:
        """Zeroed VRAM, allocated and zeroed in stream order."""
        cupy = self._cupy
        with cupy.cuda.Device(self.device), self.stream:
            return cupy.zeros(nbytes, dtype=cupy.uint8)

    def _zero(self, slot: int) -> None:
        """Zero the slot on the stream: after every queued copy out of its last page."""
        with self._cupy.cuda.Device(self.device), self.stream:
            self.view(slot).fill(0)

    def write(self, dst: Any, src: np.ndarray) -> None:
        """A loopback READ: host bytes into a device view (a slot or block memory), one
        asynchronous host -> device copy on the stream."""
        if not on_device(dst):
            raise TransportError("a device staging pool writes device memory only")
        if self._before_write is not None:
            self._before_write()
        with self._cupy.cuda.Device(self.device), self.stream:
            dst.set(np.ascontiguousarray(src, dtype=np.uint8), stream=self.stream)

    def fence(self) -> None:
        """Wait (host-side) until every queued operation on the stream, and every spill
        the stream was ordered after, has finished."""
        if self._before_write is not None:
            self._before_write()
        self.stream.synchronize()
