"""Rule: an executed replay, the injected bugs' steps, the invariant checks' errors, the
sync check and the indexer suffix twin do exactly what the spec says, as the second
group of spec/ survivors of the whole mutation run showed (docs/mutation-run7).
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from pathlib import Path

import pytest

from hisparse.spec import variants
from hisparse.spec.catalogue import CATALOGUE, disagreements
from hisparse.spec.constants import ProtocolConfig
from hisparse.spec.errors import ActionNotEnabled, InvariantViolation
from hisparse.spec.invariants import INVARIANTS, check_invariants
from hisparse.spec.machine import ProtocolMachine
from hisparse.spec.state import GARBAGE, HostBlock, ProtocolState
from hisparse.spec.suffix import (
    BLOCK_STATES,
    BlockState,
    SuffixMachine,
    SuffixState,
    type_ok,
    violated,
)
from tests.protocol_helpers import legal_moves
from tests.test_rule_survivors_spec import ONE_RANK, PRIVATE, SHARED, SHARED_WRITER_1, walk
from tests.test_rule_sync_reports import _replace

SPEC = (Path(__file__).resolve().parents[1] / "tla" / "HiSparse.tla").read_text()

# --- an executed replay (the injected bugs of IgnoreReplay) ----------------------------


def replayed(bug: str, s: ProtocolState, src: int, dst: int, w: int) -> ProtocolState:
    """The state after IgnoreReplay(src, dst, w) from a copy of ``s`` by the machine of
    ``bug`` (its checks off: the bug breaks an invariant by design)."""
    m = ProtocolMachine.create(s.config.model_copy(update={"bug": bug}), check=False)
    m.state = s.clone()
    m.IgnoreReplay(src, dst, w)
    return m.state


def test_an_executed_replay_runs_under_the_open_transfers_id_or_minus_one_minus_its_block(
) -> None:
    """In every walked state, a replay of command src -> dst that an injected bug makes
    the worker execute queues one ack on rank w under the ID of the transfer open into
    host block dst, or, when none is open (a published page), under -1 - dst; a copier
    also starts a copy of GPU block src's bytes over dst under that ID, a reader of a
    shared pool starts none; the ID's destination is dst; nothing else changes.
    (spec/machine.py:1396:arith:34 used -1 + dst; :1395:var:117 read the transfer open
    into block src; :1396:var:119 used -1 - src; :1399:var:122 filed the copy's ID under
    block src; :1400:var:123 gave the closed ID destination src; :1397:var:141 started a
    copy on a reader too.)"""
    met: Counter[str] = Counter()
    for bug in ("worker_applies_replay", "worker_forgets_published"):
        for config in (ONE_RANK, PRIVATE, SHARED, SHARED_WRITER_1):
            for seed in range(2):
                for m in walk(seed, 40, config):
                    s = m.state
                    copiers = s.config.copiers
                    for action, args in legal_moves(m):
                        if action != "IgnoreReplay":
                            continue
                        src, dst, w = args
                        got = replayed(bug, s, src, dst, w)
                        sp = s.spill[dst]
                        if bug == "worker_forgets_published" and not (
                                s.host_state[dst] == "valid" and sp is None):
                            assert got == s  # a stutter, as in the protocol
                            continue
                        tid = sp.transfer_id if sp is not None else -1 - dst
                        want = s.clone()
                        if w in copiers:
                            want.copying[w][dst] = s.gpu_data[src]
                            want.copying_tid[w][dst] = tid
                        if sp is None:  # the correct machine keeps no negative ID
                            assert tid not in s.transfer_dst
                            want.transfer_dst[tid] = HostBlock(dst)
                        else:
                            assert s.transfer_dst[tid] == dst
                        want.w_enq[w].append(tid)
                        assert got == want, (bug, src, dst, w)
                        met["closed, dst > 0"] += sp is None and dst > 0
                        met["open, src != dst"] += sp is not None and src != dst
                        met["closed, src != dst"] += sp is None and src != dst
                        met["copier, src != dst"] += w in copiers and src != dst
                        met["reader"] += w not in copiers
    for case in ("closed, dst > 0", "open, src != dst", "closed, src != dst",
                 "copier, src != dst", "reader"):
        assert met[case], (case, met)


def test_worker_forgets_published_answers_whether_the_block_is_published_and_closed(
) -> None:
    """The variant's step answers, for any host block of a walked state, True exactly
    when the block is published (valid) and no transfer into it is open: a free or
    leased block with no open transfer is not a published page. (spec/variants.py:192:
    bool:2 answered True for every block with no open transfer. IgnoreReplay offers the
    step only published blocks or blocks with an open transfer, where the two agree.)"""
    met: Counter[tuple[str, bool]] = Counter()
    for config in (ONE_RANK, PRIVATE, SHARED):
        for seed in range(2):
            for m in walk(seed, 40, config):
                s = m.state
                for dst, st in enumerate(s.host_state):
                    closed = s.spill[dst] is None
                    want = st == "valid" and closed
                    for src in range(s.config.gpu_blocks):
                        for w in range(s.config.ranks):
                            got = variants.worker_forgets_published(m, src, dst, w)
                            assert type(got) is bool and got == want, (st, closed)
                    met[st, closed] += 1
    assert met["free", True] and met["valid", True] and met["leased", False], met


# --- report_partial_page (ReportImport) ------------------------------------------------


def _partly_landed_import() -> ProtocolMachine:
    """r1 imported into the host tier, one chunk of two landed and copied on each of its
    two pages, each page still holding its staging slot."""
    cfg = ProtocolConfig(gpu_blocks=2, host_pool_bytes=9, host_block_bytes=2, chunks=2,
                         staging_slots=2, bug="report_partial_page")
    m = ProtocolMachine.create(cfg, check=False)  # the report breaks an invariant: the bug
    m.add_import("r1", ("k1", "k2"))
    m.add_request("r2", ("k3",))
    m.Arrive("r2")  # holds one of the two GPU blocks: r1 lands in the host tier
    m.ImportArrive("r1")
    assert m.ChooseTarget("r1") == "host"
    m.AdmitImport("r1")
    for i in (1, 2):
        p = ("r1", i)
        m.LeaseStaging(p)
        m.LandChunk(p, 1)
        m.CopyToHost(p)
    return m


def test_report_partial_page_drops_every_slot_of_the_request_with_its_report() -> None:
    """The variant reports an import once every page has some chunk landed, and the
    report drops every page's staging slot and staged chunks, changing no other state.
    Listing the enabled moves changes nothing: the variant's check once dropped the slots
    itself, so a listing emptied them and ``drain()`` then took a move it had listed
    before and was refused. (spec/variants.py:227:bool:4 dropped only some slots.)"""
    m = _partly_landed_import()
    s = m.state
    before = s.clone()
    assert "ReportImport" in [name for name, _ in m.import_moves()]
    assert s == before  # the listing changed nothing
    assert all(before.pg[("r1", i)].slot and before.pg[("r1", i)].staged for i in (1, 2))
    m.ReportImport("r1")
    want = before.clone()
    for i in (1, 2):
        want.pg[("r1", i)] = before.pg[("r1", i)]._replace(slot=False, staged=frozenset())
    want.imp["r1"] = before.imp["r1"]._replace(phase="landed")
    assert s == want
    assert s.slots() == 0
    # the run that listing used to break: drain() takes only moves still enabled
    other = _partly_landed_import()
    other.drain()
    assert other.state.imp["r1"].phase != "landing" and other.state.slots() == 0


# --- an invariant violation carries its problems ----------------------------------------


def test_an_invariant_violation_names_the_first_broken_invariant_and_its_problems() -> None:
    """Every walked state passes the checks; break one (a copy of garbage started over a
    published block, a running page's entry lost) and the check raises naming the first
    broken invariant in the spec's order, its details being that invariant's problems
    joined by "; ", and its message saying both. (spec/errors.py:64:var:10 kept the name
    as the details.)"""
    met: Counter[str] = Counter()
    for config in (ONE_RANK, PRIVATE):
        for seed in range(3):
            for m in walk(seed, 60, config):
                s = m.state
                check_invariants(s)
                broken: list[ProtocolState] = []
                for h, st in enumerate(s.host_state):
                    if st == "valid":
                        bad = s.clone()
                        bad.copying[next(iter(s.host_data))][h] = GARBAGE
                        broken.append(bad)
                for p, where in s.loc.items():
                    if s.req[p[0]] == "running" and where is not None:
                        bad = s.clone()
                        bad.loc[p] = None
                        broken.append(bad)
                for bad in broken:
                    name = next(n for n, inv in INVARIANTS.items() if inv(bad))
                    details = "; ".join(INVARIANTS[name](bad))
                    with pytest.raises(InvariantViolation) as err:
                        check_invariants(bad)
                    e = err.value
                    assert (e.name, e.details) == (name, details)
                    assert str(e) == f"invariant {name} violated: {details}"
                    met[name] += 1
                    met["several"] += "; " in details
    assert met["PublishedPageStable"] and met["LivePagesReadable"] and met["several"], met


# --- the sync check ----------------------------------------------------------------------


NAMES = [a.name for a in CATALOGUE]


def test_an_action_the_spec_does_not_define_is_reported_and_later_actions_still_checked(
) -> None:
    """A catalogue action whose definition the spec lacks gives the action-list line and
    leaves only its own lifecycle trigger unfired; every action after it is still checked
    (a defect of a later one is reported, and their injected bugs still match the
    spec's). (spec/catalogue.py:628:loop:2 stopped at the undefined action.)"""
    spec = re.sub(r"^Finish\(r\) ==", "Finnish(r) ==", SPEC, count=1, flags=re.M)
    assert spec != SPEC and NAMES.index("Finish") < NAMES.index("Retire")
    cat = _replace("Retire", replay="Retire(e.args.req)")
    assert disagreements(spec, ProtocolMachine, cat) == [
        f"spec actions {sorted(set(NAMES) - {'Finish'})} != catalogue {sorted(NAMES)}",
        "Retire: replay reads ['req'], encoding gives ['request']",
        "lifecycle triggers no action fires: [('request', 'finish')]",
    ]


@pytest.mark.parametrize("name", ["Finish", "Retire", "IgnoreReplay"])
def test_a_replay_reading_other_fields_than_its_encoding_is_its_own_line(name: str) -> None:
    """A replay expression that reads other ``e.args`` fields than the action's encoding
    gives exactly one line naming both sets, and no injected-bug mismatch.
    (spec/catalogue.py:639:var:25 filed it with the bug names instead.)"""
    action = next(a for a in CATALOGUE if a.name == name)
    fields = sorted(f for f, _ in action.tla_args)
    replay = re.sub(r"e\.args\.(\w+)", r"e.args.\1_x", action.replay)
    assert replay != action.replay
    cat = tuple(dataclasses.replace(a, replay=replay) if a.name == name else a
                for a in CATALOGUE)
    assert disagreements(SPEC, ProtocolMachine, cat) == [
        f"{name}: replay reads {sorted(f + '_x' for f in fields)}, encoding gives {fields}"]


# --- the indexer suffix twin -------------------------------------------------------------


def reachable(n: int) -> set[SuffixState]:
    """Every state of the twin with ``n`` blocks reachable from its initial states."""
    machine = SuffixMachine(n)
    seen = set(machine.initial())
    todo = list(seen)
    while todo:
        for _, t in machine.successors(todo.pop()):
            if t not in seen:
                seen.add(t)
                todo.append(t)
    return seen


def _held(s: SuffixState, b: int, v: BlockState) -> SuffixState:
    held = list(s.held)
    held[b] = v
    return dataclasses.replace(s, held=tuple(held))


@pytest.mark.parametrize("n", [1, 2])
def test_a_blocks_store_goes_absent_storing_stored_and_only_an_unpinned_stored_one_is_evicted(
        n: int) -> None:
    """In every reachable state of the twin, for every block: StoreStart takes exactly an
    absent block to storing, StoreDone exactly a storing one to stored, Evict exactly a
    stored block not being restored back to absent; each is disabled (None) otherwise.
    (spec/suffix.py:108:cmp:16 completed every store but a running one.)"""
    machine = SuffixMachine(n)
    met: Counter[tuple[str, bool]] = Counter()
    for s in reachable(n):
        for b in range(n):
            held = s.held[b]
            assert machine.StoreStart(s, b) == (
                _held(s, b, "storing") if held == "absent" else None)
            assert machine.StoreDone(s, b) == (
                _held(s, b, "stored") if held == "storing" else None)
            assert machine.Evict(s, b) == (
                _held(s, b, "absent") if held == "stored" and b not in s.restoring
                else None)
            met[held, b in s.restoring] += 1
    assert set(met) >= {(h, False) for h in BLOCK_STATES} | {("stored", True)}, met


@pytest.mark.parametrize("n", [1, 2])
def test_type_ok_fails_when_any_one_variable_leaves_its_range(n: int) -> None:
    """Every reachable state of the twin is TypeOK; moving any one of its variables out of
    range (a hit or admitted length past n or below 0, a block past n among the
    restoring, racy or GPU-resident ones) breaks TypeOK alone of them.
    (spec/suffix.py:168:bool:2 needed every variable out of range.)"""
    states = reachable(n)
    assert all(type_ok(s) for s in states)
    s = next(iter(sorted(states, key=repr)))
    outside = frozenset({n})
    broken = [
        *(b for v in (-1, n + 1) for b in (
            dataclasses.replace(s, host_hit=v), dataclasses.replace(s, gpu_hit=v),
            dataclasses.replace(s, admit_mla=v), dataclasses.replace(s, admit_idx=v))),
        dataclasses.replace(s, restoring=s.restoring | outside),
        dataclasses.replace(s, racy=s.racy | outside),
        dataclasses.replace(s, on_gpu=s.on_gpu | outside),
    ]
    for bad in broken:
        assert type_ok(bad) is False, bad
        assert violated(bad)[0] == "TypeOK", bad


# --- check_report and a rank with a gap ---------------------------------------------------


def test_check_report_refuses_every_meta_of_a_rank_with_a_gap_as_consume_meta_does() -> None:
    """``check_report`` says whether ConsumeMeta would take a meta, and ConsumeMeta takes
    none from a rank whose earlier meta was lost (``lost``) until the worker-loss path
    runs: over walked states, once a rank's meta in flight is lost, the check refuses what
    it carried with ConsumeMeta's own refusal and changes nothing. (It used to pass a
    reader's enqueued acks there; the coordinator detects gaps by sequence numbers and
    never sets ``lost``, so only the machine's own contract showed it.)"""
    seen = 0
    for config in (ONE_RANK, PRIVATE, SHARED):
        for seed in range(4):
            for m in walk(seed, 50, config):
                s = m.state
                for w in range(s.config.ranks):
                    if not s.up[w] or s.w_enq[w] or s.w_done[w]:
                        continue  # (nothing else pending: the check's first refusal)
                    v = ProtocolMachine.create(s.config, check=False)
                    v.state = s.clone()
                    meta = v.state.up[w][0]
                    v.LoseMeta(w)
                    before = v.state.clone()
                    message = (f"ConsumeMeta is not enabled: rank {w} has a gap: its metas "
                               "are refused until the worker-loss path runs")
                    with pytest.raises(ActionNotEnabled, match=f"^{re.escape(message)}$"):
                        v.check_report(meta.enqueued, meta.completed, w)
                    assert v.state == before
                    seen += 1
    assert seen >= 20, seen
