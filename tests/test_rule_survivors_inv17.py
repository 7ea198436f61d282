"""Invariant rules met by the whole mutation run's seventeenth pass
(docs/mutation-survivors.md): ``ReplayNotExecuted`` counts a consumed enqueued ack as
one execution of the command, beside one unreported or in a worker meta in flight;
``LivePagesReadable`` checks a running page's GPU block for its owner and its bytes each;
``NoReuseBeforeEnqueued`` checks every sent transfer, past blocks with none; and
each carrier alone keeps a host block in flight (``ProtocolState.in_flight``).

``tests/test_invariants_alone.py``'s ``command_executed_twice`` puts both carriers on
the rank (unreported and in flight); a command executed again after its first enqueued
ack was consumed was caught by no test (``invariants.py:349:arith:16`` counted the
consumed ack as -1, so the two cancelled out)."""

from __future__ import annotations

import pytest

from hisparse.spec.errors import InvariantViolation
from hisparse.spec.invariants import INVARIANTS, check_invariants
from hisparse.spec.state import GARBAGE, Meta
from tests.protocol_helpers import full_spill, make_machine
from tests.test_invariants_alone import base, failing


@pytest.mark.parametrize("carrier", ["unreported", "in flight"])
def test_a_command_executed_again_after_its_ack_was_consumed_is_caught(carrier: str) -> None:
    m, tid = base()
    m.WorkerEnqueue(tid, 0)
    m.WorkerReport(0)
    m.ConsumeMeta(0)
    sp = m.state.spill[0]
    assert sp is not None and 0 in sp.enq and failing(m.state) == set()
    # the replayed command runs again on rank 0: a second enqueued ack is carried
    if carrier == "unreported":
        m.state.w_enq[0].append(tid)
    else:
        m.state.up[0].append(Meta((tid,), ()))
    assert failing(m.state) == {"ReplayNotExecuted"}
    with pytest.raises(InvariantViolation) as err:
        check_invariants(m.state)
    assert err.value.name == "ReplayNotExecuted"


@pytest.mark.parametrize("corrupt", ["data", "owner"])
def test_a_running_pages_gpu_block_is_checked_for_its_owner_and_its_bytes_each(
        corrupt: str) -> None:
    # r3's page runs on GPU 2: wrong bytes under the right owner, or the right bytes
    # under no owner, is each a page that cannot be read
    # kills spec/invariants.py:274:bool:38 (or -> and: only both wrong was reported)
    m, _ = base()
    assert m.state.loc[("r3", 1)] == ("gpu", 2)
    if corrupt == "data":
        m.state.gpu_data[2] = GARBAGE
    else:
        m.state.gpu_owner[2] = None
    assert failing(m.state) == {"LivePagesReadable"}
    assert any(p.startswith("page ('r3', 1) on GPU 2: ")
               for p in INVARIANTS["LivePagesReadable"](m.state))


def test_a_sent_transfer_after_a_closed_one_is_checked_for_its_source() -> None:
    # host 0's transfer is closed (its page published), host 1's is sent: its source
    # unpinned before the enqueued ack is a reuse, whatever the lower blocks hold
    # kills spec/invariants.py:208:loop:3 (continue -> break: the check stopped at the
    # first block with no sent transfer)
    m = make_machine()
    m.Arrive("r0")
    full_spill(m, ("r0", 1), 0)
    m.StartSpill(("r0", 2), 1)
    s = m.state
    sp = s.spill[1]
    assert s.spill[0] is None and sp is not None and sp.phase == "sent"
    assert failing(s) == set()
    s.src_pin[sp.src] = False
    assert failing(s) == {"NoReuseBeforeEnqueued"}


@pytest.mark.parametrize("carrier", ["command", "copy", "enqueued unreported",
                                     "completed unreported", "enqueued in flight",
                                     "completed in flight"])
def test_each_carrier_alone_keeps_a_host_block_in_flight(carrier: str) -> None:
    # the spec's InFlightBlocks: a block some rank's command, copy or ack still names
    # (NoDoubleOwnership: such a block is never free) -- each carrier counts alone
    # kills spec/state.py:219:var:8 (an unreported enqueued ack, a reader's last, did
    # not count: the unreported completed acks were read twice)
    m = make_machine()
    m.Arrive("r0")
    tid = m.StartSpill(("r0", 1), 0)
    s = m.state
    t = s.down[0].pop(tid)
    s.spill[0] = None  # the transfer is no longer open: only the carrier names block 0
    assert not s.in_flight(0)
    if carrier == "command":
        s.down[0][tid] = t
    elif carrier == "copy":
        s.copying[0][0] = "k0"
    elif carrier == "enqueued unreported":
        s.w_enq[0].append(tid)
    elif carrier == "completed unreported":
        s.w_done[0].append(tid)
    elif carrier == "enqueued in flight":
        s.up[0].append(Meta((tid,), ()))
    else:
        s.up[0].append(Meta((), (tid,)))
    assert s.in_flight(0)
