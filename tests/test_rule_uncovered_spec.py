"""Rules of the protocol spec's Python mirror (the machine, its catalogue, lifecycles,
invariants, messages and trace header) that lines no test ran showed, found by the whole
mutation run (docs/mutation-run7): refusals that change nothing, and checks named by
their exact message."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from hisparse.spec.catalogue import CATALOGUE, Action, _method_reach, disagreements
from hisparse.spec.constants import ProtocolConfig
from hisparse.spec.errors import ActionNotEnabled, UnknownRank
from hisparse.spec.invariants import TypeOK
from hisparse.spec.lifecycle import Lifecycle
from hisparse.spec.machine import ProtocolMachine
from hisparse.spec.messages import HiSparseConnectorMetadata, HiSparseWorkerMeta
from hisparse.spec.state import HostBlock, Imp, Spill
from hisparse.spec.trace import FORMAT, TraceHeader
from hisparse.tlc.value import ValueSyntaxError, parse_state
from tests.protocol_helpers import full_spill, index_problems, make_machine
from tests.test_boundaries_machine import refused

SPEC = (Path(__file__).resolve().parents[1] / "tla" / "HiSparse.tla").read_text()


def unchecked(bug: str, **config: Any) -> ProtocolMachine:
    """A machine carrying injected bug ``bug`` whose invariants are not checked after
    each step (the bug's own violation would stop the run there), with r0 (k0, k1) and
    r3 (k2) declared."""
    cfg = ProtocolConfig(gpu_blocks=3, host_pool_bytes=9, host_block_bytes=2, bug=bug,
                         **config)
    m = ProtocolMachine.create(cfg, check=False)
    m.add_request("r0", ("k0", "k1"))
    m.add_request("r3", ("k2",))
    return m


# --- the catalogue's sync check ------------------------------------------------------


def _replace(name: str, **changes: Any) -> tuple[Action, ...]:
    return tuple(dataclasses.replace(a, **changes) if a.name == name else a for a in CATALOGUE)


def test_a_variant_caught_by_an_invariant_the_spec_lacks_is_reported_alone() -> None:
    # kills spec/catalogue.py:673:call:22 and :673:var:29 (the problem went to the bug
    # list instead, which then also disagreed with the spec's bugs)
    retire = next(a for a in CATALOGUE if a.name == "Retire")
    moved = dataclasses.replace(retire.variants[0], catches="NoSuchInvariant")
    catalogue = _replace("Retire", variants=(moved, *retire.variants[1:]))
    assert disagreements(SPEC, ProtocolMachine, catalogue) == [
        f"{moved.bug}: catches NoSuchInvariant, which the spec does not define"
    ]


def _generated_method() -> Any:
    """A method built at run time (as dataclasses and attrs build theirs): it has no
    source that ``inspect`` or the sync check's fallback can read."""
    namespace: dict[str, Any] = {"__name__": __name__}
    exec(compile("def _note(self, r):\n    return None\n", "<generated>", "exec"), namespace)
    return namespace["_note"]


class Delegating(ProtocolMachine):
    """Finish through two helpers; the trigger is fired in the first, and the second
    (called last, so searched first) has no source."""

    def Finish(self, r: str) -> list[int]:
        freed = self._finish_request(r)
        self._note(r)
        return freed

    def _finish_request(self, r: str) -> list[int]:
        return self._end(r, "finish")

    _note = _generated_method()


def test_a_helper_without_source_does_not_hide_the_helpers_called_beside_it() -> None:
    # kills spec/catalogue.py:597:loop:3 (the search stopped at the sourceless helper, so
    # the trigger fired in _finish_request was reported as never fired)
    reach = _method_reach(Delegating, "Finish")
    assert 'return self._end(r, "finish")' in reach
    assert "def _note" not in reach
    problems = disagreements(SPEC, Delegating)
    assert not [p for p in problems if "never fires" in p], problems
    # the subclass defines Finish alone: the one other problem is that
    assert len(problems) == 1 and problems[0].startswith("machine actions ['Finish'] != ")


# --- lifecycles ------------------------------------------------------------------------


def test_a_trigger_declared_twice_from_one_state_is_refused_by_name() -> None:
    # kills spec/lifecycle.py:38:raise:1
    with pytest.raises(ValueError, match=r"^door: 'open' from 'shut' declared twice$"):
        Lifecycle(
            name="door",
            states=("shut", "open", "ajar"),
            initial="shut",
            rows=(("open", ("shut",), "open"), ("open", ("ajar", "shut"), "ajar")),
        )
    # one trigger from distinct states is one row each
    ok = Lifecycle(
        name="door",
        states=("shut", "open", "ajar"),
        initial="shut",
        rows=(("open", ("shut",), "open"), ("open", ("ajar",), "open")),
    )
    assert ok.table == {("shut", "open"): "open", ("ajar", "open"): "open"}


# --- TypeOK ----------------------------------------------------------------------------


def _spilling() -> ProtocolMachine:
    """r0 running on GPU 0 and 1; its page 1 being spilled to host block 0 (sent)."""
    m = make_machine()
    m.Arrive("r0")
    m.StartSpill(("r0", 1), 0)
    assert TypeOK(m.state) == []
    return m


def test_type_ok_names_host_pools_that_are_not_the_copiers() -> None:
    # kills spec/invariants.py:76:call:0
    m = make_machine(ranks=2, backing="shared", writer=0)
    m.state.host_data[1] = list(m.state.host_data[0])  # the reader got a pool of its own
    assert TypeOK(m.state) == ["host pools [0, 1] are not the copiers (0,)"]


def test_type_ok_names_a_transfer_owed_by_a_rank_the_protocol_lacks() -> None:
    # kills spec/invariants.py:80:call:8
    m = _spilling()
    sp = m.state.spill[0]
    assert sp is not None
    m.state.spill[0] = sp._replace(need=frozenset({0, 1}))
    assert TypeOK(m.state) == ["host block 0's transfer names ranks outside 0..0"]


def test_type_ok_names_a_wait_on_a_block_outside_the_pool() -> None:
    # kills spec/invariants.py:83:call:9
    m = _spilling()
    h_n = m.state.config.host_blocks
    m.state.waits[0] = {1, h_n}
    assert TypeOK(m.state) == [f"rank 0 waits on blocks [1, {h_n}]"]


def test_type_ok_names_an_import_in_an_unknown_phase() -> None:
    # kills spec/invariants.py:92:call:11
    m = make_machine(imports={"i0": ("k5",)}, universe={})
    m.ImportArrive("i0")
    assert TypeOK(m.state) == []
    m.state.imp["i0"] = Imp("device", "parked")  # type: ignore[arg-type]
    assert TypeOK(m.state) == [
        "request i0's import is Imp(target='device', phase='parked')"
    ]


# --- the machine's refusals ------------------------------------------------------------


def test_check_report_refuses_a_rank_the_protocol_lacks() -> None:
    # kills spec/machine.py:520:raise:24 (rank 1 then indexed past the ranks, rank -1
    # read rank 0's channel and passed)
    m = make_machine()
    for w in (1, -1):
        e = refused(m, lambda w=w: m.check_report([], [], w), UnknownRank)  # type: ignore[misc]
        assert str(e) == f"rank {w!r} is not one of the tensor-parallel ranks 0..0"


def test_imports_are_refused_on_more_than_one_rank() -> None:
    # kills spec/machine.py:810:raise:37
    m = make_machine(ranks=2)
    e = refused(m, lambda: m.add_import("i0", ("k5",)))
    assert isinstance(e, ActionNotEnabled)
    assert (e.action, e.reason) == ("add_import", "imports are modelled on one rank")
    assert "i0" not in m.state.req and not m.state.imports


def test_a_device_target_import_refuses_host_blocks() -> None:
    # kills spec/machine.py:926:raise:77
    m = make_machine(imports={"i0": ("k5",)}, universe={})
    m.ImportArrive("i0")
    assert m.ChooseTarget("i0") == "device"  # one page, three free GPU blocks
    e = refused(m, lambda: m.AdmitImport("i0", hosts=[0]))
    assert isinstance(e, ActionNotEnabled)
    assert e.reason == "a device-target import leases no host blocks"
    assert m.AdmitImport("i0") == "device"  # the same import, without host blocks
    assert m.state.host_state == ["free"] * 4 and m.state.req["i0"] == "importing"


def test_a_gap_the_loss_path_never_takes_refuses_worker_loss() -> None:
    # kills spec/machine.py:1319:raise:65 (loss_path_ignores_gaps: the engine runs the
    # loss path only for a restart, so a rank with a noticed gap is never recovered)
    m = make_machine(bug="loss_path_ignores_gaps")
    m.Arrive("r0")
    tid = m.StartSpill(("r0", 1), 0)
    m.LoseCommand(tid, 0)
    assert m.state.lost[0]
    e = refused(m, lambda: m.WorkerLoss(0))
    assert isinstance(e, ActionNotEnabled)
    assert (e.action, e.reason) == ("WorkerLoss", "rank 0's gap is never handed to the loss path")
    assert "WorkerLoss" not in [name for name, _ in m.enabled()]


# --- the drain's fair actions ----------------------------------------------------------


def test_a_readers_queued_reads_are_a_fair_action_of_the_drain() -> None:
    # kills spec/machine.py:1447:call:137
    m = make_machine(ranks=2, backing="shared", writer=0)
    m.Arrive("r0")  # GPU 0, 1
    full_spill(m, ("r0", 2), 1)  # r0's page 2 now reads host block 1
    assert m.state.loc[("r0", 2)] == ("host", HostBlock(1))
    m.WorkerRead(1)  # the reader queues a decode step over it
    assert m.state.reading == [set(), {1}]
    moves = m.enabled()
    assert [name for name, _ in moves] == ["WorkerReadsDone"]
    moves[0][1]()
    assert m.state.reading == [set(), set()]
    assert m.enabled() == []


# --- the open-transfer indexes ---------------------------------------------------------


def test_a_transfer_into_an_evicted_block_with_an_open_transfer_replaces_it() -> None:
    # kills spec/machine.py:384:call:49, :384:var:27 and :228:arith:14. Under
    # publish_at_enqueued a finished request's page is published at its enqueued ack,
    # while its transfer still waits for the completed ack; evicted, the block is free
    # with that transfer open, and the next StartSpill into it replaces the transfer.
    m = unchecked("publish_at_enqueued")
    m.Arrive("r0")  # GPU 0, 1
    m.Arrive("r3")  # GPU 2
    old = m.StartSpill(("r0", 1), 0)
    m.Finish("r0")  # GPU 0 stays pinned until the enqueued ack
    m.WorkerEnqueue(old, 0)
    m.WorkerReport(0)
    m.ConsumeMeta(0)
    s = m.state
    assert s.host_state[0] == "valid" and s.spill[0] is not None  # published, still open
    m.EvictHost(0)
    assert s.host_state == ["free"] * 4 and s.spill[0] is not None
    new = m.StartSpill(("r3", 1), 0)
    assert s.spill[0] == Spill(2, ("r3", 1), "sent", new, frozenset(), frozenset({0}))
    assert s.transfer_dst == {new: 0}
    assert s.req_refs == {"r3": 2}  # its resident lease and its transfer; r0 has none
    assert s.open_spills == {0}
    assert index_problems(s) == []


def _open(m: ProtocolMachine) -> tuple[int, Spill]:
    """r0's page 1 spilled to host block 0 (sent); returns its ID and its record."""
    m.Arrive("r0")
    m.Arrive("r3")
    tid = m.StartSpill(("r0", 1), 0)
    sp = m.state.spill[0]
    assert sp is not None
    return tid, sp


def _replacements(tid: int, sp: Spill) -> dict[str, Spill]:
    return {
        "its phase changes": sp._replace(phase="enqueued", enq=frozenset({0})),
        "the page is sent again": sp._replace(transfer_id=tid + 5),
        "the ID names another page": Spill(2, ("r3", 1), "sent", tid, frozenset(), sp.need),
        "another transfer": Spill(2, ("r3", 1), "sent", tid + 5, frozenset(), sp.need),
    }


@pytest.mark.parametrize(
    "case", ["its phase changes", "the page is sent again", "the ID names another page",
             "another transfer"],
)
def test_writing_over_an_open_transfer_keeps_every_index_in_step(case: str) -> None:
    # kills spec/machine.py:213:cmp:60 ("the page is sent again" took the phase-change
    # shortcut and kept the old ID's entry) and :214:cmp:61 ("the ID names another page"
    # did, and kept r0's reference). No action writes these: _set_spill is the helper
    # the injected bugs' steps (spec/variants.py) write open transfers with.
    m = make_machine()
    tid, sp = _open(m)
    new = _replacements(tid, sp)[case]
    m._set_spill(0, new)
    s = m.state
    assert s.spill[0] == new
    assert s.transfer_dst == {new.transfer_id: 0}
    assert s.open_spills == {0}
    assert index_problems(s) == []


def test_opening_a_transfer_on_an_empty_block_indexes_it() -> None:
    # kills spec/machine.py:230:call:42 (StartSpill inlines this case; the helper must
    # agree with it)
    m = make_machine()
    m.Arrive("r3")  # GPU 0
    sp = Spill(0, ("r3", 1), "sent", 7, frozenset(), frozenset({0}))
    m._set_spill(2, sp)
    s = m.state
    assert s.spill[2] == sp
    assert (s.open_spills, s.transfer_dst, s.req_refs) == ({2}, {7: 2}, {"r3": 2})
    m._set_spill(2, None)
    assert (s.open_spills, s.transfer_dst, s.req_refs) == (set(), {}, {"r3": 1})
    assert index_problems(s) == []


def test_arrive_replaces_a_stale_host_entry_and_drops_its_reference() -> None:
    # kills spec/machine.py:342:call:111. No action leaves a new request an entry (the
    # state below is test_invariants_alone's "new request has an entry", which
    # RetiredUnreferenced reports); Arrive still writes the entry through _set_loc, so
    # the stale host reference goes and the block becomes evictable again.
    m = unchecked("none")  # (the state below breaks an invariant on purpose)
    m.Arrive("r0")
    full_spill(m, ("r0", 2), 1)  # r0's page 2 published on host block 1
    m.Finish("r0")
    m.state.loc[("r3", 1)] = ("host", HostBlock(1))  # the stale entry
    m.state.host_refs[1] = 1
    m.Arrive("r3")
    s = m.state
    g = s.gpu_owner.index(("r3", 1))
    assert s.loc[("r3", 1)] == ("gpu", g)
    assert s.host_refs == {}
    assert index_problems(s) == []
    m.EvictHost(1)  # nothing references it any more
    assert s.host_state[1] == "free"


# --- messages, the trace header, TLC values --------------------------------------------


@pytest.mark.parametrize("aborts", [(-1,), (3, 3)], ids=["negative", "repeated"])
def test_import_aborts_must_be_distinct_non_negative_ids(aborts: tuple[int, ...]) -> None:
    # kills spec/messages.py:188:raise:9
    with pytest.raises(
        ValidationError, match="import_aborts must be distinct non-negative import IDs"
    ):
        HiSparseConnectorMetadata(import_aborts=aborts)
    assert HiSparseConnectorMetadata(import_aborts=(0, 3)).import_aborts == (0, 3)


def test_a_negative_import_id_in_a_worker_meta_is_refused_by_field() -> None:
    # kills spec/messages.py:231:raise:17
    with pytest.raises(ValidationError, match="negative import ID in imports_done"):
        HiSparseWorkerMeta(imports_done=(-1,))
    assert HiSparseWorkerMeta(imports_done=(0,)).imports_done == (0,)


def test_a_header_importing_an_undeclared_request_is_refused() -> None:
    # kills spec/trace.py:127:raise:4
    base: dict[str, Any] = {
        "kind": "header", "format": FORMAT, "requests": {"r1": ["k1"]}, "gpu_blocks": 2,
        "host_blocks": 2, "host_pool_bytes": 4, "host_block_bytes": 2,
    }
    with pytest.raises(
        ValidationError, match="imports names a request the header does not declare"
    ):
        TraceHeader.model_validate({**base, "imports": ["r2"]})
    assert TraceHeader.model_validate({**base, "imports": ["r1"]}).imports == ["r1"]


def test_a_tlc_state_needs_a_conjunct() -> None:
    # kills hisparse/tlc/value.py:140:raise:2
    with pytest.raises(ValueSyntaxError, match=r"^no `/\\ var = value` conjunct in the state$"):
        parse_state("x = 1\n")
    assert parse_state("/\\ x = 1\n/\\ y = {}\n") == {"x": 1, "y": frozenset()}
