"""The resolver's decisions, without bytes: the oracle of ``docs/resolver.md``.

``decide`` computes what a resolve does (rows, miss plan, counters, next hot state) on
copies of the hot state, so a capacity failure leaves the caller's state untouched and
any executor can be checked against it. Moving bytes is the executor's job.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from hisparse.executor.base import NO_ENTRY, ResolveBatch
from hisparse.executor.errors import BadBatch, HotCapacityError
from hisparse.executor.layout import PoolLayout


@dataclass(frozen=True, eq=False)
class Decision:
    """A resolve's outcome: ``ResolveResult`` fields plus the hot state to commit."""

    rows: NDArray[np.int32]
    plan: NDArray[np.int32]
    hot_tag: NDArray[np.int64]
    hot_stamp: NDArray[np.int64]
    resident_hits: int
    hot_hits: int
    misses: int


def reset_hot_slot(
    layout: PoolLayout, hot_tag: NDArray[np.int64], hot_stamp: NDArray[np.int64], slot: int
) -> None:
    """Empty one slot's hot rows (tags and stamps NO_ENTRY): the one rule every executor
    that keeps hot state follows when a slot is handed to a new request."""
    if hot_tag.shape[0] == 0:
        raise BadBatch("a follower's pools have no hot state to reset")
    if not 0 <= slot < layout.slots:
        raise BadBatch(f"slot {slot} outside 0..{layout.slots - 1}")
    hot_tag[slot] = NO_ENTRY
    hot_stamp[slot] = NO_ENTRY


def _victims(
    stamp: NDArray[np.int64], in_use: NDArray[np.bool_], count: int
) -> NDArray[np.intp]:
    """The ``count`` hot rows to refill: not in use, least (stamp, row index) first."""
    free = np.flatnonzero(~in_use)
    order = np.lexsort((free, stamp[free]))  # last key is primary: stamp, then index
    return free[order[:count]]


def decide(
    layout: PoolLayout,
    hot_tag: NDArray[np.int64],
    hot_stamp: NDArray[np.int64],
    batch: ResolveBatch,
) -> Decision:
    """Apply the resolver rules to a validated ``batch``; the inputs are not modified.

    Raises ``HotCapacityError`` when an entry's misses outnumber its slot's rows that
    the batch has not yet used.
    """
    tag = hot_tag.copy()
    stamp = hot_stamp.copy()
    step = int(batch.step)
    n, k = batch.topk.shape
    rows = np.full((n, k), NO_ENTRY, dtype=np.int32)
    plan: list[tuple[int, int]] = []
    in_use: dict[int, NDArray[np.bool_]] = {}
    resident_hits = hot_hits = misses = 0

    for e in range(n):
        slot = int(batch.slots[e])
        used = in_use.setdefault(slot, np.zeros(layout.hot_rows, dtype=np.bool_))
        topk, resident, host = batch.topk[e], batch.resident_row[e], batch.host_row[e]

        # Rules 1-2: padding stays -1; a resident position exits before any hot lookup.
        real = topk != NO_ENTRY
        is_resident = real & (resident >= 0)
        rows[e, is_resident] = resident[is_resident]
        resident_hits += int(is_resident.sum())
        lookups = np.flatnonzero(real & ~is_resident)
        if lookups.size == 0:
            continue

        # Rule 3: hot hits refresh their stamp and join the rows this batch uses.
        where = {int(p): j for j, p in enumerate(tag[slot]) if p != NO_ENTRY}
        held: dict[int, int] = {}
        missing: dict[int, int] = {}  # position -> index of its first occurrence
        for i in lookups:
            p = int(topk[i])
            if p in held or p in missing:
                continue
            j = where.get(p)
            if j is None:
                missing[p] = int(i)
            else:
                held[p] = j
                stamp[slot, j] = step
                used[j] = True

        # Rules 4-5: distinct misses, in first-occurrence order, take LRU victims.
        free = int((~used).sum())
        if len(missing) > free:
            raise HotCapacityError(e, slot, len(missing), free)
        victims = _victims(stamp[slot], used, len(missing))
        for (p, first), victim in zip(missing.items(), victims, strict=True):
            j = int(victim)
            tag[slot, j] = p
            stamp[slot, j] = step
            used[j] = True
            held[p] = j
            plan.append((layout.hot_row(slot, j), int(host[first])))

        for i in lookups:
            rows[e, i] = layout.hot_row(slot, held[int(topk[i])])
        misses += len(missing)
        hot_hits += int(lookups.size) - len(missing)

    return Decision(
        rows=rows,
        plan=np.array(plan, dtype=np.int32).reshape(-1, 2),
        hot_tag=tag,
        hot_stamp=stamp,
        resident_hits=resident_hits,
        hot_hits=hot_hits,
        misses=misses,
    )
