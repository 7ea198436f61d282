"""The NumPy reference executor: resolver rules, follower replay, and the spill stream.

Hand-computed cases pin each rule of docs/resolver.md; a Hypothesis property compares
the executor with a deliberately naive pure-Python resolver written here, and checks
that every returned row holds the bytes written for its position.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

from hisparse.executor import (
    BadBatch,
    BadHostRead,
    BadPlan,
    BadTransfer,
    Executor,
    ExecutorConfigError,
    HotCapacityError,
    PendingHostWrite,
    PoolLayout,
    ReferenceExecutor,
    ReferencePools,
    ResolveBatch,
    ResolveResult,
    min_hot_rows,
)

_CONFORMS: type[Executor[ReferencePools]] = ReferenceExecutor  # mypy checks the protocol

# Small layout used by the hand-computed cases: resident rows 0..3, slot 0's hot rows
# 4..6, slot 1's hot rows 7..9, host rows 0..7.
SPEC = PoolLayout(gpu_blocks=2, host_blocks=4, block_tokens=2, row_bytes=16, hot_rows=3, slots=2)
HOT0 = SPEC.hot_row(0, 0)

Entry = tuple[int, Sequence[int], Sequence[int] | None, Sequence[int] | None]


def pos_bytes(position: int, row_bytes: int, salt: int = 0) -> NDArray[np.uint8]:
    """Bytes that identify ``position`` (and which cache wrote them, via ``salt``)."""
    row = (np.arange(row_bytes, dtype=np.int64) * 7 + position * 31 + salt * 101) % 251
    row[:4] = np.frombuffer(np.int32(position + 1).tobytes(), dtype=np.uint8)
    row[4] = salt
    return row.astype(np.uint8)


def make_batch(step: int, entries: Sequence[Entry]) -> ResolveBatch:
    """A batch from (slot, topk, resident_row or None: all -1, host_row or None: see below).

    The default host row of position p is ``p % SPEC.host_rows``.
    """
    k = len(entries[0][1]) if entries else 0
    topk = np.array([e[1] for e in entries], dtype=np.int32).reshape(-1, k)
    res = [e[2] if e[2] is not None else [-1] * k for e in entries]
    host = [e[3] if e[3] is not None else [max(p, 0) % SPEC.host_rows for p in e[1]] for e in entries]
    return ResolveBatch(
        slots=np.array([e[0] for e in entries], dtype=np.int32),
        topk=topk,
        resident_row=np.array(res, dtype=np.int32).reshape(-1, k),
        host_row=np.array(host, dtype=np.int32).reshape(-1, k),
        step=step,
    )


def fresh(layout: PoolLayout = SPEC, salt: int = 0) -> tuple[ReferenceExecutor, ReferencePools]:
    """An executor and pools whose host row r (and resident row r) hold ``pos_bytes(r)``."""
    ex = ReferenceExecutor()
    pools = ex.allocate(layout)
    for r in range(layout.host_rows):
        pools.host[r] = pos_bytes(r, layout.row_bytes, salt)
    for r in range(layout.resident_rows):
        pools.device[r] = pos_bytes(r, layout.row_bytes, salt)
    return ex, pools


def state(pools: ReferencePools) -> tuple[bytes, bytes, bytes, bytes, int | None]:
    return (
        pools.device.tobytes(),
        pools.host.tobytes(),
        pools.hot_tag.tobytes(),
        pools.hot_stamp.tobytes(),
        pools.last_step,
    )


def counters(r: ResolveResult) -> tuple[int, int, int]:
    return (r.resident_hits, r.hot_hits, r.misses)


# --- layout ---------------------------------------------------------------------------


def test_layout_rows() -> None:
    assert (SPEC.resident_rows, SPEC.device_rows, SPEC.host_rows) == (4, 10, 8)
    assert SPEC.resident_row(1, 1) == 3
    assert SPEC.hot_row(1, 2) == 4 + 3 + 2
    assert SPEC.host_row(3, 0) == 6
    assert min_hot_rows(top_k=4, num_speculative_tokens=2) == 12
    ex = ReferenceExecutor()
    p = ex.allocate(SPEC)
    assert p.device.shape == (10, 16) and p.host.shape == (8, 16)
    assert (p.hot_tag == -1).all() and (p.hot_stamp == -1).all()


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"gpu_blocks": 0}, "gpu_blocks must be at least 1"),
        ({"slots": 1.0}, "slots must be an int"),
        ({"hot_rows": True}, "hot_rows must be an int"),
        ({"row_bytes": 20}, "pad rows to 32"),
    ],
)
def test_pool_spec_refuses(change: dict[str, object], needle: str) -> None:
    args: dict[str, object] = {
        "gpu_blocks": 1, "host_blocks": 1, "block_tokens": 1, "row_bytes": 16,
        "hot_rows": 1, "slots": 1,
    }
    args.update(change)
    with pytest.raises(ExecutorConfigError, match=needle):
        PoolLayout(**args)  # type: ignore[arg-type]


# --- resolver rules, hand-computed ------------------------------------------------------


def test_padding_maps_to_minus_one_and_ignores_its_rows() -> None:
    ex, pools = fresh()
    before = state(pools)
    r = ex.resolve(pools, make_batch(0, [(0, [-1, -1], [99, -7], [-5, 1000])]))
    assert r.rows.tolist() == [[-1, -1]]
    assert counters(r) == (0, 0, 0) and r.plan.shape == (0, 2)
    assert state(pools)[:4] == before[:4]


def test_resident_entry_touches_no_hot_state() -> None:
    ex, pools = fresh()
    ex.resolve(pools, make_batch(1, [(0, [5, 6], None, None)]))
    tags, stamps = pools.hot_tag.copy(), pools.hot_stamp.copy()
    # Position 5 is also hot, but a resident occurrence exits before the hot lookup.
    r = ex.resolve(pools, make_batch(2, [(0, [5, -1], [3, -1], None)]))
    assert r.rows.tolist() == [[3, -1]]
    assert counters(r) == (1, 0, 0) and r.plan.size == 0
    assert (pools.hot_tag == tags).all() and (pools.hot_stamp == stamps).all()


def test_miss_fills_lru_row_from_host_then_hit_refreshes_stamp() -> None:
    ex, pools = fresh()
    r = ex.resolve(pools, make_batch(1, [(0, [5], None, [2])]))
    assert r.rows.tolist() == [[HOT0]] and r.plan.tolist() == [[HOT0, 2]]
    assert counters(r) == (0, 0, 1)
    assert (pools.device[HOT0] == pos_bytes(2, 16)).all()
    assert pools.hot_tag[0].tolist() == [5, -1, -1]
    assert pools.hot_stamp[0].tolist() == [1, -1, -1]
    r = ex.resolve(pools, make_batch(7, [(0, [5], None, [4])]))  # host_row unused on a hit
    assert r.rows.tolist() == [[HOT0]] and r.plan.size == 0
    assert counters(r) == (0, 1, 0)
    assert pools.hot_stamp[0].tolist() == [7, -1, -1]
    assert (pools.device[HOT0] == pos_bytes(2, 16)).all()


def test_victims_empty_rows_first_then_oldest_stamp_then_lowest_index() -> None:
    ex, pools = fresh()
    ex.resolve(pools, make_batch(1, [(0, [10, 11, 12], None, None)]))
    assert pools.hot_tag[0].tolist() == [10, 11, 12]  # empty rows, in index order
    r = ex.resolve(pools, make_batch(2, [(0, [13], None, None)]))
    assert r.rows.tolist() == [[HOT0]]  # all stamps 1: the tie goes to row 0
    r = ex.resolve(pools, make_batch(3, [(0, [15, 14], None, None)]))
    assert r.rows.tolist() == [[HOT0 + 1, HOT0 + 2]]  # rows 1, 2 (stamp 1) in row order
    assert pools.hot_tag[0].tolist() == [13, 15, 14]
    assert pools.hot_stamp[0].tolist() == [2, 3, 3]
    ex.resolve(pools, make_batch(4, [(0, [13], None, None)]))  # refresh row 0
    r = ex.resolve(pools, make_batch(5, [(0, [20], None, None)]))
    assert r.rows.tolist() == [[HOT0 + 1]] and pools.hot_tag[0].tolist() == [13, 20, 14]
    assert (pools.hot_tag[1] == -1).all()  # other slots untouched


def test_duplicates_share_one_row_and_one_copy() -> None:
    ex, pools = fresh()
    r = ex.resolve(pools, make_batch(1, [(0, [9, 9, -1, 9, 4], [-1, -1, -1, 2, -1], [1, 6, 0, 0, 3])]))
    assert r.rows.tolist() == [[HOT0, HOT0, -1, 2, HOT0 + 1]]
    assert r.plan.tolist() == [[HOT0, 1], [HOT0 + 1, 3]]  # first occurrence's host row
    assert counters(r) == (1, 1, 2)


def test_hits_are_taken_before_misses_pick_victims() -> None:
    ex, pools = fresh()
    ex.resolve(pools, make_batch(1, [(0, [10], None, None)]))
    ex.resolve(pools, make_batch(2, [(0, [11, 12], None, None)]))
    # Row 0 (position 10) is the LRU row, but 10 is hit later in this entry, so the
    # miss on 13 (earlier in topk) must take row 1 instead.
    r = ex.resolve(pools, make_batch(3, [(0, [13, 10], None, None)]))
    assert r.rows.tolist() == [[HOT0 + 1, HOT0]]
    assert counters(r) == (0, 1, 1)


def test_speculative_steps_share_state_and_keep_earlier_rows() -> None:
    layout = PoolLayout(gpu_blocks=1, host_blocks=8, block_tokens=2, row_bytes=16, hot_rows=4, slots=2)
    ex, pools = fresh(layout)
    h = layout.hot_row(0, 0)
    batch = make_batch(
        1, [(0, [1, 2], None, None), (0, [2, 3], None, None), (1, [1, 1], None, None)]
    )
    r = ex.resolve(pools, batch)
    # The second step hits the first step's row for 2 and misses 3 into a fresh row.
    assert r.rows.tolist() == [[h, h + 1], [h + 1, h + 2], [layout.hot_row(1, 0)] * 2]
    assert counters(r) == (0, 2, 4)
    assert r.plan.tolist() == [[h, 1], [h + 1, 2], [h + 2, 3], [layout.hot_row(1, 0), 1]]
    for (e, i), p in np.ndenumerate(batch.topk):
        assert (pools.device[r.rows[e, i]] == pos_bytes(int(p), 16)).all()


def test_capacity_error_when_earlier_step_holds_rows_and_state_unchanged() -> None:
    ex, pools = fresh()  # H = 3
    ex.resolve(pools, make_batch(1, [(0, [7], None, None)]))
    before = state(pools)
    spec_batch = make_batch(2, [(0, [1, 2], None, None), (0, [3, 4], None, None)])
    with pytest.raises(HotCapacityError) as info:
        ex.resolve(pools, spec_batch)
    assert (info.value.entry, info.value.slot, info.value.needed, info.value.free) == (1, 0, 2, 1)
    assert state(pools) == before
    # The failed call did not consume step 2.
    r = ex.resolve(pools, make_batch(2, [(0, [1, 2], None, None)]))
    assert counters(r) == (0, 0, 2)


def _good() -> dict[str, object]:
    return {
        "slots": np.array([0], np.int32),
        "topk": np.array([[1, 2]], np.int32),
        "resident_row": np.array([[-1, 0]], np.int32),
        "host_row": np.array([[1, 2]], np.int32),
        "step": 5,
    }


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("topk", np.array([[1, 2]], np.int64), "topk must be a 2-d int32"),
        ("slots", np.array([[0]], np.int32), "slots must be a 1-d int32"),
        ("host_row", np.array([[1, 2, 3]], np.int32), "host_row has shape"),
        ("slots", np.array([2], np.int32), "slot 2 outside"),
        ("topk", np.array([[1, -2]], np.int32), "below -1"),
        ("resident_row", np.array([[-1, 4]], np.int32), "resident_row 4 outside"),
        ("host_row", np.array([[8, 2]], np.int32), "needs host_row"),
        ("host_row", np.array([[-1, 2]], np.int32), "needs host_row"),
        ("step", 3, "must exceed"),
        ("step", -1, "must be >= 0"),
        ("step", True, "step must be an int"),
    ],
)
def test_bad_batch_refused_without_change(field: str, value: object, needle: str) -> None:
    ex, pools = fresh()
    ex.resolve(pools, make_batch(3, [(1, [6], None, None)]))
    before = state(pools)
    args = _good()
    args[field] = value
    with pytest.raises(BadBatch, match=needle):
        ex.resolve(pools, ResolveBatch(**args))  # type: ignore[arg-type]
    assert state(pools) == before


def test_entries_of_a_slot_must_be_consecutive() -> None:
    ex, pools = fresh()
    batch = make_batch(0, [(0, [1], None, None), (1, [1], None, None), (0, [2], None, None)])
    with pytest.raises(BadBatch, match="consecutive"):
        ex.resolve(pools, batch)


def test_resident_position_needs_no_host_row() -> None:
    ex, pools = fresh()
    r = ex.resolve(pools, make_batch(0, [(0, [1], [2], [-1])]))
    assert r.rows.tolist() == [[2]]


# --- naive oracle and the property test ----------------------------------------------------


NaiveOut = tuple[list[list[int]], list[tuple[int, int]], tuple[int, int, int]]


def naive_resolve(
    layout: PoolLayout, tag: list[list[int]], stamp: list[list[int]], entries: Sequence[Entry],
    step: int,
) -> NaiveOut | None:
    """docs/resolver.md in plain loops; mutates ``tag``/``stamp``; None on a capacity error."""
    h = layout.hot_rows
    used: dict[int, set[int]] = {}
    rows: list[list[int]] = []
    plan: list[tuple[int, int]] = []
    res_hits = hot_hits = misses = 0
    for slot, topk, resident, host in entries:
        assert resident is not None and host is not None
        used.setdefault(slot, set())
        out = [-1] * len(topk)
        row_of: dict[int, int] = {}
        missed: list[tuple[int, int]] = []
        for i, p in enumerate(topk):
            if p != -1 and resident[i] >= 0:
                out[i] = resident[i]
                res_hits += 1
        for i, p in enumerate(topk):
            if p == -1 or resident[i] >= 0 or p in row_of or any(m == p for m, _ in missed):
                continue
            if p in tag[slot]:
                j = tag[slot].index(p)
                stamp[slot][j] = step
                used[slot].add(j)
                row_of[p] = j
            else:
                missed.append((p, i))
        for p, i in missed:
            free = [j for j in range(h) if j not in used[slot]]
            if not free:
                return None
            j = min(free, key=lambda j: (stamp[slot][j], j))
            tag[slot][j] = p
            stamp[slot][j] = step
            used[slot].add(j)
            row_of[p] = j
            plan.append((layout.hot_row(slot, j), host[i]))
        first = {i for _, i in missed}
        for i, p in enumerate(topk):
            if p != -1 and resident[i] < 0:
                out[i] = layout.hot_row(slot, row_of[p])
                if i in first:
                    misses += 1
                else:
                    hot_hits += 1
        rows.append(out)
    return rows, plan, (res_hits, hot_hits, misses)


@st.composite
def worlds(draw: st.DrawFn) -> tuple[PoolLayout, int, dict[int, int], dict[int, int]]:
    """A layout, K, and where each logical position lives (host row; resident row or none)."""
    bt = draw(st.integers(1, 3))
    k = draw(st.integers(1, 4))
    n_pos = draw(st.integers(1, 10))
    layout = PoolLayout(
        gpu_blocks=draw(st.integers(1, 3)),
        host_blocks=-(-n_pos // bt) + draw(st.integers(0, 1)),
        block_tokens=bt,
        row_bytes=16,
        hot_rows=draw(st.integers(k, 3 * k)),
        slots=draw(st.integers(1, 3)),
    )
    host_of = dict(enumerate(draw(st.permutations(range(layout.host_rows)))[:n_pos]))
    res_rows = draw(st.permutations(range(layout.resident_rows)))
    flags = draw(st.lists(st.booleans(), min_size=n_pos, max_size=n_pos))
    resident_of = {p: r for (p, f), r in zip(enumerate(flags), res_rows, strict=False) if f}
    return layout, k, host_of, resident_of


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world=worlds(), data=st.data())
def test_matches_naive_resolver_and_rows_hold_their_bytes(
    world: tuple[PoolLayout, int, dict[int, int], dict[int, int]], data: st.DataObject
) -> None:
    layout, k, host_of, resident_of = world
    follower_layout = PoolLayout(
        gpu_blocks=layout.gpu_blocks, host_blocks=layout.host_blocks, block_tokens=layout.block_tokens,
        row_bytes=32, hot_rows=layout.hot_rows, slots=layout.slots,
    )
    ex = ReferenceExecutor()
    leader, follower = ex.allocate(layout), ex.allocate(follower_layout)
    for pools, salt in ((leader, 0), (follower, 1)):
        for p, r in host_of.items():
            pools.host[r] = pos_bytes(p, pools.layout.row_bytes, salt)
        for p, r in resident_of.items():
            pools.device[r] = pos_bytes(p, pools.layout.row_bytes, salt)
    tag = [[-1] * layout.hot_rows for _ in range(layout.slots)]
    stamp = [[-1] * layout.hot_rows for _ in range(layout.slots)]
    expected_device = leader.device.copy()
    position = st.sampled_from([-1, *host_of])

    step = data.draw(st.integers(0, 2))
    for _ in range(data.draw(st.integers(1, 5))):
        order = data.draw(st.permutations(range(layout.slots)))
        entries: list[Entry] = []
        for slot in order[: data.draw(st.integers(1, layout.slots))]:
            for _ in range(data.draw(st.integers(1, 3))):
                topk = data.draw(st.lists(position, min_size=k, max_size=k))
                keep = data.draw(st.lists(st.booleans(), min_size=k, max_size=k))
                resident = [
                    resident_of.get(p, -1) if p != -1 and kept else -1
                    for p, kept in zip(topk, keep, strict=True)
                ]
                host = [host_of[p] if p != -1 else 0 for p in topk]
                entries.append((slot, topk, resident, host))
        batch = make_batch(step, entries)

        new_tag, new_stamp = [list(r) for r in tag], [list(r) for r in stamp]
        want = naive_resolve(layout, new_tag, new_stamp, entries, step)
        if want is None:
            before = (state(leader), state(follower))
            with pytest.raises(HotCapacityError):
                ex.resolve(leader, batch)
            assert (state(leader), state(follower)) == before
        else:
            got = ex.resolve(leader, batch)
            ex.replay(follower, got.plan)
            rows, plan, counts = want
            tag, stamp = new_tag, new_stamp
            for hot, src in plan:
                expected_device[hot] = leader.host[src]
            assert got.rows.tolist() == rows
            assert [tuple(p) for p in got.plan.tolist()] == plan
            assert counters(got) == counts
            assert sum(counts) == int((batch.topk != -1).sum())
            assert leader.hot_tag.tolist() == tag and leader.hot_stamp.tolist() == stamp
            assert (leader.device == expected_device).all()
            # U (rows used by this call) is exactly the rows stamped with this step.
            stamped = {layout.hot_row(s, j) for s, j in np.argwhere(leader.hot_stamp == step)}
            assert stamped == {int(r) for r in got.rows.flat if r >= layout.resident_rows}
            for tags in leader.hot_tag:
                held = tags[tags != -1]
                assert len(np.unique(held)) == len(held)
            for (e, i), pos in np.ndenumerate(batch.topk):
                if pos != -1:
                    row = got.rows[e, i]
                    assert (leader.device[row] == pos_bytes(int(pos), 16, 0)).all()
                    assert (follower.device[row] == pos_bytes(int(pos), 32, 1)).all()
        step += data.draw(st.integers(1, 3))


# --- follower replay ---------------------------------------------------------------------


def test_replay_copies_follower_bytes_only() -> None:
    ex, leader = fresh()
    follower = ex.allocate(SPEC)
    follower.host[:] = 200
    follower.host[3] = pos_bytes(3, 16, salt=1)
    r = ex.resolve(leader, make_batch(1, [(1, [30], None, [3])]))
    ex.replay(follower, r.plan)
    row = int(r.rows[0, 0])
    assert (follower.device[row] == pos_bytes(3, 16, salt=1)).all()
    assert (follower.hot_tag == -1).all() and (follower.hot_stamp == -1).all()
    assert int((follower.device != 0).any(axis=1).sum()) == 1


@pytest.mark.parametrize(
    ("plan", "needle"),
    [
        (np.array([[3, 0]], np.int32), "outside the hot region"),
        (np.array([[10, 0]], np.int32), "outside the hot region"),
        (np.array([[4, 8]], np.int32), "host row 8"),
        (np.array([[4, 0], [4, 1]], np.int32), "twice"),
        (np.array([[4, 0]], np.int64), "int32"),
    ],
)
def test_replay_refuses_bad_plan(plan: NDArray[np.int32], needle: str) -> None:
    ex, pools = fresh()
    before = state(pools)
    with pytest.raises(BadPlan, match=needle):
        ex.replay(pools, plan)
    assert state(pools) == before


# --- spill stream ------------------------------------------------------------------------


def block(pools: ReferencePools, tier: str, b: int) -> NDArray[np.uint8]:
    bt = pools.layout.block_tokens
    arr = pools.device if tier == "gpu" else pools.host
    return arr[b * bt : (b + 1) * bt]


def test_spill_lands_only_on_release_with_bytes_as_of_enqueue() -> None:
    ex, pools = fresh()
    source = block(pools, "gpu", 1).copy()
    old_host = block(pools, "host", 2).copy()
    ex.enqueue_spill(pools, 7, src_gpu_block=1, dst_host_block=2)
    block(pools, "gpu", 1)[:] = 0xEE  # the source block is reused right after enqueue
    assert ex.completed() == [] and ex.queued() == [7]
    assert (block(pools, "host", 2) == old_host).all()
    with pytest.raises(PendingHostWrite) as info:
        ex.read_host_rows(pools, np.array([0, 5], np.int64))
    assert (info.value.host_block, info.value.transfer_id) == (2, 7)
    assert str(info.value) == ("host block 2 still has copy 7 queued into it; "
                               "wait until completed() reports it")
    assert (ex.read_host_rows(pools, np.array([0, 3])) == pools.host[[0, 3]]).all()
    ex.release()
    assert ex.completed() == [7] and ex.completed() == []
    assert (block(pools, "host", 2) == source).all()
    assert (ex.read_host_rows(pools, np.array([4, 5])) == source).all()


def test_resolve_reads_queued_spill_in_stream_order() -> None:
    ex, pools = fresh()
    source = pools.device[2].copy()  # block 1, offset 0
    ex.enqueue_spill(pools, 1, src_gpu_block=1, dst_host_block=3)
    pools.device[2] = 0
    r = ex.resolve(pools, make_batch(0, [(0, [40], None, [6])]))  # host row 6 = block 3
    assert (pools.device[r.rows[0, 0]] == source).all()
    assert ex.completed() == []


def test_release_is_oldest_first_and_counts_transfers() -> None:
    ex, a = fresh()
    b = ex.allocate(SPEC)  # a second cache (layer): one transfer ID spans both
    ex.enqueue_spill(a, 4, 0, 0)
    ex.enqueue_spill(b, 4, 0, 0)
    ex.enqueue_spill(a, 5, 1, 1)
    ex.release(1)
    assert ex.completed() == [4] and ex.queued() == [5]
    assert (block(a, "host", 0) == block(a, "gpu", 0)).all()
    with pytest.raises(ValueError, match="cannot release 2"):
        ex.release(2)
    ex.release(None)
    assert ex.completed() == [5]


@pytest.mark.parametrize(
    ("tid", "src", "dst", "needle"),
    [
        (1, -1, 0, "src_gpu_block -1"),
        (1, 2, 0, "src_gpu_block 2 must be in 0..1"),
        (1, 0, 4, "dst_host_block 4 must be in 0..3"),
        (-1, 0, 0, "transfer_id -1"),
        (True, 0, 0, "transfer_id must be an int"),
        (9, 0, 1, "one transfer moves one page"),
        (8, 0, 0, "still has copy 9 queued"),
        (3, 0, 2, "already completed"),
    ],
)
def test_bad_spill_refused_without_change(tid: int, src: int, dst: int, needle: str) -> None:
    ex, pools = fresh()
    ex.enqueue_spill(pools, 3, 1, 3)
    ex.release()  # 3 has landed but is not yet reported
    ex.enqueue_spill(pools, 9, 1, 0)
    before = state(pools)
    with pytest.raises(BadTransfer, match=needle):
        ex.enqueue_spill(pools, tid, src, dst)
    assert state(pools) == before and ex.queued() == [9]
    ex.release()
    assert ex.completed() == [3, 9]


def test_read_host_rows_refuses_out_of_range() -> None:
    ex, pools = fresh()
    with pytest.raises(BadHostRead, match="host row 8"):
        ex.read_host_rows(pools, np.array([1, 8]))
    with pytest.raises(BadHostRead, match="1-d integer"):
        ex.read_host_rows(pools, np.array([[1]]))


def test_batched_spills_are_all_or_nothing() -> None:
    ex, pools = fresh()
    ex.enqueue_spills(pools, [(1, 0, 0), (2, 1, 1)])
    assert ex.queued() == [1, 2]
    before = state(pools)
    for spills in ([(5, 0, 2), (6, 1, 2)],  # one host block twice in one batch
                   [(5, 0, 2), (5, 1, 3)],  # one transfer ID twice for one cache
                   [(5, 0, 2), (6, 1, 0)]):  # a destination still in flight
        with pytest.raises(BadTransfer):
            ex.enqueue_spills(pools, spills)
        assert state(pools) == before and ex.queued() == [1, 2]
    ex.release()
    assert ex.completed() == [1, 2]
    assert (block(pools, "host", 1) == block(pools, "gpu", 1)).all()


def test_reset_slot_and_direct_row_access() -> None:
    ex, pools = fresh()
    ex.resolve(pools, make_batch(1, [(1, [10, 11], None, None)]))
    assert (pools.hot_tag[1] != -1).any()
    ex.reset_slot(pools, 1)
    assert (pools.hot_tag[1] == -1).all() and (pools.hot_stamp[1] == -1).all()
    with pytest.raises(BadBatch, match="slot 2"):
        ex.reset_slot(pools, 2)
    with pytest.raises(BadBatch, match="follower"):
        ex.reset_slot(ex.allocate(SPEC, lru=False), 0)
    data = np.arange(2 * SPEC.row_bytes, dtype=np.uint8).reshape(2, -1)
    ex.write_device_rows(pools, np.array([1, 4]), data)
    assert (ex.read_device_rows(pools, np.array([4, 1])) == data[::-1]).all()
    with pytest.raises(BadPlan, match="device rows"):
        ex.write_device_rows(pools, np.array([SPEC.device_rows]), data[:1])
    snap = ex.snapshot(pools)
    assert set(snap) == {"device", "host", "hot_tag", "hot_stamp"}
    snap["device"][:] = 0  # a copy: the pools are unaffected
    assert (pools.device[4] == data[1]).all()
