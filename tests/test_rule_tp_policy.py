"""Rule: the tensor-parallel run's scheduler keeps its stated policy, and the run's
self-checks count a faulty rank (``hisparse/tp/run.py``).

Policy, stated over every plan of lockstep runs of many shapes (Hypothesis over the
options, the two ranks' ``RankSide`` driven in this thread as ``run_rank`` drives them):

- a request decodes exactly its ``decode_steps`` steps and then ends finished; an abort
  only cuts one short; with no abort rate every request finishes;
- at most ``concurrency`` requests run, they are the coordinator's running requests,
  admission is first come first served and stops only at the bound or at a refusal,
  and a refusal reclaims exactly the GPU blocks the request is short of;
- every spill the plan starts is among that plan's commands;
- the run drains only once every arrival was added and no request runs or waits, and is
  done only then, with every arrival retired and no spill open;
- a rank's acks report every copy that landed that step (a drain lands all of them).

Plus what the options give the config, and the harness self-checks with an injected
fault: a rank whose counters or bytes differ from its oracle's counts every row, rank 0
counts every step whose digests differ, and a run that never drains fails after exactly
``plan_limit`` plans (derived from the workload: a serial one drains too).

From the second round of guard survivors of the third guard-phase run
(docs/mutation-survivors.md, "Second round resolved: tp/run.py"): kills ``86:var:17``,
``87:var:21``, ``88:int:12``, ``88:cmp:44``, ``142:int:7``, ``142:cmp:32``,
``143:cmp:43``, ``148:cmp:22``, ``150:reorder:13``, ``152:arith:21``, ``152:call:45``,
``159:reorder:5``, ``162:arith:5``, ``163:not:3``, ``163:var:32``, ``295:var:13``,
``306:var:44``, ``323:reorder:11``, ``487:arith:14``, ``503:arith:19``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

from hisparse.coordinator import Admission
from hisparse.executor.reference import ReferenceExecutor
from hisparse.spec.messages import CONNECTOR_METADATA, WORKER_META
from hisparse.tp import run as tprun
from hisparse.tp.group import PipeGroup
from hisparse.tp.run import RankReport, RankSide, Scheduler, TpOptions, TpRunFailed
from hisparse.worker import DecodeResult


@dataclass
class Step:
    """One plan and what making it did on the coordinator."""

    plan: dict[str, Any]
    calls: list[tuple[Any, ...]]  # admit / reclaim / finish / abort, in call order
    spills: int  # pages the coordinator started spilling while planning
    running: list[str]  # the scheduler's running requests after the plan
    coordinator_running: set[str]  # requests the coordinator's state has running
    pending: list[str]
    added: set[str]  # every request ID added so far
    retired: int
    open_spills: int
    acks: list[tuple[set[int], set[int], list[int]]] = field(default_factory=list)
    """Per rank: queued before its acks, queued after, completed IDs the acks report."""


LIMIT = 1000  # plans: these shapes drain in a few hundred at most (one at a time, 10 x 16)


@dataclass
class Lockstep:
    sched: Scheduler
    sides: list[RankSide]
    steps: list[Step]


class _SpiedCoordinator:
    """The scheduler's coordinator, forwarding every attribute, that records the four
    calls the scheduler's policy makes (a proxy: the mypyc-compiled coordinator's
    methods cannot be shadowed on the instance). The calls go through unchanged."""

    def __init__(self, sched: Scheduler, calls: list[tuple[Any, ...]]) -> None:
        self._c, self._kv, self._calls = sched.coordinator, sched.kv, calls

    def __getattr__(self, name: str) -> Any:
        return getattr(self._c, name)

    def admit(self, request_id: str, max_hits: int | None = None) -> Admission | None:
        need, free = self._c.gpu_blocks_needed(request_id), self._kv.num_free
        out = self._c.admit(request_id, max_hits)
        self._calls.append(("admit", request_id, out is not None, need, free))
        return out

    def reclaim(self, blocks: int) -> int:
        self._calls.append(("reclaim", blocks))
        return self._c.reclaim(blocks)

    def finish(self, request_id: str) -> None:
        self._calls.append(("finish", request_id))
        self._c.finish(request_id)

    def abort(self, request_id: str) -> None:
        self._calls.append(("abort", request_id))
        self._c.abort(request_id)


def _spy(sched: Scheduler, calls: list[tuple[Any, ...]]) -> None:
    """Record the coordinator calls the scheduler makes (``_SpiedCoordinator``)."""
    sched.coordinator = _SpiedCoordinator(sched, calls)  # type: ignore[assignment]


def lockstep(o: TpOptions, executor: Callable[[int], ReferenceExecutor] = lambda r: ReferenceExecutor(),
             fault: Callable[[RankSide], None] | None = None) -> Lockstep:
    """``run_rank``'s loop for every rank in this thread (private reference backing):
    plan, front, commands, decode, acks, consume; ``fault`` is applied to rank 1. Its
    limit on plans is a fixed one no drain of these shapes comes near (``run_rank``'s own,
    ``plan_limit``, is tested below)."""
    config = o.config()
    sched = Scheduler(o, config)
    calls: list[tuple[Any, ...]] = []
    _spy(sched, calls)
    sides = [RankSide(o, config, executor(r), RankReport(r, "private", "private"))
             for r in range(o.ranks)]
    if fault is not None:
        fault(sides[1])
    c = sched.coordinator
    steps: list[Step] = []
    for t in range(LIMIT):
        calls.clear()
        spills = c.spills
        plan = json.loads(json.dumps(sched.plan(t)))
        state = c.state
        step = Step(plan, list(calls), c.spills - spills, list(sched.running),
                    {r for r, s in state.req.items() if s == "running"}, list(sched.pending),
                    set(sched.pages), c.retired, len(state.open_spills))
        steps.append(step)
        if plan["done"]:
            break
        metas: list[bytes] = []
        for side in sides:
            side.front(plan)
            side.apply(plan["meta"])
            side.decode(plan["topk"], plan["step"])
            before = set(side.executor.queued())
            raw = side.acks(plan["drain"])
            done = list(WORKER_META.validate_json(raw).completed) if raw else []
            step.acks.append((before, set(side.executor.queued()), done))
            metas.append(raw)
        sched.consume(metas)
    else:
        raise AssertionError("the lockstep run did not drain")
    return Lockstep(sched, sides, steps)


@lru_cache(maxsize=128)
def _run(o: TpOptions) -> Lockstep:
    """``lockstep(o)`` without a fault, once per shape: the property tests below draw the
    same shapes and only read the plans (the ranks' pools are not kept)."""
    run = lockstep(o)
    return Lockstep(run.sched, [], run.steps)


def _options(seed: int, requests: int, steps: int, concurrency: int, gpu_blocks: int,
             arrival_rate: float, spill_rate: float, abort_rate: float, layers: int) -> TpOptions:
    return TpOptions(executor="reference", ranks=2, seed=seed, requests=requests, steps=steps,
                     concurrency=concurrency, gpu_blocks=gpu_blocks, arrival_rate=arrival_rate,
                     spill_rate=spill_rate, abort_rate=abort_rate, layers=layers)


OPTIONS = st.builds(
    _options, seed=st.integers(0, 50), requests=st.integers(3, 10),
    steps=st.integers(5, 30), concurrency=st.integers(1, 5),
    gpu_blocks=st.sampled_from([10, 16, 24, 64]),
    arrival_rate=st.sampled_from([0.15, 0.5, 2.0]),
    spill_rate=st.sampled_from([0.0, 0.5, 1.0]),
    abort_rate=st.sampled_from([0.0, 0.05, 0.3]),
    layers=st.integers(1, 3),
)
# shapes that reach what the rules speak of: the concurrency bound with blocks to spare,
# refusals for want of blocks, idle gaps between arrivals (the first two with no aborts)
BOUND = _options(1, 10, 20, 3, 64, 2.0, 0.5, 0.0, 2)
REFUSED = _options(2, 10, 20, 4, 10, 2.0, 0.0, 0.0, 3)
GAPS = _options(3, 8, 30, 2, 24, 0.15, 0.5, 0.05, 2)


def test_the_named_shapes_reach_the_states_the_rules_speak_of() -> None:
    """So the examples below are not vacuous: the bound binds while requests wait,
    admissions are refused, and the run idles between arrivals."""
    bound = _run(BOUND)
    assert any(len(s.running) == BOUND.concurrency and s.pending for s in bound.steps)
    refused = _run(REFUSED)
    assert any(call[0] == "admit" and not call[2] for s in refused.steps for call in s.calls)
    gaps = _run(GAPS)
    assert any(not s.running and not s.pending and len(s.added) < GAPS.requests
               for s in gaps.steps)


@settings(max_examples=15, deadline=None)
@given(OPTIONS)
@example(BOUND)
@example(REFUSED)
@example(GAPS)
def test_each_request_decodes_exactly_its_steps_then_finishes(o: TpOptions) -> None:
    run = _run(o)
    want = {a.request_id: a.decode_steps for a in run.sched.arrivals}
    decoded = dict.fromkeys(want, 0)
    ended: dict[str, str] = {}
    for i, s in enumerate(run.steps):
        ends = [(c[0], c[1]) for c in s.calls if c[0] in ("finish", "abort")]
        assert s.plan["released"] == [r for _, r in ends]
        for how, r in ends:
            assert r not in ended
            ended[r] = how
            # a request ends finished exactly when it decoded all its steps
            assert (how == "finish") == (decoded[r] == want[r]), (r, how, decoded[r], want[r])
            if o.abort_rate == 0:
                assert how == "finish"
        for r in s.plan["topk"]:
            decoded[r] += 1
            assert decoded[r] <= want[r], (r, decoded[r], want[r])
        if i + 1 < len(run.steps):  # the next plan releases every request done decoding
            nxt = run.steps[i + 1].plan["released"]
            assert all(r in nxt for r in s.running if decoded[r] == want[r])
    assert set(ended) == set(want)


@settings(max_examples=15, deadline=None)
@given(OPTIONS)
@example(BOUND)
@example(REFUSED)
def test_admission_is_first_come_under_the_bound_and_a_refusal_reclaims_the_shortfall(
    o: TpOptions,
) -> None:
    run = _run(o)
    order = [a.request_id for a in run.sched.arrivals]
    admitted_so_far: list[str] = []
    for s in run.steps:
        assert len(s.running) <= o.concurrency
        assert sorted(s.plan["topk"]) == sorted(s.running)
        assert s.coordinator_running == set(s.running)
        admits = [c for c in s.calls if c[0] == "admit"]
        # the pending head is tried in arrival order; a refusal ends the admissions
        assert all(c[2] for c in admits[:-1])
        admitted_so_far += [c[1] for c in admits if c[2]]
        assert [r for r, _, _ in s.plan["admitted"]] == [c[1] for c in admits if c[2]]
        refused = bool(admits) and not admits[-1][2]
        if refused:
            _, r, _, need, free = admits[-1]
            at = s.calls.index(admits[-1])
            assert s.calls[at + 1] == ("reclaim", need - free)
            assert s.pending[0] == r
        elif s.pending:  # nobody refused and somebody waits: the bound stopped admission
            assert len(s.running) == o.concurrency
    assert admitted_so_far == order[: len(admitted_so_far)] and set(admitted_so_far) == set(order)


@settings(max_examples=15, deadline=None)
@given(OPTIONS)
@example(REFUSED)
@example(BOUND)
def test_a_plan_reclaims_after_a_refusal_or_by_its_spill_rate_alone(o: TpOptions) -> None:
    """Besides the refusal's reclaim, a plan reclaims one block, and only with requests
    running and a spill rate above 0 (tp/run.py:172:bool:3 reclaimed whenever any ran)."""
    run = _run(o)
    for s in run.steps:
        for i, call in enumerate(s.calls):
            if call[0] != "reclaim":
                continue
            after_refusal = i > 0 and s.calls[i - 1][0] == "admit" and not s.calls[i - 1][2]
            if not after_refusal:
                assert call == ("reclaim", 1) and s.running and o.spill_rate > 0, (o, s.calls)


@settings(max_examples=15, deadline=None)
@given(OPTIONS)
@example(BOUND)
@example(GAPS)
def test_every_spill_a_plan_starts_is_among_its_commands(o: TpOptions) -> None:
    run = _run(o)
    seen: set[int] = set()
    for s in run.steps:
        meta = s.plan["meta"]
        tids = ([t.transfer_id for t in CONNECTOR_METADATA.validate_json(meta).transfers]
                if meta is not None else [])
        assert len(tids) == s.spills and not seen & set(tids)
        seen |= set(tids)
    assert len(seen) == run.sched.coordinator.spills


@settings(max_examples=15, deadline=None)
@given(OPTIONS)
@example(GAPS)
@example(BOUND)
def test_the_run_drains_and_is_done_only_once_every_arrival_is_retired(o: TpOptions) -> None:
    run = _run(o)
    every = {a.request_id for a in run.sched.arrivals}
    for s in run.steps:
        idle = not s.running and not s.pending and s.added == every
        assert s.plan["drain"] == idle
        assert s.plan["done"] == (idle and s.open_spills == 0 and s.plan["meta"] is None)
    last = run.steps[-1]
    assert last.plan["done"] and not any(s.plan["done"] for s in run.steps[:-1])
    assert last.retired == len(every) and last.open_spills == 0


@settings(max_examples=15, deadline=None)
@given(OPTIONS)
@example(BOUND)
def test_a_ranks_acks_report_every_copy_landed_that_step(o: TpOptions) -> None:
    run = _run(o)
    for s in run.steps[:-1]:  # (the done plan sends no acks)
        for before, after, completed in s.acks:
            assert sorted(completed) == sorted(before - after) and after <= before
            if s.plan["drain"]:
                assert after == set()


def test_the_options_reach_the_config() -> None:
    """Every ``TpOptions`` field the config takes, with values apart from each other and
    from the defaults (layers != ranks); layer 1 follows layer 0's indexer."""
    o = TpOptions(ranks=3, layers=4, host_blocks=7, block_tokens=8, row_bytes=32, top_k=16,
                  backing="shared")
    c = o.config()
    assert (c.host_pool_blocks, c.block_tokens, c.row_bytes, c.top_k, c.layers, c.tp_ranks,
            c.backing, c.index_leaders) == (7, 8, 32, 16, 4, 3, "shared", (0, 0, 2, 3))
    assert TpOptions(layers=1).config().index_leaders == (0,)
    assert TpOptions(layers=2).config().index_leaders == (0, 0)


# -- a faulty rank: the harness's self-checks count it --------------------------------------


FAULTY = _options(4, 6, 20, 3, 24, 0.5, 0.5, 0.0, 2)


def _valid_positions(steps: list[Step]) -> int:
    return sum(int((np.array(v) >= 0).sum()) for s in steps for v in s.plan["topk"].values())


def test_a_rank_whose_counters_differ_from_its_oracles_counts_every_row() -> None:
    """Rank 1's worker reports one miss more per leader than its oracle (the bytes are
    right): every valid position of every leader counts as a mismatch, on rank 1 only."""

    def miscount(side: RankSide) -> None:
        decode = side.worker.decode

        def wrong(topk_by_leader: Mapping[int, Mapping[str, NDArray[np.int32]]],
                  step: int) -> DecodeResult:
            got = decode(topk_by_leader, step)
            host = got.results_on_host  # (cached: the harness reads this dict)
            for lead, res in host.items():
                host[lead] = replace(res, misses=res.misses + 1)
            return got

        side.worker.decode = wrong  # type: ignore[method-assign]

    run = lockstep(FAULTY, fault=miscount)
    valid = _valid_positions(run.steps)
    leaders = len(set(FAULTY.config().leaders))
    good, bad = (s.report for s in run.sides)
    assert valid > 0 and good.mismatches == 0
    assert bad.mismatches == leaders * valid
    assert bad.rows_checked == good.rows_checked == FAULTY.layers * valid


class Corrupting(ReferenceExecutor):
    """Prefill writes every byte inverted: the rows are not the bytes of their positions."""

    def write_device_rows(self, pools: Any, rows: Any, data: Any) -> None:
        super().write_device_rows(pools, rows, data ^ np.uint8(0xFF))


def test_a_rank_whose_rows_are_not_the_written_bytes_counts_every_row() -> None:
    run = lockstep(FAULTY, executor=lambda r: Corrupting() if r == 1 else ReferenceExecutor())
    valid = _valid_positions(run.steps)
    good, bad = (s.report for s in run.sides)
    assert valid > 0 and good.mismatches == 0
    assert bad.mismatches == bad.rows_checked == FAULTY.layers * valid


# -- whole runs in two threads (run_rank itself) ---------------------------------------------


def _threads(o: TpOptions) -> tuple[dict[int, Any], dict[int, BaseException], list[int]]:
    """``run_rank`` on every rank, one thread each: reports and errors by rank, and how
    many plans each rank received."""
    pipes: list[list[Connection]] = [[] for _ in range(o.ranks)]
    for r in range(1, o.ranks):
        a, b = Pipe()
        pipes[0].append(a)
        pipes[r].append(b)
    counts = [0] * o.ranks

    class Counting(PipeGroup):
        def broadcast(self, data: bytes | None) -> bytes:
            out = super().broadcast(data)
            counts[self.rank] += 1 if out else 0  # (b"": the barrier's)
            return out

    reports: dict[int, Any] = {}
    errors: dict[int, BaseException] = {}

    def rank(r: int) -> None:
        try:
            reports[r] = tprun.run_rank(o, Counting(r, o.ranks, pipes[r]))
        except BaseException as e:  # reported by the caller
            errors[r] = e
            for c in pipes[r]:
                c.close()

    threads = [threading.Thread(target=rank, args=(r,), daemon=True) for r in range(o.ranks)]
    for t in threads:
        t.start()
    for t in threads:  # the limit only catches a rank stuck forever; the run takes seconds
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a rank is stuck"
    return reports, errors, counts


def test_rank_0_counts_every_step_whose_digests_differ(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 1 sends a wrong digest for every step it decodes: rank 0 counts each such
    step once, and rank 1 (whose own rows are right) counts none."""
    decode = RankSide.decode
    decoded = [0]

    def wrong(self: RankSide, topk: dict[str, list[int]], step: int) -> str:
        digest = decode(self, topk, step)
        if self.report.rank == 1 and digest:
            decoded[0] += 1
            return digest[::-1]
        return digest

    monkeypatch.setattr(RankSide, "decode", wrong)
    reports, errors, _ = _threads(FAULTY)
    assert not errors, errors
    assert decoded[0] > 0
    assert reports[0]["mismatches"] == decoded[0] and reports[1]["mismatches"] == 0


def test_a_run_that_never_drains_fails_after_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """A scheduler that never says done: every rank takes exactly ``plan_limit`` plans,
    then fails, rather than run on or stop early."""

    class Never(Scheduler):
        def plan(self, t: int) -> dict[str, Any]:
            return {**super().plan(t), "done": False}

    monkeypatch.setattr(tprun, "Scheduler", Never)
    o = replace(FAULTY, steps=12)
    reports, errors, counts = _threads(o)
    assert not reports and sorted(errors) == [0, 1]
    assert all(isinstance(e, TpRunFailed) and "did not drain" in str(e) for e in errors.values())
    assert counts == [tprun.plan_limit(o, tprun.workload(o))] * 2


def test_a_serial_run_drains_within_its_bound() -> None:
    """One request at a time in a small GPU pool takes many more plans than steps (89
    here, against a bound of 4 x steps + 64 = 84 before the bound followed the
    workload): it drains, every request retired."""
    o = TpOptions(executor="reference", requests=6, steps=5, concurrency=1, gpu_blocks=10,
                  arrival_rate=0.15)
    reports, errors, counts = _threads(o)
    assert not errors, errors
    assert reports[0]["coordinator"]["retired"] == o.requests
    assert counts[0] == counts[1] == reports[0]["steps"] + 1 > o.steps * 4 + 64
    assert counts[0] <= tprun.plan_limit(o, tprun.workload(o))


def test_a_short_run_drains_within_its_bound() -> None:
    """The bound leaves a short run room: ``steps=5`` drains (the plans run past
    ``steps`` while requests finish)."""
    o = replace(FAULTY, steps=5)
    reports, errors, counts = _threads(o)
    assert not errors, errors
    assert reports[0]["coordinator"]["retired"] == o.requests
    assert counts[0] == counts[1] == reports[0]["steps"] + 1

