"""The executor interface: what the NumPy reference and the CUDA executor both implement.

An executor owns the bytes of a cache's pools and the copies between them; it never
decides which logical block lives where (the coordinator does). ``docs/resolver.md``
states the resolver's rules, which every implementation must reproduce bit for bit.
Arrays are typed as NumPy arrays; a device executor passes its own array type with the
same shapes and dtypes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np
from numpy.typing import NDArray

from hisparse.executor.layout import PoolLayout

__all__ = [
    "CachePools", "Executor", "PoolLayout", "ResolveBatch", "ResolveResult", "Resolved",
    "SpillCopy",
]

NO_ENTRY = -1
"""``hot_tag`` / ``hot_stamp`` of a hot row that holds nothing; also padding in ``topk``."""


class CachePools(Protocol):
    """One cache's (one layer's) pools, as ``Executor.allocate`` returns them.

    ``device``: uint8 [layout.device_rows, row_bytes], resident rows then hot rows.
    ``host``: uint8 [layout.host_rows, row_bytes], as a direct CPU reader may see it.
    ``hot_tag``: int64 [slots, H], the logical position each hot row holds, or -1.
    ``hot_stamp``: int64 [slots, H], the step that last used each hot row, or -1.
    """

    @property
    def layout(self) -> PoolLayout: ...

    @property
    def device(self) -> NDArray[np.uint8]: ...

    @property
    def host(self) -> NDArray[np.uint8]: ...

    @property
    def hot_tag(self) -> NDArray[np.int64]: ...

    @property
    def hot_stamp(self) -> NDArray[np.int64]: ...


@dataclass(frozen=True, eq=False)
class ResolveBatch:
    """One decode batch of top-K lookups: ``n`` entries of ``K`` positions each.

    Entry ``e`` belongs to hot-state slot ``slots[e]``. Entries of one slot are
    consecutive and in verification order (speculative decoding resolves a request's
    steps as several entries). Per position: ``topk`` is the logical token position
    (-1 = padding, duplicates allowed), ``resident_row`` the resident device row holding
    it or -1, ``host_row`` the host row holding it (read on a miss). ``step`` stamps
    every hot row this batch uses and must exceed the previous call's step on the pools.
    """

    slots: NDArray[np.int32]  # [n]
    topk: NDArray[np.int32]  # [n, K]
    resident_row: NDArray[np.int32]  # [n, K]
    host_row: NDArray[np.int32]  # [n, K]
    step: int


@dataclass(frozen=True, eq=False)
class ResolveResult:
    """What a resolve returns: device rows to attend over, the miss plan, and counters.

    ``rows``: int32 [n, K], the packed device row of each position, -1 for padding.
    ``plan``: int32 [m, 2], (hot device row, host row) per copy made, in the order made
    (entry, then first occurrence); index-sharing followers replay exactly this.
    Counters classify every non-padding position occurrence exactly once (their sum is
    the number of non-padding positions): a resident hit has ``resident_row >= 0``; a miss
    is the first occurrence in its entry of a non-resident position absent from the
    slot's hot rows when that entry starts; every other occurrence is a hot hit (including
    rows filled by an earlier entry of the batch and repeats of a missed position).
    """

    rows: NDArray[np.int32]
    plan: NDArray[np.int32]
    resident_hits: int
    hot_hits: int
    misses: int

    def to_host(self) -> ResolveResult:
        """Already on the host: itself (see ``Resolved``)."""
        return self


class Resolved(Protocol):
    """What ``Executor.resolve`` returns: ``rows`` for attention, ``plan`` for ``replay``.

    Both may live on the device; ``to_host()`` is the one explicit (and, on an accelerator,
    synchronizing) way to see the whole result as a ``ResolveResult``.
    """

    @property
    def rows(self) -> Any: ...

    @property
    def plan(self) -> Any: ...

    def to_host(self) -> ResolveResult: ...


SpillCopy = tuple[int, int, int]
"""One spill copy: (transfer ID, source GPU block, destination host block)."""


PoolsT = TypeVar("PoolsT", bound=CachePools)


class Executor(Protocol[PoolsT]):
    """Bytes, copies and hot-row replacement for HiSparse caches.

    Spill acknowledgements follow the seed's two-ack transaction: ``enqueue_spill``
    returning is the *enqueued* ack (the source GPU block may be reused: the copy has
    taken its bytes in stream order); the ID appearing in ``completed()`` is the
    *completed* ack (the bytes are in the host pool and may be published).
    """

    def allocate(self, layout: PoolLayout, *, lru: bool = True) -> PoolsT:
        """Pools for one cache: zeroed bytes, every hot row empty (tag and stamp -1).

        ``lru=False`` is for index-sharing followers: no ``hot_tag``/``hot_stamp`` rows
        (shape ``[0, H]``), so they hold no LRU state and can only be replayed into.
        """
        ...

    def enqueue_spill(
        self, pools: PoolsT, transfer_id: int, src_gpu_block: int, dst_host_block: int
    ) -> None:
        """Queue the copy of a resident GPU block into a host block.

        Coordinates are checked on the host before anything is queued (``BadTransfer``).
        One transfer ID names at most one copy per pools (one per cache of the page);
        it completes once every copy queued under it has landed.
        """
        ...

    def enqueue_spills(self, pools: PoolsT, spills: Sequence[SpillCopy]) -> None:
        """``enqueue_spill`` for a whole step's spills of one cache, all or nothing."""
        ...

    @property
    def copies_spills(self) -> bool:
        """Whether ``enqueue_spills`` copies bytes into the host pool. False only for a
        reader rank on a shared host pool, which orders its reads after the writer's
        copies and moves no bytes itself."""
        ...

    def completed(self) -> list[int]:
        """Transfer IDs whose copies have all landed since the last call; never blocks."""
        ...

    def queued(self) -> list[int]:
        """Transfer IDs enqueued whose landing has not been observed yet, oldest first."""
        ...

    def release(self, count: int | None = None) -> None:
        """Let the ``count`` oldest queued transfers land (all when None), for drains and
        tests: the reference lands them; an accelerator waits for them."""
        ...

    def reset_slot(self, pools: PoolsT, slot: int) -> None:
        """Empty one slot's hot state (every row empty) for a newly admitted request."""
        ...

    def read_host_rows(self, pools: PoolsT, rows: NDArray[np.int64]) -> NDArray[np.uint8]:
        """Copy host rows out for a direct CPU reader (the host-write guard).

        Never returns bytes a queued copy is about to replace: while a copy still targets
        one of the rows' blocks it either refuses with ``PendingHostWrite`` (the reference)
        or waits for that copy's host-write event (an accelerator executor may).
        """
        ...

    def resolve(self, pools: PoolsT, batch: ResolveBatch) -> Resolved:
        """Map every top-K position to a device row, filling hot rows on misses.

        Atomic: the whole batch is validated (``BadBatch``, ``HotCapacityError``) before
        any hot state or byte changes. Miss copies read the host pool as stream-ordered
        device work sees it: every spill enqueued before this call has landed for them.
        """
        ...

    def replay(self, follower: PoolsT, plan: Any) -> None:
        """Apply a leader's miss plan to an index-sharing follower: copies only.

        The follower's hot rows receive its own host bytes for the leader's positions, so
        the leader's ``rows`` index the follower's device pool too. The follower's
        ``hot_tag`` / ``hot_stamp`` are not touched: it has no LRU state of its own.
        ``plan`` is a resolve result's ``plan`` (in whatever form the executor keeps it)
        or an int32 [m, 2] host array.
        """
        ...

    def write_device_rows(
        self, pools: PoolsT, rows: NDArray[np.int64], data: NDArray[np.uint8]
    ) -> None:
        """Write whole device rows: prefill in tests and simulations."""
        ...

    def read_device_rows(self, pools: PoolsT, rows: NDArray[np.int64]) -> NDArray[np.uint8]:
        """Copy device rows to the host: checkers and tests, never the decode path."""
        ...

    def snapshot(self, pools: PoolsT) -> dict[str, NDArray[Any]]:
        """Host copies of ``device``, ``host``, ``hot_tag`` and ``hot_stamp`` (tests)."""
        ...
