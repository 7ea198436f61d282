"""A cache's pools on an NVIDIA GPU: packed device rows, mapped pinned host rows, LRU state.

The host pool is page-locked and mapped into the device's address space, so the
resolver reads missing rows straight from it (zero-copy) and the spill kernel writes
straight into it; no staging buffer sits between the tiers. Its memory comes from a
``HostArena`` (``hostmem``): private pinned memory, or a region of one allocation that
tensor-parallel ranks share.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from hisparse.executor.cuda.backend import load_cupy
from hisparse.executor.cuda.hostmem import HostArena, HostBuffer, PinnedHostBuffer, PrivateHost
from hisparse.executor.cuda.kernels import (
    CTRL_LAST_STEP,
    CTRL_WORDS,
    REFUSE_CONFLICT,
    REFUSE_STALE,
    REFUSE_TIMEOUT,
    ResolverShape,
)
from hisparse.executor.errors import CopyWaitExpired, LaunchConflict, LaunchRefused, StaleStep
from hisparse.executor.layout import PoolLayout

ABSENT = 0x7FFFFFFF
"""``where`` entry of a position that is not hot (kernels.cu's ABSENT)."""

@dataclass(eq=False)
class CudaPools:
    """One cache's pools on the GPU (``CachePools`` with CuPy device arrays).

    ``device``, ``hot_tag`` and ``hot_stamp`` are CuPy arrays; ``host`` is a NumPy view
    of the pinned host pool (read it through ``CudaExecutor.read_host_rows``, which
    waits for copies in flight). ``lru_order`` caches each slot's rows sorted by
    (stamp, row), the kernel's victim order.
    """

    layout: PoolLayout
    shape: ResolverShape | None
    device: Any
    host: NDArray[np.uint8]
    host_device: Any
    hot_tag: Any
    hot_stamp: Any
    lru_order: Any
    where: Any
    """int32 [slots, max_positions]: position -> hot row (or ABSENT), kept with hot_tag."""
    ready: Any
    """int64 [slots]: the step whose miss plan for the slot is complete (copy helpers)."""
    ctrl: Any
    """int64 [CTRL_WORDS]: the resolver's launch control (owner, last step, tickets,
    blocks done, refusals); the last block of a launch resets the tickets."""
    pinned: HostBuffer
    """The host pool's memory: private pinned, or a region of a shared registration."""
    status: NDArray[np.int64] = field(default_factory=lambda: np.zeros(CTRL_WORDS, np.int64))
    """Refused resolver blocks per code, written by the device into mapped pinned memory
    (``status_device`` is the kernel's view): read without a sync or a copy."""
    status_device: Any = None
    status_pinned: HostBuffer | None = None
    refusals_seen: list[int] = field(default_factory=lambda: [0] * CTRL_WORDS)
    poisoned: bool = False
    """A conflict was reported: every launch refuses until ``CudaExecutor.recover``."""
    last_step: int | None = None
    pending_blocks: dict[int, int] = field(default_factory=dict)
    """Host block -> transfer ID of the copy still queued into it."""
    import_event: Any = None
    """Recorded on the compute stream after each import copy into a host block
    (``write_host_block``): the newest covers every earlier one."""
    import_blocks: set[int] = field(default_factory=set)
    """Host blocks written by an import since a CPU reader last waited on the event."""

    def check_launches(self, sticky: bool = True) -> None:
        """Raise what the device reported since the last check (``LaunchRefused``); a
        read of pinned host memory, never a sync. With ``sticky`` a poisoned cache raises
        every time (a launch on it would only refuse)."""
        error: LaunchRefused | None = None
        for code, kind in ((REFUSE_TIMEOUT, CopyWaitExpired), (REFUSE_STALE, StaleStep),
                           (REFUSE_CONFLICT, LaunchConflict)):
            count = int(self.status[code])
            if count > self.refusals_seen[code]:
                blocks = count - self.refusals_seen[code]
                self.refusals_seen[code] = count
                error = error or kind(blocks)
                if code != REFUSE_STALE:
                    self.poisoned = True
        if error is None and sticky and self.poisoned:
            error = LaunchConflict(0)
        if error is not None:
            raise error


def allocate_pools(
    layout: PoolLayout, shape: ResolverShape | None, host_arena: HostArena | None = None
) -> CudaPools:
    """Zeroed pools; ``shape`` None allocates a follower (no LRU state). The host pool
    comes from ``host_arena`` (default: private pinned memory of this process), the one
    place that decides its backing; a shared arena's bytes are not zeroed here, since
    another rank may already have written them (a new shared file reads as zeros)."""
    cupy = load_cupy()
    arena = host_arena if host_arena is not None else PrivateHost()
    pinned = arena.take(layout.host_rows * layout.row_bytes)
    host = pinned.host_view(layout.host_rows, layout.row_bytes)
    slots = layout.slots if shape is not None else 0
    positions = shape.max_positions if shape is not None else 0
    order = cupy.tile(cupy.arange(layout.hot_rows, dtype=cupy.int32), (slots, 1))
    status = PinnedHostBuffer(8 * CTRL_WORDS)
    host_status = np.asarray(status).view(np.int64)
    host_status[...] = 0
    ctrl = cupy.zeros(CTRL_WORDS, dtype=cupy.int64)
    ctrl[CTRL_LAST_STEP] = -1  # no launch has completed
    return CudaPools(
        layout=layout,
        shape=shape,
        device=cupy.zeros((layout.device_rows, layout.row_bytes), dtype=cupy.uint8),
        host=host,
        host_device=pinned.device_view(layout.host_rows, layout.row_bytes),
        hot_tag=cupy.full((slots, layout.hot_rows), -1, dtype=cupy.int64),
        hot_stamp=cupy.full((slots, layout.hot_rows), -1, dtype=cupy.int64),
        lru_order=order.reshape(slots, layout.hot_rows),
        where=cupy.full((slots, positions), ABSENT, dtype=cupy.int32),
        ready=cupy.full(slots, -1, dtype=cupy.int64),
        ctrl=ctrl,
        pinned=pinned,
        status=host_status,
        status_device=status.device_view(1, CTRL_WORDS, np.int64).reshape(CTRL_WORDS),
        status_pinned=status,
    )
