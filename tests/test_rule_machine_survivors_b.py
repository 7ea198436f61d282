"""Rule: the machine's seldom-taken paths agree with the rest of the protocol.

Cases the stateful runs do not tell apart: WorkerReadsDone takes exactly the ranks
WorkerRead takes (a rank given as ``False`` included); every fair move ``drain`` lists
is enabled by its oracle guard, also while a host-target import's page is staged but
not landed whole; an injected dropped command is recorded with the rank that dropped
it; and a variant that hands a leased GPU block to another request keeps the
per-request reference counts in step when the spill's source is released.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest

from hisparse.spec.constants import ProtocolConfig
from hisparse.spec.errors import ActionNotEnabled, InvariantViolation, UnknownRank
from hisparse.spec.machine import ProtocolMachine
from tests.protocol_helpers import (
    GUARDS,
    full_spill,
    import_walk,
    index_problems,
    make_machine,
)


def _reader_with_host_page() -> ProtocolMachine:
    """Two ranks sharing one pool, rank 1 the writer (rank 0 reads), and a running
    request with a page on the host: a reader's WorkerRead queues a read."""
    m = make_machine(ranks=2, backing="shared", writer=1, universe={"r0": ("k0", "k1")})
    m.Arrive("r0")
    full_spill(m, ("r0", 1), 0)
    assert m.state.loc[("r0", 1)] == ("host", 0)
    return m


@pytest.mark.parametrize("w", [0, False, 1, True, -1, 2])
def test_worker_reads_done_takes_the_ranks_worker_read_takes(w: Any) -> None:
    """(spec/machine.py:1246:cmp:137: WorkerReadsDone's range test sent rank ``False``,
    which WorkerRead takes as rank 0, to the unknown-rank refusal.)"""
    m = _reader_with_host_page()
    try:
        m.WorkerRead(w)
    except UnknownRank:
        with pytest.raises(UnknownRank):
            m.WorkerReadsDone(w)
        return
    except ActionNotEnabled:  # a known rank that is not a reader: nothing queued
        with pytest.raises(ActionNotEnabled) as e:
            m.WorkerReadsDone(w)
        assert not isinstance(e.value, UnknownRank)
        return
    assert m.state.reading[w] == {0}
    m.WorkerReadsDone(w)  # its read-done event: the rank it read as
    assert m.state.reading == [set(), set()]


def test_drains_fair_moves_are_enabled_while_imports_stage() -> None:
    """Every move ``enabled()`` lists (what ``drain`` runs) holds its oracle guard, in
    every state of seeded walks that favour the imports' own steps; the walks meet a
    host-target page with a staging slot whose chunks have not all landed.
    (spec/machine.py:1146:bool:98 listed ReleaseStaging for such a page.)"""
    staged_not_landed = 0
    full = frozenset((1, 2))
    for seed in range(4):
        for m in import_walk(seed, 40, gpu_blocks=3, host_pool_bytes=9, chunks=2,
                             staging_slots=1):
            for name, call in m.enabled():
                assert isinstance(call, partial)
                assert GUARDS[name](m, *call.args), f"{name}{call.args} listed, not enabled"
            staged_not_landed += sum(1 for y in m.state.pg.values()
                                     if y.slot and y.landed != full)
    assert staged_not_landed  # the case that tells a wrong listing apart was met


def test_a_dropped_command_is_recorded_with_the_rank_that_dropped_it() -> None:
    """The drop breaks GapsDetected at once; the trace ends in the violating step, which
    names the rank that dropped the command (TLC replays it as WorkerDrop(e.args.rank,
    ...)). (spec/machine.py:1261:var:93 recorded the transfer ID as the rank.)"""
    m = make_machine("worker_drops_transfer", ranks=3, record=True,
                     universe={"r0": ("k0", "k1")})
    m.Arrive("r0")
    assert m.StartSpill(("r0", 1), 1) == 0
    tid = m.StartSpill(("r0", 2), 3)
    assert tid == 1
    sp = m.state.spill[3]
    assert sp is not None
    with pytest.raises(InvariantViolation, match="GapsDetected"):
        m.WorkerDrop(tid, 2)
    assert m.steps is not None
    action, args, _ = m.steps[-1]
    assert action == "WorkerDrop"
    assert args == {"src": sp.src, "dst": 3, "rank": 2}
    assert tid not in m.state.down[2] and tid in m.state.down[0]


def test_double_allocation_keeps_the_reference_counts_when_a_source_is_released() -> None:
    """In the double_allocation variant a spill's pinned source block is handed to
    another request's page; when the spill's enqueued acks release the source, that
    request's lease count drops to none (it holds no lease any more) and it may retire.
    (spec/machine.py:625:call:117 kept its count at one.)"""
    cfg = ProtocolConfig(gpu_blocks=2, host_pool_bytes=9, host_block_bytes=2,
                         bug="double_allocation")
    m = ProtocolMachine.create(cfg, check=False)  # (the variant breaks NoDoubleOwnership)
    m.add_request("r0", ("k0",))
    m.add_request("r1", ("k1",))
    m.Arrive("r0", blocks=[0])
    tid = m.StartSpill(("r0", 1), 0)
    m.Arrive("r1", blocks=[0])  # the leased, pinned source of r0's page
    assert m.state.gpu_owner[0] == ("r1", 1) and m.state.req_refs == {"r0": 1, "r1": 1}
    m.WorkerEnqueue(tid, 0)
    m.WorkerReport(0)
    m.ConsumeMeta(0)  # every rank enqueued: the source goes back to HMA
    assert m.state.gpu_owner[0] is None
    assert index_problems(m.state) == []
    assert "r1" not in m.state.req_refs
    m.Finish("r1")
    m.Retire("r1")
    assert "r1" not in m.state.req
