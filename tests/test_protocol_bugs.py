"""Every injected bug of hisparse.bugs, switched on in the Python machine, is caught
by the invariant or liveness twin it names; the same scenario without the bug is clean.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from hisparse.bugs import PROTOCOL_BUGS as BUGS
from hisparse.spec.errors import ActionNotEnabled, InvariantViolation
from hisparse.spec.invariants import INVARIANTS, PROPERTIES
from hisparse.spec.machine import ProtocolMachine
from tests.protocol_helpers import full_spill, make_machine

Scenario = Callable[[str], ProtocolMachine]


def _host_id_as_gpu_index(bug: str) -> ProtocolMachine:
    m = make_machine(bug, gpu_blocks=1)
    m.Arrive("r1")
    full_spill(m, ("r1", 1), 0)
    return m


def _double_allocation(bug: str) -> ProtocolMachine:
    m = make_machine(bug, gpu_blocks=2)
    m.Arrive("r1")  # takes GPU block 0
    m.Arrive("r3", blocks=[0] if bug == "double_allocation" else None)
    return m


def _abort_frees_inflight_host(bug: str) -> ProtocolMachine:
    m = make_machine(bug)
    m.Arrive("r1")
    m.StartSpill(("r1", 1), 0)
    m.Abort("r1")
    m.drain()
    return m


def _enqueued_ack_keeps_pin(bug: str) -> ProtocolMachine:
    m = make_machine(bug)
    m.Arrive("r1")
    tid = m.StartSpill(("r1", 1), 0)
    m.WorkerEnqueue(tid)
    m.WorkerReport()
    m.ConsumeMeta()
    return m


def _release_source_at_send(bug: str) -> ProtocolMachine:
    m = make_machine(bug)
    m.Arrive("r1")
    m.StartSpill(("r1", 1), 0)
    m.drain()
    return m


def _publish_at_enqueued(bug: str) -> ProtocolMachine:
    return _enqueued_ack_keeps_pin(bug)


def _evict_keeps_index(bug: str) -> ProtocolMachine:
    m = make_machine(bug)
    m.Arrive("r1")
    full_spill(m, ("r1", 1), 0)
    m.Finish("r1")
    m.EvictHost(0)
    return m


def _evict_referenced_host(bug: str) -> ProtocolMachine:
    m = make_machine(bug)
    m.Arrive("r1")
    full_spill(m, ("r1", 1), 0)
    if bug == "evict_referenced_host":
        m.EvictHost(0)  # r1 still reads its page from host block 0
    return m


def _round_up_pool(bug: str) -> ProtocolMachine:
    # 5 units / 2 a block: two whole blocks, three IDs a rounding-up sizing would use
    m = make_machine(bug, gpu_blocks=4, host_pool_bytes=5, host_blocks=3)
    m.Arrive("r0")
    m.Arrive("r3")
    full_spill(m, ("r0", 1), 0)
    full_spill(m, ("r0", 2), 1)
    if bug == "round_up_pool":
        full_spill(m, ("r3", 1), 2)
    return m


def _worker_drops_transfer(bug: str) -> ProtocolMachine:
    m = make_machine(bug)
    m.Arrive("r1")
    tid = m.StartSpill(("r1", 1), 0)
    if bug == "worker_drops_transfer":
        m.WorkerDrop(tid)
    m.drain()
    return m


def _batched_done_before_enqueued(bug: str) -> ProtocolMachine:
    m = make_machine(bug)
    m.Arrive("r1")
    full_spill(m, ("r1", 1), 0)  # enqueued and completed in one meta
    m.drain()
    return m


def _abort_keeps_resident_blocks(bug: str) -> ProtocolMachine:
    m = make_machine(bug)
    m.Arrive("r0")
    m.Abort("r0")
    m.drain()
    return m


def _recover_frees_busy_destination(bug: str) -> ProtocolMachine:
    m = make_machine(bug)
    m.Arrive("r1")
    tid = m.StartSpill(("r1", 1), 0)
    m.WorkerEnqueue(tid)  # the copy runs; its enqueued ack is lost with the worker
    m.WorkerLoss()
    return m


def _recover_publishes_unsent(bug: str) -> ProtocolMachine:
    m = make_machine(bug)
    m.Arrive("r1")
    m.StartSpill(("r1", 1), 0)  # the command is lost before the worker takes it
    m.WorkerLoss()
    return m


def _retire_inflight(bug: str) -> ProtocolMachine:
    m = make_machine(bug)
    m.Arrive("r1")
    m.StartSpill(("r1", 1), 0)
    m.Finish("r1")  # its source stays pinned until the enqueued ack
    if bug == "retire_inflight":
        m.Retire("r1")
    return m


def _retire_waits_for_host_pages(bug: str) -> ProtocolMachine:
    m = make_machine(bug)
    m.Arrive("r1")
    full_spill(m, ("r1", 1), 0)  # published: host block 0 holds r1's key
    m.Finish("r1")
    m.drain()
    return m


# --- tensor-parallel ranks: two ranks, private pools unless said otherwise ---


def _release_source_at_first_enqueued(bug: str) -> ProtocolMachine:
    m = make_machine(bug, ranks=2)
    m.Arrive("r1")
    tid = m.StartSpill(("r1", 1), 0)
    m.WorkerEnqueue(tid, 0)
    m.WorkerReport(0)
    m.ConsumeMeta(0)  # rank 1 has not taken the command: its stream still reads the source
    m.drain()
    return m


def _both_ranks_enqueued(bug: str) -> tuple[ProtocolMachine, int]:
    """r1's page spilled to host block 0; both ranks' enqueued acks consumed, both copies
    still running."""
    m = make_machine(bug, ranks=2)
    m.Arrive("r1")
    tid = m.StartSpill(("r1", 1), 0)
    for w in (0, 1):
        m.WorkerEnqueue(tid, w)
        m.WorkerReport(w)
        m.ConsumeMeta(w)
    return m, tid


def _publish_after_one_rank_done(bug: str) -> ProtocolMachine:
    m, _ = _both_ranks_enqueued(bug)
    m.WorkerComplete(0, 0)
    m.WorkerReport(0)
    m.ConsumeMeta(0)  # rank 1's copy into its own pool is still in flight
    m.drain()
    return m


def _abort_frees_after_one_rank_done(bug: str) -> ProtocolMachine:
    m, _ = _both_ranks_enqueued(bug)
    m.Abort("r1")
    m.WorkerComplete(0, 0)
    m.WorkerReport(0)
    m.ConsumeMeta(0)  # rank 1 still copies into host block 0 of its pool
    m.drain()
    return m


def _reader_skips_writer_event(bug: str) -> ProtocolMachine:
    m = make_machine(bug, ranks=2, backing="shared", writer=0)
    m.Arrive("r1")
    tid = m.StartSpill(("r1", 1), 0)
    m.WorkerEnqueue(tid, 0)  # the writer's copy is in flight
    m.WorkerEnqueue(tid, 1)  # the reader orders its stream after the writer's event
    for w in (0, 1):
        m.WorkerReport(w)
        m.ConsumeMeta(w)  # after both: r1's page is read from host block 0 on both ranks
    m.drain()
    return m


def _writer_skips_reader_done(bug: str) -> ProtocolMachine:
    m = make_machine(bug, ranks=2, backing="shared", writer=0)
    m.Arrive("r1")
    full_spill(m, ("r1", 1), 0)  # published: r1's page is read from host block 0
    m.WorkerRead(1)  # the reader's decode is queued: it reads host block 0
    m.Finish("r1")
    m.EvictHost(0)  # nothing references the page any more: block 0 is free again
    m.Arrive("r3")
    tid = m.StartSpill(("r3", 1), 0)  # ... and leased to r3's spill
    if bug == "none":  # the writer's copy waits for the reader's read-done event
        with pytest.raises(ActionNotEnabled, match="read-done"):
            m.WorkerEnqueue(tid, 0)
        m.WorkerReadsDone(1)
    m.WorkerEnqueue(tid, 0)  # with the bug: the copy overwrites block 0 under the read
    m.drain()
    return m


def _worker_applies_replay(bug: str) -> ProtocolMachine:
    m = make_machine(bug)
    m.Arrive("r1")
    tid = m.StartSpill(("r1", 1), 0)
    m.WorkerEnqueue(tid)
    m.WorkerReport()  # the enqueued ack is in flight
    sp = m.state.spill[0]
    assert sp is not None
    m.IgnoreReplay(sp.src, 0)  # a second copy: with the bug, executed again
    m.drain()
    return m


def _worker_forgets_published(bug: str) -> ProtocolMachine:
    """The issue's scenario: page A1 spilled to host block 0 and published, GPU block 0
    reused by B, then the first spill's metadata arrives again."""
    m = make_machine(bug, gpu_blocks=1)
    m.Arrive("r1")
    tid = m.StartSpill(("r1", 1), 0)
    full_spill_tail(m, tid)
    assert m.state.host_state[0] == "valid"
    m.Finish("r1")
    m.Arrive("r3")  # reuses GPU block 0 (other bytes)
    m.IgnoreReplay(0, 0)  # with the bug: GPU block 0 is copied over published block 0
    m.drain()
    return m


def full_spill_tail(m: ProtocolMachine, tid: int) -> None:
    """Enqueue, complete, report and consume transfer ``tid`` on rank 0."""
    m.WorkerEnqueue(tid)
    m.WorkerComplete(m.state.transfer_dst[tid])
    m.WorkerReport()
    m.ConsumeMeta()


def _worker_skips_gap(bug: str) -> ProtocolMachine:
    m = make_machine(bug)
    m.Arrive("r1")
    m.Arrive("r3")
    lost = m.StartSpill(("r1", 1), 0)
    tid = m.StartSpill(("r3", 1), 1)
    m.LoseCommand(lost)  # its connector metadata never arrives
    if bug == "none":  # the next command shows the gap: refused, the loss path runs
        with pytest.raises(ActionNotEnabled, match="gap"):
            m.WorkerEnqueue(tid)
        m.WorkerLoss()
    else:
        m.WorkerEnqueue(tid)  # with the bug: taken, the gap forgotten
    m.drain()
    return m


def _loss_path_ignores_gaps(bug: str) -> ProtocolMachine:
    m = make_machine(bug)
    m.Arrive("r1")
    tid = m.StartSpill(("r1", 1), 0)
    m.WorkerEnqueue(tid)
    m.WorkerReport()
    m.LoseMeta()  # the enqueued ack never arrives: a gap on rank 0
    m.drain()  # the gap is noticed (WorkerLoss) unless the bug ignores it
    return m


def _pd(bug: str, gpu_blocks: int = 3) -> ProtocolMachine:
    """P/D import (model pd): r1 imports two pages of two chunks each, one staging slot;
    r2 is an ordinary one-page request."""
    return make_machine(bug, gpu_blocks=gpu_blocks, host_pool_bytes=9, chunks=2,
                        staging_slots=1, imports={"r1": ("k1", "k2")},
                        universe={"r2": ("k3",)})


def _host_import(bug: str) -> ProtocolMachine:
    """r2 holds one of two GPU blocks, so r1 lands in the host tier."""
    m = _pd(bug, gpu_blocks=2)
    m.Arrive("r2")
    m.ImportArrive("r1")
    assert m.ChooseTarget("r1") == "host"
    m.AdmitImport("r1")
    return m


def _retarget_on_retry(bug: str) -> ProtocolMachine:
    m = _pd(bug, gpu_blocks=2)
    m.Arrive("r2")
    m.ImportArrive("r1")
    assert m.ChooseTarget("r1") == "host"
    m.Finish("r2")  # the GPU pool is free again when r1 is admitted
    m.AdmitImport("r1")  # the correct one keeps "host"; the bug lands on the device
    m.drain()
    return m


def _staging_unbounded(bug: str) -> ProtocolMachine:
    m = _host_import(bug)
    m.LeaseStaging(("r1", 1))
    if bug == "staging_unbounded":
        m.LeaseStaging(("r1", 2))  # the one slot is in use: refused without the bug
    m.drain()
    return m


def _release_before_mirror(bug: str) -> ProtocolMachine:
    m = _host_import(bug)
    p = ("r1", 2)  # the final page: mirrored
    m.LeaseStaging(p)
    m.LandChunk(p, 1)
    m.LandChunk(p, 2)
    m.CopyToHost(p)
    if bug != "release_before_mirror":
        m.MirrorPage(p)
    m.ReleaseStaging(p)  # without the mirror: refused unless the bug
    m.drain()
    return m


def _report_partial_page(bug: str) -> ProtocolMachine:
    m = _pd(bug)
    m.ImportArrive("r1")
    assert m.ChooseTarget("r1") == "device"
    m.AdmitImport("r1")
    m.LandChunk(("r1", 1), 1)
    m.LandChunk(("r1", 2), 2)
    if bug == "report_partial_page":
        m.ReportImport("r1")  # half of each page landed: refused without the bug
    m.drain()
    return m


def _fail_keeps_host_blocks(bug: str) -> ProtocolMachine:
    m = _host_import(bug)
    m.LeaseStaging(("r1", 1))
    m.LandChunk(("r1", 1), 1)
    m.ImportError("r1")  # the prefiller died mid-transfer
    m.drain()
    return m


def _import_done_unreported(bug: str) -> ProtocolMachine:
    m = _host_import(bug)
    m.drain()  # every page lands; the done ack never comes with the bug
    return m


SCENARIOS: dict[str, Scenario] = {
    "import_done_unreported": _import_done_unreported,
    "retarget_on_retry": _retarget_on_retry,
    "staging_unbounded": _staging_unbounded,
    "release_before_mirror": _release_before_mirror,
    "report_partial_page": _report_partial_page,
    "fail_keeps_host_blocks": _fail_keeps_host_blocks,
    "host_id_as_gpu_index": _host_id_as_gpu_index,
    "double_allocation": _double_allocation,
    "abort_frees_inflight_host": _abort_frees_inflight_host,
    "enqueued_ack_keeps_pin": _enqueued_ack_keeps_pin,
    "release_source_at_send": _release_source_at_send,
    "publish_at_enqueued": _publish_at_enqueued,
    "evict_keeps_index": _evict_keeps_index,
    "evict_referenced_host": _evict_referenced_host,
    "round_up_pool": _round_up_pool,
    "worker_drops_transfer": _worker_drops_transfer,
    "batched_done_before_enqueued": _batched_done_before_enqueued,
    "abort_keeps_resident_blocks": _abort_keeps_resident_blocks,
    "recover_frees_busy_destination": _recover_frees_busy_destination,
    "recover_publishes_unsent": _recover_publishes_unsent,
    "retire_inflight": _retire_inflight,
    "retire_waits_for_host_pages": _retire_waits_for_host_pages,
    "release_source_at_first_enqueued": _release_source_at_first_enqueued,
    "publish_after_one_rank_done": _publish_after_one_rank_done,
    "abort_frees_after_one_rank_done": _abort_frees_after_one_rank_done,
    "reader_skips_writer_event": _reader_skips_writer_event,
    "writer_skips_reader_done": _writer_skips_reader_done,
    "worker_applies_replay": _worker_applies_replay,
    "worker_forgets_published": _worker_forgets_published,
    "worker_skips_gap": _worker_skips_gap,
    "loss_path_ignores_gaps": _loss_path_ignores_gaps,
}


def test_every_registered_bug_has_a_scenario() -> None:
    assert set(SCENARIOS) == {b.name for b in BUGS}


def test_every_invariant_and_property_is_targeted_by_a_bug() -> None:
    assert {b.catches for b in BUGS} == set(INVARIANTS) | set(PROPERTIES)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_is_clean_without_the_bug(name: str) -> None:
    m = SCENARIOS[name]("none")
    m.drain()
    for prop, check in PROPERTIES.items():
        assert check(m.state) == [], prop


@pytest.mark.parametrize("bug", BUGS, ids=lambda b: b.name)
def test_injected_bug_is_caught_by_its_twin(bug: object) -> None:
    from hisparse.bugs import InjectedBug

    assert isinstance(bug, InjectedBug)
    scenario = SCENARIOS[bug.name]
    if bug.kind == "invariant":
        with pytest.raises(InvariantViolation) as err:
            scenario(bug.name)
        assert err.value.name == bug.catches
    else:
        m = scenario(bug.name)  # safety holds throughout (checked on every action)
        assert m.enabled() == []  # drained: no fair action left
        assert PROPERTIES[bug.catches](m.state), f"{bug.catches} should fail at quiescence"
