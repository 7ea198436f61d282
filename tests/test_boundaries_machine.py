"""Every typed refusal of the protocol machine, just outside and just inside its boundary.

Outside: the refusal is typed and the state (every variable, every auxiliary count) is
exactly as before. Inside: the same call with the boundary value is accepted, so the
limit is where the code says it is, not one off.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from hisparse.spec.constants import ProtocolConfig
from hisparse.spec.errors import (
    ActionNotEnabled,
    InvariantViolation,
    ProtocolError,
    UnknownTransfer,
)
from hisparse.spec.machine import ProtocolMachine
from hisparse.spec.state import Meta
from tests.protocol_helpers import full_spill, make_machine


def refused(
    m: ProtocolMachine, call: Callable[[], Any], error: type[ProtocolError] = ActionNotEnabled
) -> ProtocolError:
    """Assert ``call`` raises ``error`` and changes nothing; returns the error."""
    before = m.state.clone()
    checks = m.invariant_checks
    with pytest.raises(error) as err:
        call()
    assert m.state == before
    assert m.invariant_checks == checks
    return err.value


# --- constants ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rid", "keys"),
    [("", ["k"]), ("none", ["k"]), ("garbage", ["k"]), ("r9", []), ("r9", [""]),
     ("r9", ["k", "empty"]), ("r0", ["k"])],
)
def test_add_request_refusals(rid: str, keys: list[str]) -> None:
    m = make_machine()
    refused(m, lambda: m.add_request(rid, keys))


def test_add_request_inside() -> None:
    m = make_machine()
    m.add_request("r9", ["k9"])
    assert m.state.req["r9"] == "new"
    assert m.state.loc[("r9", 1)] is None
    assert m.state.prefix.get("k9", set()) == set()  # no published page: no entry


# --- scheduler actions -------------------------------------------------------------------


@pytest.mark.parametrize("action", ["Arrive", "Finish", "Abort"])
def test_unknown_request(action: str) -> None:
    m = make_machine()
    refused(m, lambda: getattr(m, action)("nobody"))


def test_arrive_twice_and_finish_before_arrive() -> None:
    m = make_machine()
    refused(m, lambda: m.Finish("r0"))
    m.Arrive("r0")
    refused(m, lambda: m.Arrive("r0"))
    m.Finish("r0")
    refused(m, lambda: m.Finish("r0"))
    refused(m, lambda: m.Abort("r0"))


def test_abort_of_new_request_is_allowed_once() -> None:
    m = make_machine()
    assert m.Abort("r0") == []
    assert m.state.req["r0"] == "aborted"
    refused(m, lambda: m.Abort("r0"))
    refused(m, lambda: m.Arrive("r0"))


@pytest.mark.parametrize("blocks", [[-1, 0], [0, 3], [0, 0], [0], [0, 1, 2]])
def test_arrive_block_choice_outside(blocks: list[int]) -> None:
    m = make_machine(gpu_blocks=3)
    refused(m, lambda: m.Arrive("r0", blocks=blocks))


def test_arrive_taken_block_refused() -> None:
    m = make_machine(gpu_blocks=3)
    m.Arrive("r3", blocks=[2])
    refused(m, lambda: m.Arrive("r0", blocks=[1, 2]))
    m.Arrive("r0", blocks=[1, 0])  # inside: any two distinct free blocks, in any order
    assert m.state.loc[("r0", 1)] == ("gpu", 1)
    assert m.state.loc[("r0", 2)] == ("gpu", 0)
    assert m.state.gpu_owner == [("r0", 2), ("r0", 1), ("r3", 1)]


def test_arrive_needs_exactly_the_free_blocks() -> None:
    m = make_machine(gpu_blocks=3)
    m.Arrive("r3")  # one left... two free
    m2 = make_machine(gpu_blocks=2)
    m2.Arrive("r3")  # one free, r0 needs two
    refused(m2, lambda: m2.Arrive("r0"))
    m.Arrive("r0")  # exactly two free: accepted
    assert all(o is not None for o in m.state.gpu_owner)
    refused(m, lambda: m.Arrive("r1"))  # zero free, one needed


def _published(m: ProtocolMachine) -> None:
    """r1's only page k0 spilled and published on host 2; r1 finished."""
    m.Arrive("r1")
    full_spill(m, ("r1", 1), 2)
    m.Finish("r1")


def test_arrive_hosts_must_be_the_published_copies() -> None:
    m = make_machine()
    _published(m)
    assert m.hit_len("r0") == 1
    refused(m, lambda: m.Arrive("r0", hosts=[1]))  # right length, not a copy of k0
    refused(m, lambda: m.Arrive("r0", hosts=[2, 2]))  # longer than the hit
    m.Arrive("r0", hosts=[2])
    assert m.state.loc[("r0", 1)] == ("host", 2)
    assert m.state.host_refs[2] == 1


def test_arrive_with_a_capped_hit() -> None:
    """``hosts=[]`` caps the 1-page hit at 0 (the indexer suffix fallback): the page
    gets a GPU block that prefill writes, and the published copy stays unreferenced."""
    m = make_machine()
    _published(m)
    m.Arrive("r0", hosts=[])
    assert m.state.loc[("r0", 1)] is not None and m.state.loc[("r0", 1)][0] == "gpu"
    assert m.state.host_refs.get(2, 0) == 0


def test_prefix_hit_needs_only_the_missing_blocks() -> None:
    m = make_machine(gpu_blocks=1)
    _published(m)
    m.Arrive("r0")  # two pages, one hit: one GPU block is enough
    assert m.state.loc[("r0", 2)] == ("gpu", 0)


@pytest.mark.parametrize("h", [-1, 4])
def test_start_spill_host_out_of_range(h: int) -> None:
    m = make_machine()  # 9 units / 2 = 4 host blocks: 0..3
    m.Arrive("r0")
    refused(m, lambda: m.StartSpill(("r0", 1), h))


def test_start_spill_last_host_block_inside() -> None:
    m = make_machine()
    m.Arrive("r0")
    m.StartSpill(("r0", 1), 3)
    assert m.state.host_state[3] == "leased"


@pytest.mark.parametrize("page", [("r0", 0), ("r0", 3), ("r1", 1), ("r0", -1)])
def test_start_spill_page_outside(page: tuple[str, int]) -> None:
    m = make_machine()
    m.Arrive("r0")
    refused(m, lambda: m.StartSpill(page, 0))


def test_start_spill_refusals_by_state() -> None:
    m = make_machine()
    refused(m, lambda: m.StartSpill(("r0", 1), 0))  # r0 is new
    m.Arrive("r0")
    m.StartSpill(("r0", 1), 0)
    refused(m, lambda: m.StartSpill(("r0", 1), 1))  # already pinned
    refused(m, lambda: m.StartSpill(("r0", 2), 0))  # host block 0 is leased
    m.drain()
    refused(m, lambda: m.StartSpill(("r0", 1), 1))  # now on the host, not the GPU
    m.Finish("r0")
    refused(m, lambda: m.StartSpill(("r0", 2), 1))  # finished


def test_host_capacity_is_the_limit_not_the_universe() -> None:
    # 5 units / 2 a block: capacity 2 over a universe of 3 IDs
    m = make_machine(gpu_blocks=4, host_pool_bytes=5, host_blocks=3)
    m.Arrive("r0")
    m.Arrive("r3")
    m.StartSpill(("r0", 1), 0)
    m.StartSpill(("r0", 2), 2)  # the second of two: inside
    err = refused(m, lambda: m.StartSpill(("r3", 1), 1))  # the third: one past
    assert "full" in str(err)


def test_consume_and_report_refusals() -> None:
    m = make_machine()
    refused(m, m.ConsumeMeta)
    refused(m, m.WorkerReport)
    m.Arrive("r0")
    tid = m.StartSpill(("r0", 1), 0)
    refused(m, m.WorkerReport)  # sent but not enqueued: nothing to report
    m.WorkerEnqueue(tid)
    m.WorkerReport()
    refused(m, m.WorkerReport)  # one meta in flight at a time
    m.ConsumeMeta()
    refused(m, m.ConsumeMeta)


@pytest.mark.parametrize("tid", [-1, 1, 99])
def test_worker_enqueue_unknown_transfer(tid: int) -> None:
    m = make_machine()
    m.Arrive("r0")
    assert m.StartSpill(("r0", 1), 0) == 0
    refused(m, lambda: m.WorkerEnqueue(tid), UnknownTransfer)
    m.WorkerEnqueue(0)
    refused(m, lambda: m.WorkerEnqueue(0), UnknownTransfer)  # duplicate


@pytest.mark.parametrize("h", [-1, 4, 1])
def test_worker_complete_outside(h: int) -> None:
    m = make_machine()
    m.Arrive("r0")
    m.WorkerEnqueue(m.StartSpill(("r0", 1), 0))
    refused(m, lambda: m.WorkerComplete(h))
    m.WorkerComplete(0)
    refused(m, lambda: m.WorkerComplete(0))


def test_worker_drop_exists_only_with_its_bug() -> None:
    m = make_machine()
    m.Arrive("r0")
    tid = m.StartSpill(("r0", 1), 0)
    refused(m, lambda: m.WorkerDrop(tid))
    b = make_machine("worker_drops_transfer")
    b.Arrive("r0")
    tid = b.StartSpill(("r0", 1), 0)
    refused(b, lambda: b.WorkerDrop(tid + 1), UnknownTransfer)
    with pytest.raises(InvariantViolation, match="GapsDetected"):  # a silent gap
        b.WorkerDrop(tid)
    assert tid not in b.state.down[0]


@pytest.mark.parametrize("h", [-1, 4, 0])
def test_evict_host_outside(h: int) -> None:
    m = make_machine()
    refused(m, lambda: m.EvictHost(h))  # out of range, or free


def test_evict_host_refuses_leased_and_referenced() -> None:
    m = make_machine()
    m.Arrive("r0")
    m.StartSpill(("r0", 1), 0)
    refused(m, lambda: m.EvictHost(0))  # leased
    m.drain()
    refused(m, lambda: m.EvictHost(0))  # valid but r0's entry points at it
    m.Finish("r0")
    m.EvictHost(0)  # unreferenced: inside
    assert m.state.host_state[0] == "free"
    assert m.state.prefix.get("k0", set()) == set()  # the index holds published pages only
    assert m.state.host_used == 0


def test_evict_keeps_block_referenced_by_a_hit() -> None:
    m = make_machine()
    _published(m)
    m.Arrive("r0")  # r0's first page reads host 2
    refused(m, lambda: m.EvictHost(2))
    m.Abort("r0")
    assert m.state.host_refs.get(2, 0) == 0
    m.EvictHost(2)


# --- acks: unknown, stale, out of order, duplicated ----------------------------------------


def _with_meta(m: ProtocolMachine, meta: Meta) -> None:
    m.state.up[0].append(meta)


def _two_open() -> tuple[ProtocolMachine, int, int]:
    m = make_machine()
    m.Arrive("r0")
    t0 = m.StartSpill(("r0", 1), 0)
    t1 = m.StartSpill(("r0", 2), 1)
    return m, t0, t1


@pytest.mark.parametrize(
    "meta",
    [
        Meta((7,), ()),  # never sent
        Meta((-1,), ()),
        Meta((), (0,)),  # completed before its enqueued ack
        Meta((0, 0), ()),  # duplicate in one direction
        Meta((0,), (0, 0)),
    ],
)
def test_consume_meta_refuses_bad_ids(meta: Meta) -> None:
    m, t0, _ = _two_open()
    assert t0 == 0
    _with_meta(m, meta)
    refused(m, m.ConsumeMeta, UnknownTransfer)


def test_stale_id_for_the_right_slot_is_refused() -> None:
    """A host block reused by a later transfer: an ack with the old ID must not match."""
    m = make_machine()
    m.Arrive("r0")
    old = full_spill(m, ("r0", 1), 0)
    m.Finish("r0")
    m.EvictHost(0)
    m.Arrive("r3")
    new = m.StartSpill(("r3", 1), 0)  # same host block, new transfer
    assert new != old
    m.WorkerEnqueue(new)
    _with_meta(m, Meta((old,), ()))
    refused(m, m.ConsumeMeta, UnknownTransfer)
    m.state.up[0].clear()
    m.WorkerReport()
    m.ConsumeMeta()  # inside: the open transfer's ID
    assert m.state.spill[0] is not None and m.state.spill[0].phase == "enqueued"


def test_enqueued_twice_across_metas_is_refused() -> None:
    m, t0, _ = _two_open()
    m.WorkerEnqueue(t0)
    m.WorkerReport()
    m.ConsumeMeta()
    _with_meta(m, Meta((t0,), ()))
    refused(m, m.ConsumeMeta, UnknownTransfer)


def test_completed_in_the_same_meta_as_enqueued_is_accepted() -> None:
    m, t0, t1 = _two_open()
    m.WorkerEnqueue(t0)
    m.WorkerComplete(0)
    m.WorkerReport()
    m.ConsumeMeta()
    assert m.state.host_state[0] == "valid"
    assert m.state.prefix["k0"] == {0}
    assert m.state.spill[1] is not None and m.state.spill[1].transfer_id == t1


def test_protocol_config_boundaries() -> None:
    ProtocolConfig(gpu_blocks=1, host_pool_bytes=2, host_block_bytes=2)
    for kwargs in (
        {"gpu_blocks": 0, "host_pool_bytes": 2, "host_block_bytes": 2},
        {"gpu_blocks": 1, "host_pool_bytes": 1, "host_block_bytes": 2},
        {"gpu_blocks": 1, "host_pool_bytes": 2, "host_block_bytes": 0},
        {"gpu_blocks": 1, "host_pool_bytes": -1, "host_block_bytes": 1},
        {"gpu_blocks": 1, "host_pool_bytes": 2, "host_block_bytes": 2, "host_blocks": -1},
    ):
        with pytest.raises(ValueError):
            ProtocolConfig(**kwargs)  # type: ignore[arg-type]
    # the writer is a rank: the last one is, one past it is not (constants.py:44:cmp:0)
    base = {"gpu_blocks": 1, "host_pool_bytes": 2, "host_block_bytes": 2, "ranks": 3}
    assert ProtocolConfig(**base, writer=2).writer == 2  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"writer 3 is not a rank of 0\.\.2"):
        ProtocolConfig(**base, writer=3)  # type: ignore[arg-type]

    def rounded_up(c: ProtocolConfig) -> int:
        """The capacity the round_up_pool variant sizes the pool with."""
        buggy = ProtocolMachine.create(c.model_copy(update={"bug": "round_up_pool"}))
        return buggy._spill_capacity()

    c = ProtocolConfig(gpu_blocks=1, host_pool_bytes=5, host_block_bytes=2)
    assert (c.host_capacity, c.host_blocks, rounded_up(c)) == (2, 2, 3)
    c = ProtocolConfig(gpu_blocks=1, host_pool_bytes=4, host_block_bytes=2, host_blocks=3)
    assert (c.host_capacity, c.host_blocks, rounded_up(c)) == (2, 3, 2)
