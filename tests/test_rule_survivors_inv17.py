"""Invariant rules met by the whole mutation run's seventeenth pass
(docs/mutation-survivors.md): ``ReplayNotExecuted`` counts a consumed enqueued ack as
one execution of the command, beside one unreported or in a worker meta in flight.

``tests/test_invariants_alone.py``'s ``command_executed_twice`` puts both carriers on
the rank (unreported and in flight); a command executed again after its first enqueued
ack was consumed was caught by no test (``invariants.py:349:arith:16`` counted the
consumed ack as -1, so the two cancelled out)."""

from __future__ import annotations

import pytest

from hisparse.spec.errors import InvariantViolation
from hisparse.spec.invariants import check_invariants
from hisparse.spec.state import Meta
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
