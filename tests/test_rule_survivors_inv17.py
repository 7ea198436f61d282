"""Invariant rules met by the whole mutation run's seventeenth pass
(docs/mutation-survivors.md): ``ReplayNotExecuted`` counts a consumed enqueued ack as
one execution of the command, beside one unreported or in a worker meta in flight; and
``LivePagesReadable`` checks a running page's GPU block for its owner and its bytes each.

``tests/test_invariants_alone.py``'s ``command_executed_twice`` puts both carriers on
the rank (unreported and in flight); a command executed again after its first enqueued
ack was consumed was caught by no test (``invariants.py:349:arith:16`` counted the
consumed ack as -1, so the two cancelled out)."""

from __future__ import annotations

import pytest

from hisparse.spec.errors import InvariantViolation
from hisparse.spec.invariants import INVARIANTS, check_invariants
from hisparse.spec.state import GARBAGE, Meta
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
