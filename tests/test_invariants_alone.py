"""Each Python invariant twin, shown live on its own.

A twin that is weakened or emptied must fail a test even when another twin would
catch the same defect. So every defect here is checked against *all* twins at once:
the exact set that fails is asserted, and every twin has a defect it alone catches
(a property twin: up to the one implication IMPLIED states). The defects are a clean
reachable state with one field corrupted (or a retirement that leaves a lease behind),
and the injected bugs' own scenarios.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import pytest

from hisparse.bugs import PROTOCOL_BUGS as BUGS  # the bugs of tla/HiSparse.tla
from hisparse.spec.constants import ProtocolConfig
from hisparse.spec.errors import InvariantViolation
from hisparse.spec.invariants import (
    INVARIANTS,
    PROPERTIES,
    GapsDetected,
    ImportPublishedComplete,
    TypeOK,
    check_invariants,
)
from hisparse.spec.machine import ProtocolMachine
from hisparse.spec.state import (
    HostBlock,
    Imp,
    Meta,
    ProtocolState,
    ReqState,
    Spill,
    Transfer,
)
from tests.protocol_helpers import UNIVERSE, full_spill, make_machine
from tests.test_protocol_bugs import SCENARIOS


def failing(s: ProtocolState) -> set[str]:
    """Every safety twin that reports a problem in ``s``."""
    return {name for name, inv in INVARIANTS.items() if inv(s)}


def base() -> tuple[ProtocolMachine, int]:
    """A clean state with every kind of entry: a sent spill, a published page, a hit.

    r0's page 2 is spilled and published on host 1 (its entry points there); r0's page 1
    on GPU 0 is being spilled to host 0 (sent, pinned); r3 is resident on GPU 2. r1 was
    aborted before it arrived and is not yet retired: a page of an ended request is read
    by no one, so a corrupted entry of r1's is TypeOK's or NoDoubleOwnership's alone (a
    new request's entry is also RetiredUnreferenced's). r2 is new.
    """
    m = make_machine()
    m.Arrive("r0")  # GPU 0, 1
    m.Arrive("r3")  # GPU 2
    m.Abort("r1")
    full_spill(m, ("r0", 2), 1)
    tid = m.StartSpill(("r0", 1), 0)
    assert failing(m.state) == set()
    return m, tid


Corruption = Callable[[ProtocolState, int], None]


def _set_req(s: ProtocolState, _: int) -> None:
    s.req["r1"] = "bogus"  # type: ignore[assignment]


def _gpu_loc_holds_host_id(s: ProtocolState, _: int) -> None:
    s.loc[("r3", 1)] = ("gpu", HostBlock(2))


def _host_loc_holds_gpu_index(s: ProtocolState, _: int) -> None:
    s.loc[("r1", 1)] = ("host", 1)


def _host_loc_out_of_range(s: ProtocolState, _: int) -> None:
    s.loc[("r1", 1)] = ("host", HostBlock(s.config.host_blocks))


def _gpu_loc_negative(s: ProtocolState, _: int) -> None:
    s.loc[("r1", 1)] = ("gpu", -1)


def _owner_unknown_page(s: ProtocolState, _: int) -> None:
    s.gpu_owner[1] = ("r1", 5)


def _owner_malformed_page_of_undeclared_request(s: ProtocolState, _: int) -> None:
    s.gpu_owner[1] = ("ghost", "x")  # type: ignore[assignment]  # malformed, whoever owns it


def _gpu_data_bogus(s: ProtocolState, _: int) -> None:
    s.gpu_data[1] = "bogus"


def _host_state_bogus(s: ProtocolState, _: int) -> None:
    s.host_state[3] = "bogus"  # type: ignore[call-overload]


def _spill_src_out_of_range(s: ProtocolState, tid: int) -> None:
    s.host_state[3] = "leased"
    s.spill[3] = Spill(s.config.gpu_blocks, ("r3", 1), "enqueued", tid + 1)


def _spill_unknown_page(s: ProtocolState, tid: int) -> None:
    s.host_state[3] = "leased"
    s.spill[3] = Spill(2, ("r3", 9), "enqueued", tid + 1)


def _host_data_bogus(s: ProtocolState, _: int) -> None:
    s.host_data[0][3] = "bogus"


def _copying_bogus(s: ProtocolState, _: int) -> None:
    s.copying[0][0] = "bogus"


def _transfer_src_out_of_range(s: ProtocolState, tid: int) -> None:
    s.down[0][tid] = Transfer(tid, s.config.gpu_blocks, 0)


def _transfer_dst_out_of_range(s: ProtocolState, tid: int) -> None:
    s.down[0][tid] = Transfer(tid, 0, s.config.host_blocks)


def _gpu_leased_to_page_elsewhere(s: ProtocolState, _: int) -> None:
    s.gpu_owner[1] = ("r3", 1)  # r3's entry says GPU 2, which it also owns


def _two_pages_one_gpu_block(s: ProtocolState, _: int) -> None:
    s.loc[("r1", 1)] = ("gpu", 2)  # r1 is not running: only the double lease is wrong


def _in_flight_host_block_free(s: ProtocolState, _: int) -> None:
    s.host_state[0] = "free"


def _copy_into_free_block(s: ProtocolState, _: int) -> None:
    s.copying[0][3] = "k2"


def _ack_names_free_block(s: ProtocolState, tid: int) -> None:
    s.transfer_dst[tid + 7] = 3
    s.w_done[0].append(tid + 7)


def _pin_without_transfer(s: ProtocolState, _: int) -> None:
    s.src_pin[2] = True


def _lease_without_transfer(s: ProtocolState, _: int) -> None:
    s.host_state[3] = "leased"


def _source_unpinned_before_enqueued(s: ProtocolState, _: int) -> None:
    s.src_pin[0] = False


def _published_while_in_flight(s: ProtocolState, _: int) -> None:
    s.host_state[0] = "valid"
    s.host_data[0][0] = "k0"


def _index_names_wrong_key(s: ProtocolState, _: int) -> None:
    s.prefix["k2"] = {1}


def _running_page_without_block(s: ProtocolState, _: int) -> None:
    s.loc[("r3", 1)] = None


def _running_page_reads_wrong_host_bytes(s: ProtocolState, _: int) -> None:
    s.prefix["k1"] = set()  # the page is unpublished: only the reader sees it
    s.host_state[1] = "leased"
    s.spill[1] = Spill(1, ("r0", 2), "enqueued", 99)
    s.host_data[0][1] = "k2"


def _new_request_holds_gpu_lease(s: ProtocolState, _: int) -> None:
    s.gpu_owner[1] = ("r2", 1)  # GPU 1 is free in HMA; r2 has not arrived


def _new_request_has_an_entry(s: ProtocolState, _: int) -> None:
    s.loc[("r2", 1)] = ("host", HostBlock(1))  # r0's published page; r2 has not arrived


def _new_request_has_open_transfer(s: ProtocolState, tid: int) -> None:
    s.host_state[3] = "leased"
    s.spill[3] = Spill(1, ("r2", 1), "enqueued", tid + 1)


def _retired_request_holds_gpu_lease(s: ProtocolState, _: int) -> None:
    # r1 retires as Retire does (it leaves the state), but GPU 1 stays leased to its page
    del s.req["r1"], s.page_keys["r1"], s.loc[("r1", 1)]
    s.gpu_owner[1] = ("r1", 1)


def _pool_shrunk(s: ProtocolState, _: int) -> None:
    c = s.config
    s.config = ProtocolConfig(
        gpu_blocks=c.gpu_blocks,
        host_pool_bytes=c.host_block_bytes,
        host_block_bytes=c.host_block_bytes,
        host_blocks=c.host_blocks,
    )


def _writer_copies_under_a_read(s: ProtocolState, tid: int) -> None:
    # the same pools as a shared allocation of two ranks: rank 1 reads what rank 0 writes;
    # rank 1's queued reads still read host block 0 (from before it was leased again) when
    # the writer's copy of the sent transfer into it starts, and nothing orders the two
    c = s.config
    s.config = ProtocolConfig(
        gpu_blocks=c.gpu_blocks,
        host_pool_bytes=c.host_pool_bytes,
        host_block_bytes=c.host_block_bytes,
        host_blocks=c.host_blocks,
        ranks=2,
        backing="shared",
        writer=0,
    )
    h = c.host_blocks
    s.down.append({})
    s.up.append(deque())
    s.lost.append(False)
    s.copying.append([None] * h)
    s.copying_tid.append({})
    s.waits.append(set())
    s.reading.append({0})
    s.w_enq.append([])
    s.w_done.append([])
    t = s.down[0].pop(tid)
    s.down[1][tid] = t  # the reader has not taken it yet
    s.copying[0][t.dst] = s.gpu_data[t.src]
    s.copying_tid[0][t.dst] = tid
    s.w_enq[0].append(tid)


def _foreign_copy_into_published(s: ProtocolState, _: int) -> None:
    """Host 2 published (no one reads it), and a copy of other bytes runs into it."""
    s.host_state[2], s.host_key[2], s.host_data[0][2] = "valid", "k1", "k1"
    s.copying[0][2] = "garbage"


def _command_executed_twice(s: ProtocolState, tid: int) -> None:
    """The sent transfer's enqueued ack is unreported and also in a meta in flight."""
    t = s.down[0].pop(tid)
    s.copying[0][t.dst] = s.gpu_data[t.src]
    s.copying_tid[0][t.dst] = tid
    s.w_enq[0].append(tid)
    s.up[0].append(Meta((tid,), ()))


def _command_vanished(s: ProtocolState, tid: int) -> None:
    """The sent transfer's command is gone from ``down`` with no gap pending."""
    del s.down[0][tid]


# corruption -> the exact set of twins that must report it
CORRUPTIONS: dict[str, tuple[Corruption, set[str]]] = {
    "req_state": (_set_req, {"TypeOK"}),
    "gpu_loc_holds_host_id": (_gpu_loc_holds_host_id, {"TypeOK"}),
    "host_loc_holds_gpu_index": (_host_loc_holds_gpu_index, {"TypeOK"}),
    "host_loc_out_of_range": (_host_loc_out_of_range, {"TypeOK"}),
    "gpu_loc_negative": (_gpu_loc_negative, {"TypeOK"}),
    "owner_unknown_page": (_owner_unknown_page, {"TypeOK"}),
    "owner_malformed_page_of_undeclared_request": (
        _owner_malformed_page_of_undeclared_request,
        {"TypeOK", "RetiredUnreferenced"},
    ),
    "gpu_data_bogus": (_gpu_data_bogus, {"TypeOK"}),
    "host_state_bogus": (_host_state_bogus, {"TypeOK"}),
    "spill_src_out_of_range": (_spill_src_out_of_range, {"TypeOK"}),
    "spill_unknown_page": (_spill_unknown_page, {"TypeOK"}),
    "host_data_bogus": (_host_data_bogus, {"TypeOK"}),
    "copying_bogus": (_copying_bogus, {"TypeOK"}),
    "transfer_src_out_of_range": (_transfer_src_out_of_range, {"TypeOK"}),
    # the open transfer into host 0 then has no command in flight either
    "transfer_dst_out_of_range": (_transfer_dst_out_of_range, {"TypeOK", "GapsDetected"}),
    "two_pages_one_gpu_block": (_two_pages_one_gpu_block, {"NoDoubleOwnership"}),
    "in_flight_host_block_free": (_in_flight_host_block_free, {"NoDoubleOwnership"}),
    "copy_into_free_block": (_copy_into_free_block, {"NoDoubleOwnership"}),
    "ack_names_free_block": (_ack_names_free_block, {"NoDoubleOwnership"}),
    "pin_without_transfer": (_pin_without_transfer, {"NoLeaseLeaked"}),
    "lease_without_transfer": (_lease_without_transfer, {"NoLeaseLeaked"}),
    "source_unpinned_before_enqueued": (_source_unpinned_before_enqueued, {"NoReuseBeforeEnqueued"}),
    "published_while_in_flight": (_published_while_in_flight, {"NoPublishBeforeComplete"}),
    "index_names_wrong_key": (_index_names_wrong_key, {"PublishedDataCorrect"}),
    "running_page_without_block": (_running_page_without_block, {"LivePagesReadable"}),
    "gpu_leased_to_page_elsewhere": (_gpu_leased_to_page_elsewhere, {"LivePagesReadable"}),
    "running_page_reads_wrong_host_bytes": (
        _running_page_reads_wrong_host_bytes,
        {"LivePagesReadable"},
    ),
    "pool_shrunk": (_pool_shrunk, {"HostPoolNotOvercommitted"}),
    "writer_copies_under_a_read": (_writer_copies_under_a_read, {"NoOverwriteUnderRead"}),
    "new_request_holds_gpu_lease": (_new_request_holds_gpu_lease, {"RetiredUnreferenced"}),
    "new_request_has_an_entry": (_new_request_has_an_entry, {"RetiredUnreferenced"}),
    "new_request_has_open_transfer": (_new_request_has_open_transfer, {"RetiredUnreferenced"}),
    "retired_request_holds_gpu_lease": (
        _retired_request_holds_gpu_lease,
        {"RetiredUnreferenced"},
    ),
    "foreign_copy_into_published": (_foreign_copy_into_published, {"PublishedPageStable"}),
    "command_executed_twice": (_command_executed_twice, {"ReplayNotExecuted"}),
    "command_vanished": (_command_vanished, {"GapsDetected"}),
}


# P/D import (docs/pd-import.md): r1 imports two pages of two chunks into the host tier
# (r2 holds one of the two GPU blocks), or onto the device; each corruption is one field
# of the import state.
def _import_machine(target: str, landed: bool) -> ProtocolMachine:
    m = ProtocolMachine.create(ProtocolConfig(
        gpu_blocks=2 if target == "host" else 3, host_pool_bytes=9, host_block_bytes=2,
        chunks=2, staging_slots=1))
    m.add_import("r1", ("k1", "k2"))
    m.add_request("r2", ("k3",))
    if target == "host":
        m.Arrive("r2")
    m.ImportArrive("r1")
    assert m.ChooseTarget("r1") == target
    m.AdmitImport("r1")
    if landed:
        while (moves := [f for n, f in m.enabled() if n != "CompleteImport"]):
            moves[0]()
        assert m.state.imp["r1"].phase == "landed"
    return m


def _two_slots(m: ProtocolMachine) -> None:
    for i in (1, 2):
        m.state.pg[("r1", i)] = m.state.pg[("r1", i)]._replace(slot=True)


def _done_with_a_chunk_missing(m: ProtocolMachine) -> None:
    y = m.state.pg[("r1", 1)]
    m.state.pg[("r1", 1)] = y._replace(landed=frozenset({1}))


def _done_before_the_mirror(m: ProtocolMachine) -> None:
    m.state.gpu_data[m.state.imp_gpu[("r1", 2)]] = "garbage"


def _device_import_claims_host(m: ProtocolMachine) -> None:
    m.state.imp["r1"] = m.state.imp["r1"]._replace(target="host")


def _slot_after_completion(m: ProtocolMachine) -> None:
    m.CompleteImport("r1")
    m.state.pg[("r1", 1)] = m.state.pg[("r1", 1)]._replace(slot=True)


IMPORT_CORRUPTIONS: dict[str, tuple[str, bool, Callable[[ProtocolMachine], None], set[str]]] = {
    "two_staging_slots": ("host", False, _two_slots, {"StagingBounded"}),
    "done_with_a_chunk_missing": ("host", True, _done_with_a_chunk_missing,
                                  {"ImportPublishedComplete"}),
    "done_before_the_mirror": ("host", True, _done_before_the_mirror, {"MirrorBeforeRead"}),
    "device_import_claims_host": ("device", False, _device_import_claims_host,
                                  {"ImportTargetStable"}),
    "slot_after_completion": ("host", True, _slot_after_completion, {"NoImportLeak"}),
}


@pytest.mark.parametrize("name", sorted(IMPORT_CORRUPTIONS))
def test_import_corruption_is_caught_by_exactly_its_twin(name: str) -> None:
    target, landed, corrupt, expected = IMPORT_CORRUPTIONS[name]
    m = _import_machine(target, landed)
    assert failing(m.state) == set()
    corrupt(m)
    assert failing(m.state) == expected


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_corruption_is_caught_by_exactly_its_twins(name: str) -> None:
    corrupt, expected = CORRUPTIONS[name]
    m, tid = base()
    corrupt(m.state, tid)
    assert failing(m.state) == expected
    with pytest.raises(InvariantViolation) as err:
        check_invariants(m.state)
    assert err.value.name == min(expected, key=list(INVARIANTS).index)


@pytest.mark.parametrize("h", [-1, 4])
def test_prefix_naming_a_block_outside_the_pool_is_a_type_error(h: int) -> None:
    """Only TypeOK can say it: the later twins index the pool with it (and -1 wraps)."""
    m, _ = base()
    m.state.prefix["k2"] = {h}
    assert TypeOK(m.state) == [f"prefix index of k2 names blocks [{h}]"]
    with pytest.raises(InvariantViolation) as err:
        check_invariants(m.state)
    assert err.value.name == "TypeOK"


def test_every_twin_alone_catches_some_corruption() -> None:
    alone = {next(iter(e)) for _, e in CORRUPTIONS.values() if len(e) == 1}
    alone |= {next(iter(e)) for *_, e in IMPORT_CORRUPTIONS.values() if len(e) == 1}
    assert alone == set(INVARIANTS)


# Each invariant bug's scenario, evaluated against every twin in the violating state.
BUG_FAILS: dict[str, set[str]] = {
    "host_id_as_gpu_index": {"TypeOK", "LivePagesReadable"},
    "double_allocation": {"NoDoubleOwnership", "LivePagesReadable"},
    "abort_frees_inflight_host": {"NoDoubleOwnership", "NoLeaseLeaked"},
    "enqueued_ack_keeps_pin": {"NoLeaseLeaked"},
    "release_source_at_send": {"NoReuseBeforeEnqueued", "LivePagesReadable"},
    "publish_at_enqueued": {"NoPublishBeforeComplete", "PublishedDataCorrect"},
    "evict_keeps_index": {"PublishedDataCorrect"},
    "evict_referenced_host": {"LivePagesReadable"},
    "round_up_pool": {"HostPoolNotOvercommitted"},
    "recover_frees_busy_destination": {"NoDoubleOwnership"},
    "recover_publishes_unsent": {"PublishedDataCorrect"},
    "retire_inflight": {"RetiredUnreferenced"},
    "release_source_at_first_enqueued": {"NoReuseBeforeEnqueued", "LivePagesReadable"},
    "publish_after_one_rank_done": {"NoPublishBeforeComplete", "PublishedDataCorrect"},
    "abort_frees_after_one_rank_done": {"NoDoubleOwnership"},
    "reader_skips_writer_event": {"LivePagesReadable"},
    "writer_skips_reader_done": {"NoOverwriteUnderRead"},
    "worker_drops_transfer": {"GapsDetected"},
    "worker_applies_replay": {"ReplayNotExecuted"},
    "worker_forgets_published": {"PublishedPageStable", "NoPublishBeforeComplete"},
    "worker_skips_gap": {"GapsDetected"},
    "retarget_on_retry": {"ImportTargetStable"},
    "staging_unbounded": {"StagingBounded"},
    "release_before_mirror": {"MirrorBeforeRead"},
    "report_partial_page": {"ImportPublishedComplete"},
    "fail_keeps_host_blocks": {"NoImportLeak"},
}


def test_bug_fails_names_every_invariant_bug() -> None:
    assert set(BUG_FAILS) == {b.name for b in BUGS if b.kind == "invariant"}


@pytest.mark.parametrize("bug", [b for b in BUGS if b.kind == "invariant"], ids=lambda b: b.name)
def test_bug_state_fails_exactly_the_expected_twins(
    bug: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hisparse.bugs import InjectedBug
    from hisparse.spec import machine as machine_module

    assert isinstance(bug, InjectedBug)
    seen: list[set[str]] = []  # the failing twins after each step, as it happened

    def spy(s: ProtocolState) -> None:
        seen.append(failing(s))
        check_invariants(s)

    monkeypatch.setattr(machine_module, "check_invariants", spy)
    with pytest.raises(InvariantViolation) as err:
        SCENARIOS[bug.name](bug.name)
    assert err.value.name == bug.catches
    assert seen[-1] == BUG_FAILS[bug.name]
    assert all(f == set() for f in seen[:-1])  # every earlier step was clean


@pytest.mark.parametrize("bug", [b for b in BUGS if b.kind == "property"], ids=lambda b: b.name)
def test_property_bug_fails_its_property_and_no_invariant(bug: object) -> None:
    from hisparse.bugs import InjectedBug

    assert isinstance(bug, InjectedBug)
    m = SCENARIOS[bug.name](bug.name)
    assert m.enabled() == []
    assert failing(m.state) == set()
    assert PROPERTIES[bug.catches](m.state)
    clean = SCENARIOS[bug.name]("none")
    clean.drain()
    assert {n for n, p in PROPERTIES.items() if p(clean.state)} == set()


def _drained() -> ProtocolMachine:
    """Quiescent: r0's first page spilled and published, r3 aborted and retired, nothing
    in flight."""
    m = make_machine()
    m.Arrive("r0")
    m.Arrive("r3")
    full_spill(m, ("r0", 1), 0)
    m.Abort("r3")
    m.drain()
    assert m.enabled() == []
    assert "r3" not in m.state.req  # retired: the drain ran every fair action
    assert {n for n, p in PROPERTIES.items() if p(m.state)} == set()
    return m


def _not_retired(s: ProtocolState, r: str, how: ReqState) -> None:
    """Put retired r back as the ended request it was (``how``), holding nothing."""
    s.page_keys[r] = UNIVERSE[r]
    s.req[r] = how
    for p in s.pages_of(r):
        s.loc[p] = None


def _transfer_left_open(s: ProtocolState) -> None:
    s.spill[0] = Spill(0, ("r0", 1), "enqueued", 0)


def _pin_left_behind(s: ProtocolState) -> None:
    s.src_pin[1] = True


def _lease_left_behind(s: ProtocolState) -> None:
    s.host_state[2] = "leased"


def _aborted_page_still_resident(s: ProtocolState) -> None:
    _not_retired(s, "r3", "aborted")
    s.gpu_owner[2] = ("r3", 1)


def _aborted_page_still_spilling(s: ProtocolState) -> None:
    _not_retired(s, "r3", "aborted")
    s.spill[3] = Spill(2, ("r3", 1), "enqueued", 5)


def _aborted_freed_not_retired(s: ProtocolState) -> None:
    _not_retired(s, "r3", "aborted")


def _finished_not_retired(s: ProtocolState) -> None:
    _not_retired(s, "r1", "finished")


def _import_left_landing(s: ProtocolState) -> None:
    s.imp["r0"] = Imp("device", "landing")


PROPERTY_CORRUPTIONS: dict[str, tuple[Callable[[ProtocolState], None], set[str]]] = {
    "import_left_landing": (_import_left_landing, {"ImportsEnd"}),
    "transfer_left_open": (_transfer_left_open, {"TransfersComplete"}),
    "pin_left_behind": (_pin_left_behind, {"LeasesReleased"}),
    "lease_left_behind": (_lease_left_behind, {"LeasesReleased"}),
    # an aborted request that still holds something cannot retire (see IMPLIED below)
    "aborted_page_still_resident": (_aborted_page_still_resident, {"AbortedFreed", "EndedRetired"}),
    "aborted_page_still_spilling": (
        _aborted_page_still_spilling, {"TransfersComplete", "AbortedFreed", "EndedRetired"}
    ),
    "aborted_freed_not_retired": (_aborted_freed_not_retired, {"EndedRetired"}),
    "finished_not_retired": (_finished_not_retired, {"EndedRetired"}),
}

# AbortedFreed fails at a quiescent state only if an aborted request still holds a lease
# or an open transfer; such a request is not retired, so EndedRetired fails with it in
# every state (TLC agrees: tests/test_tlc_check.py's PROPERTY_BUG_FAILS). No case can
# isolate AbortedFreed; it is isolated up to exactly this implication.
IMPLIED: dict[str, set[str]] = {"AbortedFreed": {"EndedRetired"}}


@pytest.mark.parametrize("name", sorted(PROPERTY_CORRUPTIONS))
def test_property_twins_exactly(name: str) -> None:
    corrupt, expected = PROPERTY_CORRUPTIONS[name]
    m = _drained()
    corrupt(m.state)
    assert {n for n, p in PROPERTIES.items() if p(m.state)} == expected


def test_every_property_twin_alone_catches_something() -> None:
    """Each twin is the only one failing in some case, with nothing but what it implies."""
    cases = [e for _, e in PROPERTY_CORRUPTIONS.values()]
    for name in PROPERTIES:
        assert {name} | IMPLIED.get(name, set()) in cases, name


def test_the_implied_twins_are_told_apart() -> None:
    """An implication goes one way only: the implied twin fails alone somewhere."""
    cases = [e for _, e in PROPERTY_CORRUPTIONS.values()]
    for name, implied in IMPLIED.items():
        for other in implied:
            assert any(other in e and name not in e for e in cases), (name, other)
    every = [e for _, e in PROPERTY_CORRUPTIONS.values()] + list(PROPERTY_BUG_FAILS.values())
    for e in every:  # and it holds in every case listed here
        for name, implied in IMPLIED.items():
            assert name not in e or implied <= e, e


# Python property bugs at quiescence: the exact set of property twins that fail.
PROPERTY_BUG_FAILS = {
    "loss_path_ignores_gaps": {"TransfersComplete", "LeasesReleased"},
    "batched_done_before_enqueued": {"TransfersComplete", "LeasesReleased"},
    "abort_keeps_resident_blocks": {"AbortedFreed", "EndedRetired"},
    "retire_waits_for_host_pages": {"EndedRetired"},
    # the import's host blocks stay leased with it
    "import_done_unreported": {"ImportsEnd", "LeasesReleased"},
}


@pytest.mark.parametrize("bug", sorted(b.name for b in BUGS if b.kind == "property"))
def test_property_bug_fails_exactly(bug: str) -> None:
    m = SCENARIOS[bug](bug)
    assert {n for n, p in PROPERTIES.items() if p(m.state)} == PROPERTY_BUG_FAILS[bug]


@pytest.mark.parametrize(("field", "value"), [("landed", 3), ("staged", 3), ("host", 9)])
def test_an_import_page_past_its_chunks_or_the_pool_is_a_type_error(field: str,
                                                                   value: int) -> None:
    """Each of a page import's fields is in range on its own: a chunk past the spec's
    chunks, a host block past the pool (invariants.py:94:bool:7 needed both at once).
    Only TypeOK can say it: a later twin indexes the pool with it."""
    m = _import_machine("host", False)
    y = m.state.pg[("r1", 1)]
    bad = y._replace(host=HostBlock(value)) if field == "host" else \
        y._replace(**{field: getattr(y, field) | {value}})
    m.state.pg[("r1", 1)] = bad
    assert TypeOK(m.state) == [f"page ('r1', 1)'s import is {bad}"]
    with pytest.raises(InvariantViolation) as err:
        check_invariants(m.state)
    assert err.value.name == "TypeOK"


def test_a_vanished_command_is_reported_for_a_rank_after_a_lost_one() -> None:
    """GapsDetected looks at every rank: one whose loss is pending is skipped, not the
    ranks after it (invariants.py:364:loop:5 stopped at the first lost rank)."""

    m = make_machine(ranks=2)
    m.Arrive("r0")
    tid = m.StartSpill(("r0", 1), 0)
    s = m.state
    assert GapsDetected(s) == []
    s.lost[0] = True  # rank 0's gap is pending: its missing command is accounted for
    del s.down[0][tid]
    assert GapsDetected(s) == []
    del s.down[1][tid]  # rank 1's command vanished with no gap: reported
    (why,) = GapsDetected(s)
    assert why.startswith("rank 1 has not acknowledged the command into host block ")
    assert why.endswith(", but nothing carries it and no gap is pending")


def test_a_reader_reading_a_block_outside_the_pool_is_a_type_error() -> None:
    # (invariants.py:86:call:10: no corruption put a read outside the pool)
    m = make_machine(ranks=2, backing="shared")
    s = m.state
    assert TypeOK(s) == []
    s.reading[1] = {HostBlock(99)}
    (why,) = TypeOK(s)
    assert why.startswith("rank 1 reads blocks [") and "99" in why


def test_a_vanished_command_is_reported_for_a_rank_after_one_that_owes_nothing() -> None:
    """A rank that owes no ack is passed over, not the ranks after it
    (invariants.py:368:loop:6 stopped there)."""
    m = make_machine(ranks=2)
    m.Arrive("r0")
    tid = m.StartSpill(("r0", 1), 0)
    m.WorkerEnqueue(tid, 0)
    m.WorkerReport(0)
    m.ConsumeMeta(0)  # rank 0's enqueued ack is in: it owes nothing
    s = m.state
    sp = s.spill[0]
    assert GapsDetected(s) == [] and sp is not None and 0 in sp.enq
    del s.down[1][tid]  # rank 1's command vanished with no gap: reported
    (why,) = GapsDetected(s)
    assert why.startswith("rank 1 has not acknowledged the command into host block ")


def test_an_importing_page_on_host_block_0_that_is_not_leased_is_reported() -> None:
    # host block 0 is a block like any other (invariants.py:124:none:13 read it as none)
    m = _import_machine("host", False)
    s = m.state
    assert s.pg[("r1", 1)].host == 0
    s.host_state[0] = "valid"
    assert ImportPublishedComplete(s) == [
        f"importing page ('r1', 1)'s host block {s.pg[('r1', 1)].host} is valid"]


@pytest.mark.parametrize("target", ["host", "device"])
def test_a_running_imported_request_missing_a_chunk_is_reported(target: str) -> None:
    """Once the import completed (phase back to none), a running imported request still
    has every chunk of every page: one missing is reported (invariants.py:117:cmp:55,
    ``!=`` → ``==``, looked at running requests of no import instead)."""
    m = _import_machine(target, True)
    m.CompleteImport("r1")
    s = m.state
    assert s.req["r1"] == "running" and s.imp["r1"].phase == "none"
    assert ImportPublishedComplete(s) == []
    s.pg[("r1", 1)] = s.pg[("r1", 1)]._replace(landed=frozenset({1}))
    assert ImportPublishedComplete(s) == [
        "page ('r1', 1) of r1 (import none) has chunks [1] of [1, 2]"]
