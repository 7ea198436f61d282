"""The NumPy reference executor: real bytes on the CPU, runs everywhere.

It is the oracle the CUDA executor is tested against, so it favours plain, checked
steps over speed. Decisions come from ``resolver.decide``; spills go through a modelled
stream whose completions the caller releases explicitly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from hisparse.executor.base import NO_ENTRY, ResolveBatch, ResolveResult, SpillCopy
from hisparse.executor.errors import BadPlan, PendingHostWrite
from hisparse.executor.layout import PoolLayout
from hisparse.executor.resolver import decide, reset_hot_slot
from hisparse.executor.stream import QueuedCopy, SpillStream
from hisparse.executor.validate import check_batch, check_host_block, check_plan, check_spills


@dataclass(eq=False)
class ReferencePools:
    """One cache's pools as NumPy arrays (see ``CachePools``)."""

    layout: PoolLayout
    device: NDArray[np.uint8]
    host: NDArray[np.uint8]
    hot_tag: NDArray[np.int64]
    hot_stamp: NDArray[np.int64]
    last_step: int | None = None
    """Step of the last successful resolve; the next one must be larger."""


class ReferenceExecutor:
    """``Executor[ReferencePools]`` over NumPy arrays, with a caller-driven copy stream.

    ``release`` stands in for the accelerator finishing copies: until it is called,
    enqueued spills are in flight, ``completed()`` does not report them, direct CPU
    reads of their host blocks are refused, and only device work (resolve, replay)
    sees their bytes.
    """

    def __init__(self) -> None:
        self._stream = SpillStream()

    @property
    def copies_spills(self) -> bool:
        """Every spill is copied here (``Executor.copies_spills``)."""
        return True

    def allocate(self, layout: PoolLayout, *, lru: bool = True) -> ReferencePools:
        """Zeroed pools with every hot row empty; ``lru=False`` (an index-sharing
        follower) allocates no LRU state: such pools can only be replayed into."""
        hot_shape = (layout.slots if lru else 0, layout.hot_rows)
        return ReferencePools(
            layout=layout,
            device=np.zeros((layout.device_rows, layout.row_bytes), dtype=np.uint8),
            host=np.zeros((layout.host_rows, layout.row_bytes), dtype=np.uint8),
            hot_tag=np.full(hot_shape, NO_ENTRY, dtype=np.int64),
            hot_stamp=np.full(hot_shape, NO_ENTRY, dtype=np.int64),
        )

    def enqueue_spill(
        self, pools: ReferencePools, transfer_id: int, src_gpu_block: int, dst_host_block: int
    ) -> None:
        """Snapshot resident block ``src_gpu_block`` into the stream toward ``dst_host_block``."""
        self.enqueue_spills(pools, [(transfer_id, src_gpu_block, dst_host_block)])

    def enqueue_spills(self, pools: ReferencePools, spills: Sequence[SpillCopy]) -> None:
        """Queue several spills of one cache; all are checked before any is queued."""
        layout = pools.layout
        checked = check_spills(layout, spills)
        for t, _, d in checked:
            self._stream.check(t, pools.host, d)
        bt = layout.block_tokens
        for t, src, d in checked:
            start = layout.resident_row(src, 0)
            data = pools.device[start : start + bt].copy()
            self._stream.push(t, QueuedCopy(pools.host, d, data))

    def release(self, count: int | None = None) -> None:
        """Let the ``count`` oldest queued transfers finish (all when None)."""
        self._stream.release(count)

    def queued(self) -> list[int]:
        """Transfer IDs enqueued and not yet finished, oldest first."""
        return self._stream.queued()

    def completed(self) -> list[int]:
        """Transfer IDs finished since the last call; never blocks."""
        return self._stream.completed()

    def read_host_rows(
        self, pools: ReferencePools, rows: NDArray[np.int64]
    ) -> NDArray[np.uint8]:
        """Host rows for a CPU reader; refuses (does not wait) while a copy is queued into them.

        Refusing rather than waiting keeps completion under the caller's control, which
        is the point of the reference stream; the CUDA executor may wait on the event.
        """
        return pools.host[self._stream.readable_rows(pools.layout, pools.host, rows)].copy()

    def reset_slot(self, pools: ReferencePools, slot: int) -> None:
        """Empty one slot's hot rows (``reset_hot_slot``)."""
        reset_hot_slot(pools.layout, pools.hot_tag, pools.hot_stamp, slot)

    def resolve(self, pools: ReferencePools, batch: ResolveBatch) -> ResolveResult:
        """Validate, decide, then commit hot state and miss copies together."""
        check_batch(pools.layout, batch, pools.last_step)
        d = decide(pools.layout, pools.hot_tag, pools.hot_stamp, batch)
        self._copy_plan(pools, d.plan)
        pools.hot_tag[...] = d.hot_tag
        pools.hot_stamp[...] = d.hot_stamp
        pools.last_step = int(batch.step)
        return ResolveResult(
            rows=d.rows,
            plan=d.plan,
            resident_hits=d.resident_hits,
            hot_hits=d.hot_hits,
            misses=d.misses,
        )

    def replay(self, follower: ReferencePools, plan: NDArray[np.int32]) -> None:
        """Copy the follower's host rows into the hot rows a leader's plan names."""
        check_plan(follower.layout, plan)
        self._copy_plan(follower, plan)

    def write_device_rows(
        self, pools: ReferencePools, rows: NDArray[np.int64], data: NDArray[np.uint8]
    ) -> None:
        """Write whole device rows (prefill, tests)."""
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size and (rows.min() < 0 or rows.max() >= pools.layout.device_rows):
            raise BadPlan(f"device rows outside 0..{pools.layout.device_rows - 1}")
        pools.device[rows] = data

    def import_memory(self, pools: ReferencePools) -> NDArray[np.uint8]:
        """The resident region of the device pool (a view): direct import landing."""
        region: NDArray[np.uint8] = pools.device[: pools.layout.resident_rows]
        return region

    def write_host_block(
        self, pools: ReferencePools, host_block: int, data: NDArray[np.uint8]
    ) -> None:
        """A staged page into host block ``host_block``; refused while a spill copy is
        queued into it (``PendingHostWrite``), out of range as ``BadPlan``."""
        layout = pools.layout
        check_host_block(layout, host_block, tuple(data.shape))
        tid = self._stream.pending_into(pools.host, host_block)
        if tid is not None:  # a spill copy still lands there
            raise PendingHostWrite(host_block, tid)
        start = layout.host_row(host_block, 0)
        pools.host[start : start + layout.block_tokens] = data

    def read_device_rows(
        self, pools: ReferencePools, rows: NDArray[np.int64]
    ) -> NDArray[np.uint8]:
        """Copies of device rows."""
        return pools.device[np.asarray(rows, dtype=np.int64)].copy()

    def snapshot(self, pools: ReferencePools) -> dict[str, NDArray[Any]]:
        """Copies of every pool; ``host`` as a direct CPU reader sees it."""
        return {
            "device": pools.device.copy(),
            "host": pools.host.copy(),
            "hot_tag": pools.hot_tag.copy(),
            "hot_stamp": pools.hot_stamp.copy(),
        }

    def _copy_plan(self, pools: ReferencePools, plan: NDArray[np.int32]) -> None:
        src = plan[:, 1].astype(np.int64)
        bytes_ = self._stream.device_view(pools.host, src, pools.layout.block_tokens)
        pools.device[plan[:, 0]] = bytes_
