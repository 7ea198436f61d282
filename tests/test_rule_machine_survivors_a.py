"""Rule: the machine's refusals and choices that the stateful runs do not tell apart.

Cases the protocol's stateful tests reach with arguments that cannot show a wrong branch:
an unknown request that arrives is named unknown, not as a request in some state
(``spec/machine.py:277:call:44``); a worker meta is checked only when rank w has none
pending — one in flight, or acks enqueued or completed but not reported yet
(``521:bool:17``); a checking machine refuses an import's target chosen from a free GPU
count that is not the pool's (``869:raise:44``), and a free count the caller passes is
the one the target comes from, zero included (``845:none:34``); an explicitly empty
choice of host blocks for a host-target import is refused, not taken for the default
(``914:none:36``).
"""

from __future__ import annotations

import pytest

from hisparse.spec.constants import ProtocolConfig
from hisparse.spec.errors import ActionNotEnabled
from hisparse.spec.machine import ProtocolMachine
from tests.protocol_helpers import make_machine
from tests.test_boundaries_machine import refused


def test_an_unknown_request_that_arrives_is_named_unknown() -> None:
    """spec/machine.py:277:call:44: check_arrive names an unknown request unknown."""
    m = make_machine()
    for call in (lambda: m.Arrive("zz"), lambda: m.check_arrive("zz")):
        e = refused(m, call)
        assert isinstance(e, ActionNotEnabled) and e.reason == "unknown request 'zz'"
    m.Arrive("r0")  # a known request not new: its state is named instead
    e = refused(m, lambda: m.Arrive("r0"))
    assert isinstance(e, ActionNotEnabled) and e.reason == "request 'r0' is running, not new"


def _pending(kind: str) -> ProtocolMachine:
    """Rank 0 with exactly one kind of pending worker meta: ``up`` (a meta in flight),
    ``enq`` (an enqueued ack not reported) or ``done`` (a completed ack not reported)."""
    m = make_machine(universe={"r0": ("k0",)})
    m.Arrive("r0")
    tid = m.StartSpill(("r0", 1), 2)
    m.WorkerEnqueue(tid, 0)
    if kind != "enq":
        m.WorkerReport(0)
        if kind == "done":
            m.ConsumeMeta(0)
            m.WorkerComplete(2, 0)
    s = m.state
    assert (bool(s.up[0]), bool(s.w_enq[0]), bool(s.w_done[0])) == (
        kind == "up", kind == "enq", kind == "done"
    )
    return m


@pytest.mark.parametrize("kind", ["up", "enq", "done"])
def test_a_worker_meta_is_checked_only_when_none_is_pending(kind: str) -> None:
    """spec/machine.py:521:bool:17: any one pending part of a worker meta refuses the
    next (WorkerReport sends one meta per rank at a time, and reports every ack)."""
    m = _pending(kind)
    e = refused(m, lambda: m.check_report((), (), 0))
    assert isinstance(e, ActionNotEnabled)
    assert e.reason == "a previous worker meta is still pending"


def _announced_one_page_import(*, check: bool) -> ProtocolMachine:
    cfg = ProtocolConfig(gpu_blocks=3, host_pool_bytes=9, host_block_bytes=2, chunks=1)
    m = ProtocolMachine.create(cfg, check=check)
    m.add_import("i0", ("k0",))
    m.ImportArrive("i0")
    assert m.free_gpu() == 3
    return m


def test_a_checking_machine_refuses_a_target_from_a_wrong_free_count() -> None:
    """spec/machine.py:869:raise:44: HMA's free count must be the pool's when checked."""
    m = _announced_one_page_import(check=True)
    for claimed in (2, 0, 4):
        e = refused(m, lambda c=claimed: m.ChooseTarget("i0", c))  # type: ignore[misc]
        assert isinstance(e, ActionNotEnabled)
        assert e.reason == f"{claimed} free GPU blocks claimed, 3 free"
    assert m.ChooseTarget("i0", 3) == "device"


def test_the_free_count_passed_decides_the_target_zero_included() -> None:
    """spec/machine.py:845:none:34: a caller's count of 0 is a count (HMA's pool full),
    not "count it here"; without checks the machine takes it as given."""
    m = _announced_one_page_import(check=False)
    assert m.target_for("i0", 0) == "host"
    assert m.target_for("i0", 1) == "device"
    assert m.target_for("i0") == "device"  # counted here: 3 free
    assert m.ChooseTarget("i0", 0) == "host"
    assert m.state.imp_of("i0").target == "host"


def test_an_empty_choice_of_host_blocks_for_an_import_is_refused() -> None:
    """spec/machine.py:914:none:36: ``hosts=[]`` is a choice (of too few blocks), not the
    default of the lowest free ones."""
    m = make_machine(gpu_blocks=3, host_pool_bytes=9, chunks=1, universe={},
                     imports={"i0": ("k0", "k1", "k2", "k3")})
    m.ImportArrive("i0")
    assert m.ChooseTarget("i0") == "host"
    e = refused(m, lambda: m.AdmitImport("i0", [0], []))
    assert isinstance(e, ActionNotEnabled)
    assert e.reason == "host target needs 4 distinct free host blocks, got []"
    assert m.AdmitImport("i0", [0]) == "host"  # no choice: the lowest free blocks
    assert [m.state.pg[("i0", i)].host for i in range(1, 5)] == [0, 1, 2, 3]
