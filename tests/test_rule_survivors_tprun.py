"""Rules of the tensor-parallel harness (``hisparse/tp/run.py``) that survivors of the
whole mutation run showed no test stated (docs/mutation-run7)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pydantic
import pytest

import hisparse.executor.cuda.backend as cuda_backend
import hisparse.spec.trace as spec_trace
import hisparse.tp.run as tp_run
from hisparse.coordinator import HiSparseCoordinator
from hisparse.executor.reference import ReferenceExecutor
from hisparse.tp.group import PipeGroup
from hisparse.tp.run import RankSide, Scheduler, TpOptions, plan_limit, run_rank
from hisparse.workload import Arrival
from tests.protocol_helpers import ZeroDraws
from tests.test_rule_tp_run import OPTIONS, side_at_first_decode

SMALL = TpOptions(executor="reference", ranks=1, requests=8, steps=30, seed=3)


def test_the_plan_limit_gives_each_arrival_its_decode_steps_pages_and_four() -> None:
    # kills tp/run.py:111:arith:23 (the pages subtracted)
    o = TpOptions(steps=10)
    arrivals = [Arrival(0, "a", ("k0", "k1", "k2", "k3", "k4"), 2),
                Arrival(1, "b", ("k5",), 7)]
    assert plan_limit(o, arrivals) == 10 + (2 + 5 + 4) + (7 + 1 + 4) + 64


def test_a_report_counts_every_resolved_position_once_by_its_kind_and_names_start_memory(
) -> None:
    """Each decoded position is a resident hit, a hot hit or a miss: the three figures
    add up to the positions checked per layer, each counted up (kills
    tp/run.py:318:arith:9, 319:arith:10, 320:arith:11). The memory figures also carry
    the start readings, ``start_``-named, all but the pinned bytes (kills
    tp/run.py:528:call:4, 528:cmp:41)."""
    report = run_rank(SMALL, PipeGroup(0, 1, []))
    hits = (report["resident_hits"], report["hot_hits"], report["misses"])
    assert min(hits) > 0
    assert sum(hits) * SMALL.layers == report["rows_checked"] > 0
    memory = report["memory"]
    started = {k for k in memory if k.startswith("start_")}
    assert "start_vmrss_bytes" in started and "start_pinned_bytes" not in started
    assert started == {f"start_{k}" for k in memory
                       if not k.startswith("start_") and k not in ("pinned_bytes", "wall_ms")}


class ClosingOnly(ReferenceExecutor):
    """An executor with a close and no host arena (a private CUDA executor's shape)."""

    def __init__(self, log: list[str]) -> None:
        super().__init__()
        self.log = log

    def close(self) -> None:
        self.log.append("close")


class Arena:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def close(self) -> None:
        self.log.append("unmap")


class ArenaOnly(ReferenceExecutor):
    """An executor with a host arena and no close of its own."""

    def __init__(self, log: list[str]) -> None:
        super().__init__()
        self.host_arena = Arena(log)


@pytest.mark.parametrize(("kind", "closed"), [(ClosingOnly, ["close"]), (ArenaOnly, ["unmap"])])
def test_a_rank_closes_its_executor_and_its_arena_each_when_it_has_one(
        monkeypatch: pytest.MonkeyPatch, kind: type[ReferenceExecutor],
        closed: list[str]) -> None:
    # kills tp/run.py:546:var:3 (close only with an arena), 549:var:5 (unmap only with a close)
    log: list[str] = []

    def build(o: TpOptions, group: PipeGroup) -> tuple[ReferenceExecutor, str]:
        return kind(log), "private"  # type: ignore[call-arg]

    monkeypatch.setattr(tp_run, "build_executor", build)
    o = TpOptions(executor="reference", ranks=1, requests=3, steps=6, seed=1)
    report = run_rank(o, PipeGroup(0, 1, []))
    assert log == closed and report["steps"] > 0


def _recording(ended: list[str]) -> type[HiSparseCoordinator]:
    class Recording(HiSparseCoordinator):
        def finish(self, request_id: str) -> None:
            ended.append("finish")
            super().finish(request_id)

        def abort(self, request_id: str) -> None:
            ended.append("abort")
            super().abort(request_id)

        def reclaim(self, n: int) -> Any:
            ended.append(f"reclaim {n}")
            return super().reclaim(n)

    return Recording


def test_a_request_with_decode_steps_left_is_aborted_not_finished(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A request ends by finishing only with no decode step left; one drawn for an abort
    with a step still left is aborted (kills tp/run.py:158:int:11, which finished it)."""
    ended: list[str] = []
    monkeypatch.setattr(tp_run, "HiSparseCoordinator", _recording(ended))
    o = replace(OPTIONS, abort_rate=0.5, spill_rate=0.0)
    sched = Scheduler(o, o.config())
    t = 0
    while not sched.running:
        sched.plan(t)
        t += 1
    r = next(iter(sched.running))
    sched.left[r] = 1
    sched.rng = ZeroDraws(0)  # every draw 0.0 < abort_rate: every running request ends
    ended.clear()
    plan = sched.plan(t)
    assert r in plan["released"]
    assert [e for e in ended if not e.startswith("reclaim")] == ["abort"] * len(plan["released"])


@pytest.mark.parametrize("rate", [0.0, 1.0])
def test_a_step_spills_one_page_with_chance_spill_rate(monkeypatch: pytest.MonkeyPatch,
                                                      rate: float) -> None:
    """With requests running, a step reclaims one page on a draw below ``spill_rate``:
    at rate 0 never, not even on a draw of 0.0 (kills tp/run.py:172:cmp:24); at rate 1
    every step (kills tp/run.py:173:call:26, which never reclaimed)."""
    ended: list[str] = []
    monkeypatch.setattr(tp_run, "HiSparseCoordinator", _recording(ended))
    o = replace(OPTIONS, abort_rate=0.0, spill_rate=rate, gpu_blocks=400)
    sched = Scheduler(o, o.config())
    sched.rng = ZeroDraws(0)
    steps_running = 0
    for t in range(o.steps):
        sched.plan(t)
        steps_running += bool(sched.running)
    assert steps_running > 0
    reclaims = [e for e in ended if e.startswith("reclaim")]
    assert reclaims == ["reclaim 1"] * (steps_running if rate else 0)


def test_consume_checks_the_invariants_of_the_coordinators_state_and_a_failed_check_counts_no_step(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # kills tp/run.py:195:call:6 (no check) and 196:reorder:6 (a failed step counted)
    checked: list[object] = []

    def check(state: object) -> None:
        checked.append(state)

    monkeypatch.setattr(tp_run, "check_invariants", check)
    sched = Scheduler(OPTIONS, OPTIONS.config())
    sched.consume([b""])
    assert checked == [sched.coordinator.state] and sched.steps_checked == 1

    def broken(state: object) -> None:
        raise AssertionError("invariant broken")

    monkeypatch.setattr(tp_run, "check_invariants", broken)
    with pytest.raises(AssertionError, match=r"^invariant broken$"):
        sched.consume([b""])
    assert sched.steps_checked == 1


def test_a_released_request_leaves_the_ranks_page_keys() -> None:
    # kills tp/run.py:254:call:29 (the keys of a released request kept)
    _, side, plan = side_at_first_decode()
    r = next(iter(plan["topk"]))
    assert r in side.pages
    side.front({"released": [r], "admitted": []})
    assert r not in side.pages


def test_an_empty_metadata_string_is_refused_not_taken_as_no_commands() -> None:
    """Only ``None`` means no commands; any string is validated as connector metadata,
    so an empty one is refused (kills tp/run.py:276:none:2, which skipped it)."""
    _, side, _ = side_at_first_decode()
    before = (side.report.spills_taken, side.report.spill_us[:], side.worker._enqueued[:])
    with pytest.raises(pydantic.ValidationError, match="EOF while parsing"):
        side.apply("")
    assert (side.report.spills_taken, side.report.spill_us, side.worker._enqueued) == before


class Reads(ReferenceExecutor):
    """A reference executor that records which pools it reads."""

    def __init__(self) -> None:
        super().__init__()
        self.read: list[int] = []

    def read_device_rows(self, pools: Any, rows: Any) -> Any:
        self.read.append(id(pools))
        return super().read_device_rows(pools, rows)


def test_a_rank_reads_its_own_pools_with_its_executor_and_the_oracles_with_the_oracles(
) -> None:
    # kills tp/run.py:325:var:49 (the oracle's pools read with the worker's executor)
    mine = Reads()
    _, side, plan = side_at_first_decode(mine)
    mine.read.clear()
    side.decode(plan["topk"], plan["step"])
    own = {id(h.runtime.pools) for h in side.worker.handles}
    assert mine.read and set(mine.read) <= own
    assert len(mine.read) == len(side.worker.handles)


def test_the_resolve_time_is_taken_before_the_oracle_decodes() -> None:
    # kills tp/run.py:298:reorder:10 (the oracle's decode inside the timed region)
    log: list[str] = []

    def timer(stream: object) -> Callable[[], float]:
        def stop() -> float:
            log.append("stop")
            return 5.0
        return stop

    def decode(name: str) -> Callable[[Any, int], str]:
        def run(leaders: Any, step: int) -> str:
            log.append(name)
            return name
        return run

    side = SimpleNamespace(
        worker=SimpleNamespace(config=SimpleNamespace(leaders=[0]), decode=decode("worker")),
        oracle=SimpleNamespace(decode=decode("oracle")),
        executor=SimpleNamespace(stream="compute"), _timer=timer,
        report=SimpleNamespace(resolve_us=[], decodes=0),
        _compare=lambda got, want, tk: f"{got}/{want}")
    assert RankSide.decode(side, {"r0": [1]}, 1) == "worker/oracle"  # type: ignore[arg-type]
    assert log == ["worker", "stop", "oracle"] and side.report.resolve_us == [5.0]


class NoCupy(Exception):
    pass


def _no_cupy() -> Any:
    raise NoCupy("cupy asked for")


@pytest.mark.parametrize(("cuda", "stream", "timed"), [
    (False, "s", False), (False, None, False), (True, None, False), (True, "s", True),
])
def test_only_a_cuda_rank_with_a_stream_times_its_work(
        monkeypatch: pytest.MonkeyPatch, cuda: bool, stream: str | None, timed: bool) -> None:
    """``_timer`` is ``None`` without a stream or off CUDA; a CUDA rank with a stream
    goes to the device (here: a ``load_cupy`` that refuses). Kills tp/run.py:356:bool:6,
    356:not:6 (a CPU rank timed) and 356:cmp:28 (a CUDA rank with a stream untimed)."""
    monkeypatch.setattr(cuda_backend, "load_cupy", _no_cupy)
    side = SimpleNamespace(cuda=cuda, _spin=None)
    if timed:
        with pytest.raises(NoCupy, match=r"^cupy asked for$"):
            RankSide._timer(side, stream)  # type: ignore[arg-type]
    else:
        assert RankSide._timer(side, stream) is None  # type: ignore[arg-type]


class BarrierLog(PipeGroup):
    def __init__(self, log: list[str]) -> None:
        super().__init__(0, 1, [])
        self.log = log

    def barrier(self) -> None:
        self.log.append("barrier")
        super().barrier()


def test_rank_0_writes_its_trace_before_the_closing_barrier(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Rank 0 records the trace and its figures, then meets the other ranks at the
    closing barrier, then closes (kills tp/run.py:544:reorder:4, the barrier first)."""
    log: list[str] = []
    write = spec_trace.write_trace

    def logged(path: Any, trace: Any) -> None:
        log.append("trace")
        write(path, trace)

    monkeypatch.setattr(spec_trace, "write_trace", logged)
    o = TpOptions(executor="reference", ranks=1, requests=3, steps=6, seed=1,
                  trace=str(tmp_path / "trace.json"))
    report = run_rank(o, BarrierLog(log))
    assert log == ["trace", "barrier"]
    assert report["coordinator"]["trace_steps"] > 0 and (tmp_path / "trace.json").exists()
