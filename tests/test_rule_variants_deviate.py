"""Rule: an injected bug's variant deviates from the correct action exactly as its
docstring (and the spec's ``Bug`` branch) says, and nowhere else; the deviation is
reached, and the invariant the variant is registered with is the one that catches it.

The protocol variants are checked over every state a few seeded walks of the correct
machine reach: at each state, every enabled argument of the variant's action is applied
once by the correct machine and once by the variant (a machine of the bug's subclass
handed a copy of the same state), and the two results are compared. The indexer suffix
variant is checked over every initial state of its twin (every hit pair and store state).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import replace
from itertools import product
from typing import Any

import pytest

from hisparse.spec.catalogue import variant
from hisparse.spec.constants import ProtocolConfig
from hisparse.spec.errors import InvariantViolation
from hisparse.spec.machine import ProtocolMachine
from hisparse.spec.state import ProtocolState
from hisparse.spec.suffix import BLOCK_STATES, SuffixMachine, SuffixState, violated
from hisparse.spec.suffix_variants import SUFFIX_VARIANTS, suffix_machine
from tests.protocol_helpers import (
    UNIVERSE,
    full_spill,
    index_problems,
    legal_moves,
    make_machine,
)

GPU, HOST_BYTES = 3, 9  # four host blocks of two units


def _config(bug: str = "none", ranks: int = 1) -> ProtocolConfig:
    return ProtocolConfig(gpu_blocks=GPU, host_pool_bytes=HOST_BYTES, host_block_bytes=2,
                          ranks=ranks, bug=bug)


# the faults and the request ends, rarer than the rest: walks that reach the workers' acks
RARE = {"WorkerLoss": 0.1, "LoseCommand": 0.1, "LoseMeta": 0.1, "Abort": 0.3, "Retire": 0.3}


def reached(ranks: int, seeds: range, steps: int) -> Iterator[ProtocolMachine]:
    """The correct machine (invariants unchecked: the walks are long) at every state of
    seeded random walks over its enabled actions (actions chosen evenly, but for RARE)."""
    for seed in seeds:
        rng = random.Random(seed)
        m = ProtocolMachine.create(_config(ranks=ranks), check=False)
        for r, keys in UNIVERSE.items():
            m.add_request(r, keys)
        for _ in range(steps):
            yield m
            by_action: dict[str, list[tuple[Any, ...]]] = {}
            for action, args in legal_moves(m):
                by_action.setdefault(action, []).append(args)
            if not by_action:
                break
            actions = sorted(by_action)
            (action,) = rng.choices(actions, [RARE.get(a, 1.0) for a in actions])
            getattr(m, action)(*rng.choice(by_action[action]))


def apply(bug: str, s: ProtocolState, action: str, *args: Any) -> ProtocolState:
    """The state after ``action(*args)`` from a copy of ``s``, by the machine of ``bug``
    ("none": the correct one); ``s`` itself is left as it was."""
    m = ProtocolMachine.create(_config(bug, s.config.ranks), check=False)
    m.state = s.clone()
    getattr(m, action)(*args)
    return m.state


def enabled_args(m: ProtocolMachine, action: str) -> list[tuple[Any, ...]]:
    return [args for a, args in legal_moves(m) if a == action]


# -- worker_forgets_published (IgnoreReplay) ------------------------------------------


@pytest.mark.parametrize("ranks", [1, 2])
def test_worker_forgets_published_executes_exactly_replays_into_published_blocks(
        ranks: int) -> None:
    """The variant executes a replay of command src -> dst iff dst is published (valid)
    and no transfer into dst is open; every other replay stays a stutter, as in the
    protocol. Executed, the replay queues rank w's copy of GPU block src (its bytes now)
    over host block dst. (variants.py:192:var:9 tested the state of host block *src*.)"""
    bug = "worker_forgets_published"
    executed = stutters = 0
    mismatched = 0  # executed with host block src (the GPU index) not valid: var:9
    for m in reached(ranks, range(3), 30):
        s = m.state
        for src, dst, w in enabled_args(m, "IgnoreReplay"):
            assert apply("none", s, "IgnoreReplay", src, dst, w) == s  # a stutter
            got = apply(bug, s, "IgnoreReplay", src, dst, w)
            if s.host_state[dst] == "valid" and s.spill[dst] is None:
                executed += 1
                mismatched += s.host_state[src] != "valid"
                assert len(got.w_enq[w]) == len(s.w_enq[w]) + 1
                assert got.copying[w][dst] == s.gpu_data[src]
                rest = replace(got, w_enq=s.w_enq, copying=s.copying,
                               copying_tid=s.copying_tid, transfer_dst=s.transfer_dst)
                assert rest == s, "an executed replay changed more than rank w's copy"
            else:
                stutters += 1
                assert got == s, f"replay {src} -> {dst} on rank {w} was executed"
    assert executed and stutters and mismatched  # both sides of the deviation reached


def test_worker_forgets_published_replay_src_differs_from_dst() -> None:
    """A replay from GPU block 0 into published host block 1 (host block 0 free) is
    executed by the variant: its copy of other bytes over the published page is in
    flight, and PublishedPageStable, the invariant the variant is registered with, is
    what catches it (variants.py:192:var:9 read host block 0 and did not execute it)."""
    bug = "worker_forgets_published"
    m = make_machine(bug)  # every invariant checked after every action
    m.Arrive("r3")  # GPU block 0
    full_spill(m, ("r3", 1), 1)  # published on host block 1
    m.Finish("r3")
    m.Arrive("r1")  # reuses GPU block 0 (k0's bytes)
    s = m.state
    assert s.host_state[0] == "free" and s.host_state[1] == "valid" and s.spill[1] is None
    with pytest.raises(InvariantViolation) as err:
        m.IgnoreReplay(0, 1, 0)
    assert err.value.name == variant(bug).catches == "PublishedPageStable"
    assert s.copying[0][1] == "k0"  # k0's bytes on their way over r3's published k2


# -- batched_done_before_enqueued (ConsumeMeta) ---------------------------------------


def test_batched_done_before_enqueued_drops_exactly_unmatched_completions() -> None:
    """The variant's ConsumeMeta is the protocol's ConsumeMeta of the same meta with its
    completed IDs cut to those whose transfer was already enqueued before the meta (the
    spec's D): a completion batched with its own enqueued ack is dropped, one of an
    earlier enqueued transfer still closes it. (variants.py:54:cmp:15 dropped every
    completion.)"""
    bug = "batched_done_before_enqueued"
    kept = dropped = 0
    for m in reached(1, range(4), 40):
        s = m.state
        for (w,) in enabled_args(m, "ConsumeMeta"):
            meta = s.up[w][0]
            if not meta.completed:
                assert apply(bug, s, "ConsumeMeta", w) == apply("none", s, "ConsumeMeta", w)
                continue
            matched = tuple(
                tid for tid in meta.completed
                if (sp := s.spill[s.transfer_dst[tid]]) is not None and sp.phase == "enqueued"
            )
            kept += len(matched)
            dropped += len(meta.completed) - len(matched)
            cut = s.clone()
            cut.up[w][0] = meta._replace(completed=matched)
            assert apply(bug, s, "ConsumeMeta", w) == apply("none", cut, "ConsumeMeta", w)
    assert kept and dropped  # both sides of the deviation reached


# -- abort_frees_inflight_host (Abort) -------------------------------------------------


def test_abort_frees_inflight_host_frees_exactly_the_requests_open_destinations() -> None:
    """The variant's Abort is the protocol's, except that every host block with an open
    transfer of the request's pages is freed (state free, no key, no transfer); the
    machine's indexes (in-use count, open transfers, references) stay in step with that.
    (variants.py:123:cmp:20 left the in-use count counting the freed blocks.)"""
    bug = "abort_frees_inflight_host"
    freed = 0
    for m in reached(1, range(4), 40):
        s = m.state
        for (r,) in enabled_args(m, "Abort"):
            want = apply("none", s, "Abort", r)
            got = apply(bug, s, "Abort", r)
            mine = {h for h, sp in enumerate(s.spill) if sp is not None and sp.page[0] == r}
            freed += len(mine)
            assert index_problems(got) == []
            assert got.host_in_use() == want.host_in_use() - len(mine)
            for h in range(len(s.spill)):
                if h in mine:
                    assert (got.host_state[h], got.host_key[h], got.spill[h]) == (
                        "free", None, None)
                else:
                    assert (got.host_state[h], got.host_key[h], got.spill[h]) == (
                        want.host_state[h], want.host_key[h], want.spill[h])
            rest = replace(got, host_state=want.host_state, host_key=want.host_key,
                           spill=want.spill, host_used=want.host_used,
                           open_spills=want.open_spills, transfer_dst=want.transfer_dst,
                           req_refs=want.req_refs)
            assert rest == want, "the variant's Abort changed more than the open transfers"
    assert freed  # the deviation reached


# -- restore_races_store (the indexer suffix twin) -------------------------------------


@pytest.mark.parametrize("n", [1, 2, 3])
def test_restore_races_store_counts_exactly_storing_blocks_as_stored(n: int) -> None:
    """The variant's admission decision in a state is the correct decision in the same
    state with every in-flight store counted as done ("storing" read as "stored"): an
    absent block is never restored. The deviation is reached (a storing block restored),
    and IndexerKeysPresent is what catches it. (suffix_variants.py:40:cmp:1 counted the
    absent blocks instead.)"""
    bug = "restore_races_store"
    good, buggy = SuffixMachine(n), suffix_machine(n, bug)
    catches = next(v.catches for v in SUFFIX_VARIANTS if v.bug == bug)
    deviated = 0
    for host, gpu in product(range(n + 1), repeat=2):
        for held in product(BLOCK_STATES, repeat=n):
            s = SuffixState(host, gpu, held, on_gpu=frozenset(range(gpu)))
            as_stored = replace(s, held=tuple("stored" if h == "storing" else h for h in held))
            got, want = buggy.Decide(s), good.Decide(as_stored)
            assert got is not None and want is not None
            assert (got.admit_mla, got.admit_idx, got.restoring) == (
                want.admit_mla, want.admit_idx, want.restoring)
            assert all(held[b] != "absent" for b in got.restoring)
            if got != good.Decide(s):
                deviated += 1
                assert got.racy and all(held[b] == "storing" for b in got.racy)
                t: SuffixState | None = got
                for b in sorted(got.restoring):  # the restores land, then decode
                    assert t is not None
                    t = buggy.RestoreDone(t, b)
                assert t is not None
                t = buggy.Decode(t)
                assert t is not None and violated(t) == [catches]
    assert deviated


# -- restore_uncapped (the indexer suffix twin) ------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 3])
def test_restore_uncapped_restores_the_whole_stored_run_only_past_a_longer_host_hit(
        n: int) -> None:
    """As the spec's ``Bug = "restore_uncapped" /\\ hostHit > gpuHit``: with a host hit
    longer than the GPU hit the variant restores every restorable block from the GPU hit
    on, up to the first that is not, and admits as the correct rule does; with no longer
    host hit it decides as the correct rule. (suffix_variants.py:18:cmp:0 also restored
    past an equal hit.)"""
    good, buggy = SuffixMachine(n), suffix_machine(n, "restore_uncapped")
    deviated = 0
    for host, gpu in product(range(n + 1), repeat=2):
        for held in product(BLOCK_STATES, repeat=n):
            s = SuffixState(host, gpu, held, on_gpu=frozenset(range(gpu)))
            got, want = buggy.Decide(s), good.Decide(s)
            assert got is not None and want is not None
            if host <= gpu:
                assert got == want
                continue
            end = gpu
            while end < n and good._restorable(s, end):
                end += 1
            assert got.restoring == frozenset(range(gpu, end))
            assert (got.admit_mla, got.admit_idx) == (want.admit_mla, want.admit_idx)
            deviated += got != want
    assert deviated or n == 1  # one block: the whole suffix is the whole run


# -- publish_after_one_rank_done (ConsumeMeta) --------------------------------------------


def test_publish_after_one_rank_done_publishes_early_only_a_live_requests_enqueued_spill(
        ) -> None:
    """The variant's ConsumeMeta differs from the protocol's only on host blocks whose
    request is not aborted: those it publishes at the first rank's completed ack. An aborted request's block waits for every rank, as in the
    protocol. (variants.py:87:bool:0 closed every spill with a completed ack.)"""
    bug = "publish_after_one_rank_done"
    early = aborted_kept = 0
    for m in reached(2, range(24), 60):
        s = m.state
        for args in enabled_args(m, "ConsumeMeta"):
            want = apply("none", s, "ConsumeMeta", *args)
            got = apply(bug, s, "ConsumeMeta", *args)
            for h, sp in enumerate(s.spill):
                same = (got.host_state[h], got.spill[h]) == (want.host_state[h],
                                                             want.spill[h])
                live = sp is not None and s.req[sp.page[0]] != "aborted"
                if not same:
                    early += 1
                    assert live and got.host_state[h] == "valid" and got.spill[h] is None
                elif sp is not None and not live and want.spill[h] is not None:
                    aborted_kept += 1
    assert early and aborted_kept  # both sides of the deviation reached


# -- report_partial_page (ReportImport) ----------------------------------------------------


def test_report_partial_page_reports_exactly_when_every_page_has_some_chunk() -> None:
    """The variant's ReportImport is enabled for a landing import exactly when every page
    has at least one chunk landed (the protocol's needs every chunk). (variants.py:223:
    collection:0 reported once any page had one.)"""
    from hisparse.spec.errors import ActionNotEnabled
    from tests.protocol_helpers import import_walk

    some_not_all = reported = 0
    for seed in range(8):
        for m in import_walk(seed, 60, gpu_blocks=3, host_pool_bytes=9, chunks=2,
                             staging_slots=1):
            s = m.state
            for r, x in s.imp.items():
                if x.phase != "landing":
                    continue
                landed = [bool(s.pg_of((r, i)).landed)
                          for i in range(1, len(s.page_keys[r]) + 1)]
                bugged = s.config.model_copy(update={"bug": "report_partial_page"})
                v = ProtocolMachine.create(bugged, check=False)
                v.state = s.clone()
                try:
                    v.ReportImport(r)
                    ok = True
                except ActionNotEnabled:
                    ok = False
                assert ok == all(landed), (r, landed)
                some_not_all += any(landed) and not all(landed)
                reported += ok
    assert some_not_all and reported  # both sides reached
