"""The reference executor's refusals at the exact edge: the last valid value is accepted,
the first invalid one (often -1 or the size) is refused and changes nothing.

``tests/test_executor_reference.py`` covers the refusals far outside; these pin the limits.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from hisparse.executor import BadBatch, BadHostRead, BadPlan, BadTransfer, ResolveBatch
from tests.test_executor_reference import SPEC, fresh, state


def batch(**change: Any) -> ResolveBatch:
    args: dict[str, Any] = {
        "slots": np.array([0], np.int32),
        "topk": np.array([[1, 2]], np.int32),
        "resident_row": np.array([[-1, 0]], np.int32),
        "host_row": np.array([[1, -1]], np.int32),
        "step": 0,
    }
    args.update(change)
    return ResolveBatch(**args)


LAST_SLOT = SPEC.slots - 1
LAST_RES = SPEC.resident_rows - 1
LAST_HOST = SPEC.host_rows - 1


@pytest.mark.parametrize(
    "change",
    [
        {"slots": np.array([LAST_SLOT], np.int32)},
        {"resident_row": np.array([[-1, LAST_RES]], np.int32)},
        {"host_row": np.array([[LAST_HOST, -1]], np.int32)},
        {"host_row": np.array([[0, -1]], np.int32)},
        {"topk": np.array([[-1, 2]], np.int32), "host_row": np.array([[-7, -1]], np.int32)},
        {"step": 0},
    ],
)
def test_batch_inside(change: dict[str, Any]) -> None:
    ex, pools = fresh()
    ex.resolve(pools, batch(**change))
    assert pools.last_step == change.get("step", 0)


@pytest.mark.parametrize(
    "change",
    [
        {"slots": np.array([-1], np.int32)},
        {"slots": np.array([SPEC.slots], np.int32)},
        {"resident_row": np.array([[-1, LAST_RES + 1]], np.int32)},
        {"resident_row": np.array([[-1, -2]], np.int32)},
        {"host_row": np.array([[LAST_HOST + 1, -1]], np.int32)},
        {"host_row": np.array([[-1, -1]], np.int32)},
        {"topk": np.array([[-2, 2]], np.int32)},
        {"topk": np.array([[1]], np.int32)},
        {"slots": np.array([0, 0], np.int32)},
        {"step": -1},
        {"step": 1.5},
    ],
)
def test_batch_outside(change: dict[str, Any]) -> None:
    ex, pools = fresh()
    before = state(pools)
    with pytest.raises(BadBatch):
        ex.resolve(pools, batch(**change))
    assert state(pools) == before


def test_step_must_grow_by_at_least_one() -> None:
    ex, pools = fresh()
    ex.resolve(pools, batch(step=4))
    before = state(pools)
    with pytest.raises(BadBatch, match="must exceed"):
        ex.resolve(pools, batch(step=4))
    assert state(pools) == before
    ex.resolve(pools, batch(step=5))
    assert pools.last_step == 5


def test_empty_batch_is_accepted() -> None:
    ex, pools = fresh()
    empty = np.zeros((0, 2), np.int32)
    r = ex.resolve(pools, batch(slots=np.zeros(0, np.int32), topk=empty, resident_row=empty,
                                host_row=empty))
    assert (r.resident_hits, r.hot_hits, r.misses) == (0, 0, 0)


def plan(*rows: tuple[int, int]) -> np.ndarray[Any, np.dtype[np.int32]]:
    return np.array(rows, np.int32).reshape(-1, 2)


@pytest.mark.parametrize(
    "p",
    [plan((SPEC.resident_rows, 0)), plan((SPEC.device_rows - 1, LAST_HOST)), plan()],
)
def test_plan_inside(p: np.ndarray[Any, np.dtype[np.int32]]) -> None:
    ex, pools = fresh()
    ex.replay(pools, p)
    for hot, src in p:
        assert (pools.device[hot] == pools.host[src]).all()


@pytest.mark.parametrize(
    "p",
    [
        plan((LAST_RES, 0)),
        plan((SPEC.device_rows, 0)),
        plan((SPEC.resident_rows, -1)),
        plan((SPEC.resident_rows, LAST_HOST + 1)),
        plan((SPEC.resident_rows, 0), (SPEC.resident_rows, 1)),
        np.zeros((1, 3), np.int32),
        np.zeros((1, 2), np.int64),
    ],
)
def test_plan_outside(p: np.ndarray[Any, np.dtype[Any]]) -> None:
    ex, pools = fresh()
    before = state(pools)
    with pytest.raises(BadPlan):
        ex.replay(pools, p)
    assert state(pools) == before


def test_host_reads_at_the_edge() -> None:
    ex, pools = fresh()
    rows = ex.read_host_rows(pools, np.array([0, LAST_HOST]))
    assert (rows == pools.host[[0, LAST_HOST]]).all()
    for bad in ([-1], [LAST_HOST + 1], [0.5]):
        with pytest.raises(BadHostRead):
            ex.read_host_rows(pools, np.array(bad))


def test_spill_coordinates_at_the_edge() -> None:
    ex, pools = fresh()
    ex.enqueue_spill(pools, 0, SPEC.gpu_blocks - 1, SPEC.host_blocks - 1)
    assert ex.queued() == [0]
    before = state(pools)
    # a bool is no block ID in any field (validate.py:135:cmp:36 and 37 took True as 1)
    for tid, src, dst in ((1, SPEC.gpu_blocks, 0), (1, 0, SPEC.host_blocks), (1, 0, -1),
                          (1.0, 0, 0), (True, 0, 0), (1, True, 0), (1, 0, True), (-1, 0, 0)):
        with pytest.raises(BadTransfer):
            ex.enqueue_spill(pools, tid, src, dst)  # type: ignore[arg-type]
        assert state(pools) == before and ex.queued() == [0]
    for batch in ([(1, 0, 0), (2, 0)], [(1, 0, 0), (2, 0, 1, 9)], [(1, 0, 2), (np.int64(2), 0, 2)]):
        with pytest.raises(BadTransfer):  # a wrong arity, or a host block twice
            ex.enqueue_spills(pools, batch)  # type: ignore[arg-type]
        assert state(pools) == before and ex.queued() == [0]
    ex.enqueue_spills(pools, [(np.int64(3), np.int32(1), 2)])  # type: ignore[list-item]
    assert ex.queued() == [0, 3]  # NumPy ints are ints too
    ex.release()
    assert ex.completed() == [0, 3]
    start = SPEC.host_row(SPEC.host_blocks - 1, 0)
    res = SPEC.resident_row(SPEC.gpu_blocks - 1, 0)
    bt = SPEC.block_tokens
    assert (pools.host[start : start + bt] == pools.device[res : res + bt]).all()


def test_device_rows_and_slots_at_the_edge() -> None:
    ex, pools = fresh()
    data = np.full((1, SPEC.row_bytes), 7, np.uint8)
    ex.write_device_rows(pools, np.array([SPEC.device_rows - 1]), data)
    assert (pools.device[SPEC.device_rows - 1] == 7).all()
    before = state(pools)
    with pytest.raises(BadPlan):
        ex.write_device_rows(pools, np.array([-1]), data)
    assert state(pools) == before
    ex.write_device_rows(pools, np.array([0]), data)  # the first row is a row too
    assert (pools.device[0] == 7).all()
    ex.resolve(pools, batch(slots=np.array([0], np.int32)))
    assert (pools.hot_tag[0] != -1).any()
    ex.reset_slot(pools, 0)
    assert (pools.hot_tag[0] == -1).all() and (pools.hot_stamp[0] == -1).all()
    ex.reset_slot(pools, LAST_SLOT)
    with pytest.raises(BadBatch):
        ex.reset_slot(pools, -1)


def test_a_topk_below_minus_one_is_named_by_its_own_position() -> None:
    """An empty entry (-1) before the bad one must not be the one the refusal names."""
    ex, pools = fresh()
    before = state(pools)
    with pytest.raises(BadBatch, match=r"entry 0 position 1: topk -2 is below -1"):
        ex.resolve(pools, batch(topk=np.array([[-1, -2]], np.int32)))
    assert state(pools) == before


@pytest.mark.parametrize(("cls", "what", "advice"), [
    ("StaleStep", "the launch's step did not exceed the last completed launch's step on "
     "these pools (a graph replay without a new step)",
     "raise the step before every launch; the pools are unchanged"),
    ("LaunchConflict", "another launch held these pools (concurrent launches on one cache, "
     "or a launch that never finished)",
     "every launch on these pools refuses until CudaExecutor.recover(pools)"),
    ("CopyWaitExpired", "a copy helper waited too long for a miss plan and skipped its copies",
     "the hot rows may be incomplete: CudaExecutor.recover(pools)"),
])
def test_a_refused_launch_says_how_many_blocks_why_and_what_to_do(
        cls: str, what: str, advice: str) -> None:
    # the CUDA executor raises these from the device's report; their words are the
    # engine's only clue (executor/errors.py:102:call:4 left LaunchConflict without them)
    from hisparse.executor import errors

    err = getattr(errors, cls)(3)
    assert isinstance(err, errors.LaunchRefused) and err.blocks == 3
    assert str(err) == f"3 resolver block(s) refused: {what}; {advice}"


def test_a_staged_page_into_a_host_block_is_refused_out_of_range_or_misshapen() -> None:
    # the reference's refusals of write_host_block, each changing nothing (only the GPU
    # test compared them before; executor/validate.py:171:raise:19 let a misshapen page in)
    from hisparse.executor import BadPlan, PoolLayout, ReferenceExecutor

    layout = PoolLayout(gpu_blocks=2, host_blocks=3, block_tokens=4, row_bytes=16,
                        hot_rows=4, slots=1)
    ex = ReferenceExecutor()
    pools = ex.allocate(layout)
    before = pools.host.copy()
    page = np.full((4, 16), 7, np.uint8)
    for block, data, why in (
        (3, page, "host block 3 outside 0..2"), (-1, page, "host block -1 outside 0..2"),
        (1, page[:-1], r"a host block is 4 rows of 16 bytes, got \(3, 16\)"),
        (1, page.reshape(8, 8), r"a host block is 4 rows of 16 bytes, got \(8, 8\)"),
    ):
        with pytest.raises(BadPlan, match=f"^{why}$"):
            ex.write_host_block(pools, block, data)
        assert np.array_equal(pools.host, before)
    ex.write_host_block(pools, 2, page)
    assert (pools.host[8:12] == 7).all() and np.array_equal(pools.host[:8], before[:8])
