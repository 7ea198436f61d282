"""Rule: a refusal says why by the first condition that fails, and the paths the
stateful runs seldom take do what the spec says.

Each case below is one the protocol's stateful tests reach rarely or never with the
arguments that tell a wrong branch from the right one (a transfer ID that differs from
its host block, a host block that differs from every rank): a refused StartSpill of a
page whose request is not running names the request; an unknown request is named as
unknown; a declaration's refusal lists exactly its bad keys; a recording machine
refuses a request ID reused with other keys; an explicit bad choice of host blocks for
a host-target import is refused whole; an early or unowed completed ack gets the error
for its case; a writer's completed copy releases every reader waiting on that block.
"""

from __future__ import annotations

import pytest

from hisparse.spec.errors import AckNotOwed, ActionNotEnabled, RepeatedAck, UnknownTransfer
from hisparse.spec.machine import ProtocolMachine
from tests.protocol_helpers import full_spill, make_machine
from tests.test_boundaries_machine import refused


def test_start_spill_of_a_request_not_running_names_the_request() -> None:
    m = make_machine()
    e = refused(m, lambda: m.StartSpill(("r0", 1), 0))
    assert isinstance(e, ActionNotEnabled) and e.reason == "request 'r0' is new"
    m.Arrive("r0")
    m.Finish("r0")
    e = refused(m, lambda: m.StartSpill(("r0", 2), 1))
    assert isinstance(e, ActionNotEnabled) and e.reason == "request 'r0' is finished"


def test_an_unknown_request_is_named_unknown() -> None:
    m = make_machine()
    for action in ("Retire", "Finish", "Abort"):
        e = refused(m, lambda a=action: getattr(m, a)("zz"))  # type: ignore[misc]
        assert isinstance(e, ActionNotEnabled) and e.reason == "unknown request 'zz'", action


def test_a_declaration_refusal_lists_exactly_its_bad_keys() -> None:
    m = make_machine()
    e = refused(m, lambda: m.add_request("r9", ["k9", "", "garbage", "k8"]))
    assert isinstance(e, ActionNotEnabled)
    assert e.reason == "reserved or empty keys ['', 'garbage']"


def test_arrive_short_of_blocks_says_how_many() -> None:
    m = make_machine(gpu_blocks=3, universe={"r0": ("k0", "k1"), "r1": ("k2", "k3")})
    m.Arrive("r0")
    e = refused(m, lambda: m.Arrive("r1"))
    assert isinstance(e, ActionNotEnabled) and e.reason == "needs 2 free GPU blocks, 1 free"


def test_a_recording_machine_refuses_an_id_reused_with_other_keys() -> None:
    m = make_machine(record=True, universe={"r0": ("k0",)})
    m.Abort("r0")
    m.Retire("r0")
    e = refused(m, lambda: m.add_request("r0", ["k1"]))
    assert isinstance(e, ActionNotEnabled) and "reused with other keys" in e.reason
    m.add_request("r0", ["k0"])  # the same keys: a request declared again
    assert m.state.req["r0"] == "new"


def _announced_host_import() -> tuple[ProtocolMachine, str]:
    # four pages, three GPU blocks: the host target
    m = make_machine(gpu_blocks=3, host_pool_bytes=9, chunks=1, universe={},
                     imports={"i0": ("k0", "k1", "k2", "k3")})
    m.ImportArrive("i0")
    assert m.ChooseTarget("i0") == "host"
    return m, "i0"


@pytest.mark.parametrize("hosts", [[0, 1, 2], [0, 1, 2, 2], [0, 1, 2, 4], [0, 1, 2, -1]])
def test_a_bad_choice_of_host_blocks_for_an_import_is_refused_whole(hosts: list[int]) -> None:
    m, r = _announced_host_import()
    e = refused(m, lambda: m.AdmitImport(r, [0], hosts))
    assert isinstance(e, ActionNotEnabled)
    assert e.reason == f"host target needs 4 distinct free host blocks, got {hosts}"


def test_a_good_choice_of_host_blocks_in_any_order_is_taken() -> None:
    m, r = _announced_host_import()
    assert m.AdmitImport(r, [0], [3, 2, 1, 0]) == "host"


def _two_ranks_transfer_into_block_2() -> tuple[ProtocolMachine, int]:
    # transfer 0 goes into host block 2: an ID that is not its block
    m = make_machine(ranks=2, universe={"r0": ("k0",)})
    m.Arrive("r0")
    return m, m.StartSpill(("r0", 1), 2)


def test_a_repeated_completed_ack_of_an_open_transfer_is_named_repeated() -> None:
    m, tid = _two_ranks_transfer_into_block_2()
    assert tid == 0
    m.WorkerEnqueue(tid, 0)
    m.WorkerComplete(2, 0)
    m.WorkerReport(0)
    m.ConsumeMeta(0)  # rank 1 still owes its acks: the transfer stays open
    e = refused(m, lambda: m.check_report((), (tid,), 0), RepeatedAck)
    assert isinstance(e, RepeatedAck) and e.transfer_id == tid


def test_a_completed_ack_before_the_enqueued_one_and_one_never_owed() -> None:
    m, tid = _two_ranks_transfer_into_block_2()
    # the command still waits on rank 1: early, not unowed
    e = refused(m, lambda: m.check_report((), (tid,), 1), UnknownTransfer)
    assert type(e) is UnknownTransfer and "before its enqueued ack" in e.reason
    m.LoseCommand(tid, 1)  # the command is gone: rank 1 runs no copy of it
    # until the loss path runs, rank 1 has a gap: ConsumeMeta takes no meta of it
    e = refused(m, lambda: m.check_report((), (tid,), 1), ActionNotEnabled)
    assert str(e) == ("ConsumeMeta is not enabled: rank 1 has a gap: its metas are "
                      "refused until the worker-loss path runs")
    m.WorkerLoss(1)  # the loss path: the gap is gone, and so is the command
    e = refused(m, lambda: m.check_report((), (tid,), 1), AckNotOwed)
    assert isinstance(e, AckNotOwed) and "no copy of it runs" in e.reason


def test_the_writers_completed_copy_releases_every_reader_waiting_on_it() -> None:
    m = make_machine(ranks=2, backing="shared", universe={"r0": ("k0",)})
    m.Arrive("r0")
    tid = m.StartSpill(("r0", 1), 2)
    m.WorkerEnqueue(tid, 0)  # the writer's copy into block 2 runs
    m.WorkerEnqueue(tid, 1)  # the reader takes the command after it: waits on block 2
    assert 2 in m.state.waits[1]
    m.WorkerComplete(2, 0)
    assert all(2 not in w for w in m.state.waits)


def test_full_spill_still_closes_with_the_transfer_into_block_2() -> None:
    m = make_machine(ranks=2, universe={"r0": ("k0",)})
    m.Arrive("r0")
    full_spill(m, ("r0", 1), 2)
    assert m.state.spill[2] is None and m.state.host_state[2] == "valid"
