"""Rule: the tensor-parallel run on reference executors, without TLC, does what its
reports say: every rank's resolved rows are the bytes written for their positions (the
step digest that crosses to rank 0 is recomputed here from the plans alone), every row
counted is checked, copies land before the drain, the run drains with every spill
acknowledged; and the scheduler adds each arrival at its step with one stable key ID per
page key (``hisparse/tp/run.py``).

The two ranks run in two threads of this process over ``PipeGroup`` pipes, each rank's
group recording the bytes it sends and receives, so the test can read every plan and
every rank's step payload.

From the guard survivors of the third guard-phase run (docs/mutation-survivors.md): the
file's one harness test is ``tlc``-marked, so 38 of 40 sampled mutants survived
``tests/test_tp.py`` and ``tests/test_coordinator_tp.py`` without TLC. This file kills
``46:drop:0``, ``46:drop:1`` (a choice dropped from the unknown executor's message),
``82:var:14``, ``82:var:16`` (``device``), ``95:var:26`` (``host_pool_bytes``),
``131:cmp:30`` (an arrival added a step late), ``136:var:33`` (page key IDs from the
wrong dict: every page got key 0), ``138:var:30``, ``166:cmp:34``, ``227:var:38``,
``243:var:39``, ``256:call:30``, ``270:call:8``, ``300:cmp:38``, ``314:arith:11``,
``315:call:33`` (the digest covered no bytes), ``320:bool:5`` (reference copies landed
only at the drain), ``322:call:34``, ``480:int:4``, ``508:call:41``.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import replace
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import hisparse.tp.run as tp_run
from hisparse.coordinator import HiSparseCoordinator
from hisparse.executor.reference import ReferenceExecutor
from hisparse.rows import rows_of
from hisparse.spec.messages import WORKER_META
from hisparse.tp.group import PipeGroup
from hisparse.tp.run import (
    RankReport,
    RankSide,
    Scheduler,
    TpOptions,
    build_executor,
    plan_limit,
    run_rank,
    workload,
)
from tests.protocol_helpers import ZeroDraws

OPTIONS = TpOptions(executor="reference", ranks=2, requests=8, steps=30, seed=3)


def side_at_first_decode(
    executor: Any = None,
) -> tuple[Scheduler, RankSide, dict[str, Any]]:
    """A scheduler and a private rank (``executor``, the reference one by default) fed
    its plans up to the first that decodes, which is returned with them."""
    o = OPTIONS
    config = o.config()
    sched = Scheduler(o, config)
    side = RankSide(o, config, executor if executor is not None else ReferenceExecutor(),
                    RankReport(0, "private", "private"))
    for t in range(o.steps):
        plan = sched.plan(t)
        side.front(plan)
        side.apply(plan["meta"])
        if plan["topk"]:
            return sched, side, plan
    raise AssertionError("no plan decodes")


class RecordingGroup(PipeGroup):
    """A ``PipeGroup`` that keeps what each collective returned on this rank."""

    def __init__(self, rank: int, world: int, pipes: list[Connection]) -> None:
        super().__init__(rank, world, pipes)
        self.broadcasts: list[bytes] = []
        self.gathers: list[list[bytes]] = []
        self.sent: list[bytes] = []

    def broadcast(self, data: bytes | None) -> bytes:
        out = super().broadcast(data)
        self.broadcasts.append(out)
        return out

    def gather(self, data: bytes) -> list[bytes]:
        self.sent.append(data)
        out = super().gather(data)
        self.gathers.append(out)
        return out


def _run(o: TpOptions) -> tuple[list[dict[str, Any]], list[RecordingGroup]]:
    """``run_rank`` on every rank, one thread each; the reports in rank order."""
    pipes: list[list[Connection]] = [[] for _ in range(o.ranks)]
    for r in range(1, o.ranks):
        a, b = Pipe()
        pipes[0].append(a)
        pipes[r].append(b)
    groups = [RecordingGroup(r, o.ranks, pipes[r]) for r in range(o.ranks)]
    reports: dict[int, dict[str, Any]] = {}
    errors: list[BaseException] = []

    def rank(r: int) -> None:
        try:
            reports[r] = run_rank(o, groups[r])
        except BaseException as e:  # reported by the main thread
            errors.append(e)
            for c in pipes[r]:  # the other ranks then stop with EOFError, not wait
                c.close()

    threads = [threading.Thread(target=rank, args=(r,), daemon=True) for r in range(o.ranks)]
    for t in threads:
        t.start()
    for t in threads:  # the limit only catches a rank stuck forever; the run takes seconds
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a rank is stuck"
    assert not errors, errors
    return [reports[r] for r in range(o.ranks)], groups


@pytest.fixture(scope="module")
def run() -> tuple[list[dict[str, Any]], list[RecordingGroup]]:
    return _run(OPTIONS)


def _plans(group: RecordingGroup) -> list[dict[str, Any]]:
    """The step plans rank ``group`` received (the broadcasts that are plans)."""
    plans = [json.loads(raw) for raw in group.broadcasts if raw]  # (b"": the barrier's)
    return [p for p in plans if isinstance(p, dict) and "topk" in p]


def _payloads(group: RecordingGroup) -> list[dict[str, Any]]:
    """The step payloads (acks, reads, digest) rank ``group`` sent to rank 0."""
    return [json.loads(raw) for raw in group.sent if raw]  # (b"": the barrier's)


def test_the_reports_agree_and_every_spill_is_acknowledged(
    run: tuple[list[dict[str, Any]], list[RecordingGroup]]
) -> None:
    reports, groups = run
    assert [r["rank"] for r in reports] == [0, 1]
    coord = reports[0]["coordinator"]
    assert coord["open_spills"] == 0 and coord["spills"] > 0
    assert coord["requests"] == OPTIONS.requests
    for r in reports:
        assert r["mismatches"] == 0
        assert r["spills_taken"] == coord["spills"]
        assert r["steps"] == coord["steps_checked"] == len(_payloads(groups[0]))
    assert reports[1]["coordinator"] == {}
    assert _plans(groups[0])[-1]["done"] and not any(p["done"] for p in _plans(groups[0])[:-1])


def test_every_row_counted_is_checked_and_the_digest_is_the_written_bytes(
    run: tuple[list[dict[str, Any]], list[RecordingGroup]]
) -> None:
    """The digest each rank sends is recomputed from the plans: per layer, the bytes
    written for each valid position's page key, layer and offset (``rows_of``)."""
    reports, groups = run
    b, width = OPTIONS.block_tokens, OPTIONS.row_bytes
    for g, report in zip(groups, reports, strict=True):
        keys: dict[str, list[int]] = {}
        counted = 0
        plans = _plans(g)
        payloads = _payloads(g)
        assert len(payloads) == len(plans) - 1  # the last plan says done: no payload
        for plan, payload in zip(plans, payloads, strict=False):
            for r, _, page_keys in plan["admitted"]:
                keys[r] = page_keys
            digest = hashlib.sha256()
            for layer in range(OPTIONS.layers):
                for r, positions in plan["topk"].items():
                    pos = np.array(positions, np.int64)
                    pos = pos[pos >= 0]
                    page_key = np.array(keys[r], np.int64)[pos // b]
                    digest.update(rows_of(page_key, layer, pos % b, width).tobytes())
                    counted += len(pos) if layer == 0 else 0
            assert payload["digest"] == (digest.hexdigest() if plan["topk"] else "")
        assert report["rows_checked"] == counted * OPTIONS.layers > 0


def test_reference_copies_land_before_the_drain(
    run: tuple[list[dict[str, Any]], list[RecordingGroup]]
) -> None:
    """A reference rank lands some of its queued copies at random every step, so acks of
    completed copies reach the coordinator before the drain, on every rank."""
    _, groups = run
    for g in groups:
        plans = _plans(g)
        early = [
            WORKER_META.validate_json(p["acks"]).completed
            for plan, p in zip(plans, _payloads(g), strict=False)
            if not plan["drain"] and p["acks"]
        ]
        assert any(early)


def test_the_scheduler_adds_each_arrival_at_its_step_with_stable_key_ids() -> None:
    o = OPTIONS
    sched = Scheduler(o, o.config())
    ids: dict[str, int] = {}
    for t in range(o.steps + 2):
        sched.plan(t)
        due = [a for a in sched.arrivals if a.step <= t or t >= o.steps]
        assert sorted(sched.pages) == sorted(a.request_id for a in due)
        for a in due:
            for k in a.page_keys:
                ids.setdefault(k, len(ids))
        for a in due:
            assert sched.pages[a.request_id] == [ids[k] for k in a.page_keys]
    assert len(set(ids.values())) == len(ids) > 1


def test_options_place_ranks_and_size_the_host_view() -> None:
    assert [TpOptions(ranks=3).device(r) for r in range(3)] == [0, 1, 2]
    assert [TpOptions(ranks=3, gpus=2).device(r) for r in range(3)] == [0, 1, 0]
    o = TpOptions(ranks=2, layers=3, host_blocks=5, block_tokens=4, row_bytes=16)
    assert o.host_pool_bytes == 3 * 5 * 4 * 16


def test_an_unknown_executor_is_refused_naming_both_choices() -> None:
    with pytest.raises(ValueError, match=r"choose one of cuda, reference$"):
        build_executor(TpOptions(executor="numpy"), PipeGroup(0, 1, []))


def test_a_long_serial_workload_of_one_page_requests_drains() -> None:
    """One request at a time, every arrival in at once: the run takes a plan per decode
    step of every request, and the plan limit leaves room for it (tp/run.py:111:arith:17
    gave each arrival 8 plans fewer: with one-page requests the limit fell below the
    decode steps alone, and the run stopped as stuck)."""
    o = TpOptions(executor="reference", ranks=1, requests=30, steps=1, concurrency=1,
                  min_pages=1, max_pages=1, arrival_rate=5.0, abort_rate=0.0)
    arrivals = workload(o)
    report = run_rank(o, PipeGroup(0, 1, []))  # TpRunFailed("did not drain") otherwise
    assert report["steps"] == sum(a.decode_steps for a in arrivals) < plan_limit(o, arrivals)
    assert report["mismatches"] == 0 and report["coordinator"]["open_spills"] == 0
    assert report["coordinator"]["retired"] == o.requests


# --- the run's figures and the scheduler's draws, exactly (mutation survivors) ----------


def test_every_arrival_is_in_by_the_last_workload_step() -> None:
    """Arrivals due after ``o.steps`` all come in at step ``o.steps`` itself, not later
    (tp/run.py:146:cmp:31 took them a step late)."""
    o = replace(OPTIONS, steps=4)
    sched = Scheduler(o, o.config())
    assert any(a.step > o.steps for a in sched.arrivals)  # (not vacuous)
    for t in range(o.steps):
        sched.plan(t)
        assert sorted(sched.pages) == sorted(a.request_id for a in sched.arrivals
                                             if a.step <= t)
    sched.plan(o.steps)
    assert sorted(sched.pages) == sorted(a.request_id for a in sched.arrivals)


def test_an_abort_rate_of_zero_never_aborts_even_on_a_draw_of_zero(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A running request is aborted with chance ``abort_rate``: a draw below it. At rate
    0 no draw is, not even 0.0; requests end only by finishing (tp/run.py:157:cmp:33
    aborted on a draw equal to the rate). (The calls are seen through a coordinator
    subclass: the compiled build's coordinator is a native class, not patchable.)"""
    ended: list[str] = []

    class Recording(HiSparseCoordinator):
        def finish(self, request_id: str) -> None:
            ended.append("finish")
            super().finish(request_id)

        def abort(self, request_id: str) -> None:
            ended.append("abort")
            super().abort(request_id)

    monkeypatch.setattr(tp_run, "HiSparseCoordinator", Recording)
    o = replace(OPTIONS, abort_rate=0.0)
    sched = Scheduler(o, o.config())
    assert isinstance(sched.coordinator, Recording)
    sched.rng = ZeroDraws(0)
    for t in range(o.steps):
        sched.plan(t)
    assert ended and set(ended) == {"finish"}


def test_wall_ms_is_the_clock_time_of_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """``memory["wall_ms"]`` is the time the clock advanced from the loop's start to its
    end, in whole milliseconds (tp/run.py:529:arith:22 added the two readings). The
    clock is a stand-in read exactly twice."""
    readings = iter([100.0, 100.25])
    monkeypatch.setattr(tp_run, "time", SimpleNamespace(perf_counter=lambda: next(readings)))
    o = TpOptions(executor="reference", ranks=1, requests=3, steps=6, seed=1)
    report = run_rank(o, PipeGroup(0, 1, []))
    assert report["memory"]["wall_ms"] == 250
    assert next(readings, None) is None  # both readings taken, no other


def test_a_rank_whose_oracle_reads_other_bytes_counts_mismatches() -> None:
    """Each resolved row is compared with the bytes written for its position and with
    the rank's own oracle: a worker that reads the right bytes still counts mismatches
    when its oracle's rows differ (tp/run.py:321:var:45 read the worker's rows in the
    oracle's place: the oracle was never compared)."""
    _, side, plan = side_at_first_decode()
    clean = side.decode(plan["topk"], plan["step"])
    assert side.report.mismatches == 0 and side.report.rows_checked > 0
    for oh in side.oracle.handles:  # the oracle's device rows, every byte flipped
        pools = oh.runtime.pools
        pools.device[...] = pools.device ^ 0xFF
    again = side.decode(plan["topk"], plan["step"] + 1)
    assert again == clean  # the worker read the same, right bytes
    assert side.report.mismatches > 0
