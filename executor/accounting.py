"""The accounting executor: residency, hot rows and LRU exactly, no bytes.

Production sizes (DeepSeek-V3.2 rows over 61 layers, a 100 GiB GPU pool, hundreds of GiB
of host pool) do not fit in a CPU's memory, and a replay of them needs no bytes to answer
a sizing question: which top-K positions hit which tier, what is copied, what is
spilled. This executor keeps exactly the state that decides that (every slot's hot tags
and stamps, the copy stream's queued and landed transfers) and returns the same rows,
miss plans and counters as the reference executor, with zero-width pools: ``device``
and ``host`` are ``[rows, 0]`` arrays, so reading rows back returns no bytes. The
worker counts bytes moved from the layout's ``row_bytes`` either way.

Its decision is ``docs/resolver.md``'s rules vectorized per entry (the reference's
``resolver.decide`` walks positions in Python, which is the oracle, not a replay
engine); ``tests/test_accounting_executor.py`` checks that both agree exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from hisparse.executor.base import NO_ENTRY, ResolveBatch, ResolveResult, SpillCopy
from hisparse.executor.errors import BadPlan, HotCapacityError
from hisparse.executor.layout import PoolLayout
from hisparse.executor.resolver import reset_hot_slot
from hisparse.executor.stream import QueuedCopy, SpillStream
from hisparse.executor.validate import check_batch, check_plan, check_spills


@dataclass(eq=False)
class AccountingPools:
    """One cache's pools without bytes (``device``/``host`` have zero-width rows)."""

    layout: PoolLayout
    device: NDArray[np.uint8]
    host: NDArray[np.uint8]
    hot_tag: NDArray[np.int64]
    hot_stamp: NDArray[np.int64]
    last_step: int | None = None


class AccountingExecutor:
    """``Executor[AccountingPools]``: the reference's decisions and stream, no bytes."""

    def __init__(self) -> None:
        self._stream = SpillStream()

    @property
    def copies_spills(self) -> bool:
        """Every spill is accounted as copied (``Executor.copies_spills``)."""
        return True

    def allocate(self, layout: PoolLayout, *, lru: bool = True) -> AccountingPools:
        hot_shape = (layout.slots if lru else 0, layout.hot_rows)
        return AccountingPools(
            layout=layout,
            device=np.zeros((layout.device_rows, 0), dtype=np.uint8),
            host=np.zeros((layout.host_rows, 0), dtype=np.uint8),
            hot_tag=np.full(hot_shape, NO_ENTRY, dtype=np.int64),
            hot_stamp=np.full(hot_shape, NO_ENTRY, dtype=np.int64),
        )

    def enqueue_spill(
        self, pools: AccountingPools, transfer_id: int, src_gpu_block: int, dst_host_block: int
    ) -> None:
        self.enqueue_spills(pools, [(transfer_id, src_gpu_block, dst_host_block)])

    def enqueue_spills(self, pools: AccountingPools, spills: Sequence[SpillCopy]) -> None:
        """Queue several spills of one cache (checked as the reference checks them)."""
        checked = check_spills(pools.layout, spills)
        for t, _, d in checked:
            self._stream.check(t, pools.host, d)
        empty = np.zeros((pools.layout.block_tokens, 0), dtype=np.uint8)
        for t, _, d in checked:
            self._stream.push(t, QueuedCopy(pools.host, d, empty))

    def release(self, count: int | None = None) -> None:
        self._stream.release(count)

    def queued(self) -> list[int]:
        return self._stream.queued()

    def completed(self) -> list[int]:
        return self._stream.completed()

    def read_host_rows(
        self, pools: AccountingPools, rows: NDArray[np.int64]
    ) -> NDArray[np.uint8]:
        """Zero-width rows; refuses while a copy is queued into them, as the reference."""
        return pools.host[self._stream.readable_rows(pools.layout, pools.host, rows)].copy()

    def reset_slot(self, pools: AccountingPools, slot: int) -> None:
        """Empty one slot's hot rows (``reset_hot_slot``)."""
        reset_hot_slot(pools.layout, pools.hot_tag, pools.hot_stamp, slot)

    def resolve(self, pools: AccountingPools, batch: ResolveBatch) -> ResolveResult:
        """Validate, decide on copies of the touched slots, then commit them."""
        check_batch(pools.layout, batch, pools.last_step)
        result, touched = decide_vectorized(pools.layout, pools.hot_tag, pools.hot_stamp, batch)
        for slot, (tag, stamp) in touched.items():
            pools.hot_tag[slot] = tag
            pools.hot_stamp[slot] = stamp
        pools.last_step = int(batch.step)
        return result

    def replay(self, follower: AccountingPools, plan: Any) -> None:
        """A follower's copies move no bytes here; the plan is still checked."""
        check_plan(follower.layout, np.asarray(plan, dtype=np.int32).reshape(-1, 2))

    def write_device_rows(
        self, pools: AccountingPools, rows: NDArray[np.int64], data: NDArray[np.uint8]
    ) -> None:
        """Nothing to write; the rows are still range-checked."""
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size and (rows.min() < 0 or rows.max() >= pools.layout.device_rows):
            raise BadPlan(f"device rows outside 0..{pools.layout.device_rows - 1}")

    def read_device_rows(
        self, pools: AccountingPools, rows: NDArray[np.int64]
    ) -> NDArray[np.uint8]:
        """Zero-width rows: this executor holds no bytes."""
        return pools.device[np.asarray(rows, dtype=np.int64)].copy()

    def snapshot(self, pools: AccountingPools) -> dict[str, NDArray[Any]]:
        return {
            "device": pools.device.copy(),
            "host": pools.host.copy(),
            "hot_tag": pools.hot_tag.copy(),
            "hot_stamp": pools.hot_stamp.copy(),
        }


def decide_vectorized(
    layout: PoolLayout,
    hot_tag: NDArray[np.int64],
    hot_stamp: NDArray[np.int64],
    batch: ResolveBatch,
) -> tuple[ResolveResult, dict[int, tuple[NDArray[np.int64], NDArray[np.int64]]]]:
    """``resolver.decide``'s rules, one entry at a time with array operations.

    Returns the result and each touched slot's new (tags, stamps); the inputs are not
    modified, so a ``HotCapacityError`` leaves the caller's state as it was.
    """
    step = int(batch.step)
    n, k = batch.topk.shape
    rows = np.full((n, k), NO_ENTRY, dtype=np.int32)
    plans: list[NDArray[np.int32]] = []
    touched: dict[int, tuple[NDArray[np.int64], NDArray[np.int64]]] = {}
    in_use: dict[int, NDArray[np.bool_]] = {}
    resident_hits = hot_hits = misses = 0
    base = layout.resident_rows
    for e in range(n):
        slot = int(batch.slots[e])
        if slot not in touched:
            touched[slot] = (hot_tag[slot].copy(), hot_stamp[slot].copy())
            in_use[slot] = np.zeros(layout.hot_rows, dtype=np.bool_)
        tag, stamp = touched[slot]
        used = in_use[slot]
        topk, resident, host = batch.topk[e], batch.resident_row[e], batch.host_row[e]
        real = topk != NO_ENTRY
        is_resident = real & (resident >= 0)
        rows[e, is_resident] = resident[is_resident]
        resident_hits += int(np.count_nonzero(is_resident))
        lookups = np.flatnonzero(real & ~is_resident)
        if lookups.size == 0:
            continue
        wanted = topk[lookups].astype(np.int64)
        uniq, first, inverse = np.unique(wanted, return_index=True, return_inverse=True)
        # which distinct positions the slot already holds, and in which hot row
        held_rows = np.flatnonzero(tag != NO_ENTRY)
        order = np.argsort(tag[held_rows], kind="stable")
        sorted_tags = tag[held_rows][order]
        at = np.searchsorted(sorted_tags, uniq)
        at_c = np.minimum(at, max(sorted_tags.size - 1, 0))
        found = (
            (sorted_tags[at_c] == uniq) if sorted_tags.size else np.zeros(uniq.size, bool)
        )
        row_of = np.full(uniq.size, -1, dtype=np.int64)
        row_of[found] = held_rows[order[at_c[found]]]
        stamp[row_of[found]] = step
        used[row_of[found]] = True
        # misses in first-occurrence order take the LRU victims (stamp, then row index)
        miss_idx = np.flatnonzero(~found)
        miss_idx = miss_idx[np.argsort(first[miss_idx], kind="stable")]
        free_rows = np.flatnonzero(~used)
        if miss_idx.size > free_rows.size:
            raise HotCapacityError(e, slot, int(miss_idx.size), int(free_rows.size))
        victims = free_rows[np.lexsort((free_rows, stamp[free_rows]))[: miss_idx.size]]
        tag[victims] = uniq[miss_idx]
        stamp[victims] = step
        used[victims] = True
        row_of[miss_idx] = victims
        hot = base + slot * layout.hot_rows
        rows[e, lookups] = (hot + row_of[inverse]).astype(np.int32)
        if miss_idx.size:
            plans.append(np.stack(
                [hot + victims, host[lookups[first[miss_idx]]].astype(np.int64)], axis=1
            ).astype(np.int32))
        misses += int(miss_idx.size)
        hot_hits += int(lookups.size - miss_idx.size)
    plan = np.concatenate(plans) if plans else np.zeros((0, 2), dtype=np.int32)
    return ResolveResult(
        rows=rows, plan=plan, resident_hits=resident_hits, hot_hits=hot_hits, misses=misses
    ), touched
