"""Rules of the command line, the benchmark drivers and the engine's CPU-side parts that
lines no test ran showed, found by the whole mutation run (docs/mutation-run7).

The GPU benchmarks and TLC's model runs are replaced by stand-ins that return fixed
documents, so what runs is the CLI's own printing, writing and refusing.
"""

from __future__ import annotations

import io
import json
import re
import signal
import sys
import threading
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import hisparse.bench
import hisparse.cli as cli
from hisparse.bench.churn import Churn, drained_problems
from hisparse.config import GIB, HiSparseConfig
from hisparse.coordinator import HiSparseCoordinator
from hisparse.engine import schedule
from hisparse.engine.config import ROW_BYTES, EngineConfigError, EngineShape, ModelShape
from hisparse.engine.schedule import HiSparseScheduler
from hisparse.engine.workload import (
    make_request,
    mooncake_requests,
    synthetic_requests,
)
from hisparse.executor.reference import ReferenceExecutor
from hisparse.tlc import TlcInstall
from hisparse.tlc.acquire import ARTIFACT, JAR_SHA256, TLC_VERSION
from hisparse.tlc.check import CheckReport

TICK = re.compile(r"^  [a-z -]+: still running \(\d+ s\)$")


def _not_ticks(err: str) -> list[str]:
    """stderr's lines without the ``still running`` ticks (a slow machine may add some)."""
    return [line for line in err.splitlines() if not TICK.match(line)]


def _stand_in(monkeypatch: pytest.MonkeyPatch, name: str, **attrs: Any) -> None:
    """``hisparse.bench.NAME`` is a module with ``attrs`` for this test (the real one
    needs CuPy, torch or a GPU)."""
    fake = types.ModuleType(f"hisparse.bench.{name}")
    vars(fake).update(attrs)
    monkeypatch.setitem(sys.modules, f"hisparse.bench.{name}", fake)
    monkeypatch.setattr(hisparse.bench, name, fake, raising=False)


# --- hisparse setup, progress, ticks, SIGTERM (hisparse/cli.py) ---------------------------


def test_setup_names_the_artifact_jar_version_and_verified_digest(
        tlc: TlcInstall, capsys: pytest.CaptureFixture[str]) -> None:
    # the jar is already in the cache (the tlc fixture): setup only verifies it
    # kills cli.py:141:call:4, 145:call:5, 146:call:6, 147:call:7, 148:call:8
    assert cli.main(["setup"]) == 0
    out, err = capsys.readouterr()
    assert out == (f"artifact  {ARTIFACT}\n"
                   f"jar       {tlc.jar}\n"
                   f"version   {TLC_VERSION}\n"
                   f"sha256    {JAR_SHA256} (verified)\n")
    assert _not_ticks(err) == [f"setup: fetching or verifying {ARTIFACT} ..."]


def test_check_says_each_tlc_run_it_starts_on_stderr_indented(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # TLC is a stand-in that reports one run's start through the CLI's progress callback
    # kills cli.py:130:call:2
    report = CheckReport(model="small", result="ok", reason="", distinct_states=1,
                         states_generated=1, depth=1, seconds=0.0, invariants=[],
                         properties=[], tlc_version="2.18", violated=[], runs=[])

    def check_model(model: str, *, progress: Callable[[str], None], **kw: Any) -> CheckReport:
        progress("TLC MC_small/MC_small.cfg ...")
        return report

    monkeypatch.setattr(cli, "check_model", check_model)
    assert cli.main(["check", "--model", "small"]) == 0
    assert _not_ticks(capsys.readouterr().err) == ["check: model small",
                                                   "  TLC MC_small/MC_small.cfg ..."]


class _Stderr(io.StringIO):
    """stderr that tells a waiting test when something was written."""

    def __init__(self) -> None:
        super().__init__()
        self.written = threading.Event()

    def write(self, s: str) -> int:
        n = super().write(s)
        self.written.set()
        return n


def test_a_long_step_says_it_is_still_running_on_stderr(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # every=0: the ticker speaks at once; the body waits until it has (no clock involved)
    # kills cli.py:117:call:109
    err = _Stderr()
    monkeypatch.setattr(sys, "stderr", err)
    with cli.ticking("setup", every=0.0):
        spoke = err.written.wait(timeout=30)
    assert spoke
    lines = err.getvalue().splitlines()
    assert lines and all(TICK.match(line) and line.startswith("  setup: ") for line in lines)


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_terminating_signal_exits_128_plus_its_number(signum: int, code: int) -> None:
    # the SIGTERM handler main installs, called as the signal would call it
    # kills cli.py:653:raise:0
    with pytest.raises(SystemExit) as exc:
        cli._terminate(signum, None)
    assert exc.value.code == code


# --- hisparse bench (hisparse/bench/cli.py) -----------------------------------------------


def test_bench_resolver_takes_known_placements_and_refuses_others_in_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    # kills bench/cli.py:87:cmp:3, 88:raise:10
    args = cli.build_parser().parse_args(
        ["bench", "resolver", "--placements", "request, interleaved"])
    assert args.placements == ("request", "interleaved")
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", "resolver", "--placements", "random,diagonal"])
    assert exc.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == ("hisparse bench resolver: error: argument --placements: placement must be "
                   "one of ('random', 'request', 'interleaved'), got 'diagonal'\n")


def test_bench_spill_prints_its_environment_then_one_line_per_shape(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # kills bench/cli.py:143:call:15, 145:call:59
    shape = {"blocks": 16, "bytes": 2_500_000, "spill_GBps": 20.25, "bulk_d2h_GBps": 50.0,
             "fraction_of_bulk": 0.405, "memcpy_per_block_us": 7.4, "enqueue_host_us": 12.6,
             "enqueue_host_us_per_block": 0.7875}
    doc = {"environment": "H200 stand-in", "shapes": [shape, {**shape, "blocks": 1024}]}
    asked: list[int] = []

    def run(reps: int) -> dict[str, Any]:
        asked.append(reps)
        return doc

    _stand_in(monkeypatch, "spill", run=run)
    assert cli.main(["bench", "spill", "--reps", "3"]) == 0
    assert asked == [3]
    line = ("blocks     2.5 MB: spill  20.2 GB/s, bulk D2H  50.0 GB/s (40%); per-block "
            "memcpy 7 µs; host enqueue 13 µs (0.79 µs/block)")
    assert capsys.readouterr().out.splitlines() == ["H200 stand-in", f"   16 {line}",
                                                    f" 1024 {line}"]


def _equal_hbm(monkeypatch: pytest.MonkeyPatch, argv: list[str]
               ) -> tuple[list[str | None], list[tuple[dict[str, Any], str]]]:
    """Run ``bench equal-hbm`` over a stand-in whose run saves twice through the CLI's
    ``on_config``; returns what the JSON held after each save and the plots drawn."""
    seen: list[str | None] = []
    plots: list[tuple[dict[str, Any], str]] = []
    json_path = Path(argv[argv.index("--json") + 1]) if "--json" in argv else None

    def run(*, on_config: Callable[[dict[str, Any]], None], **kw: Any) -> dict[str, Any]:
        for n in (1, 2):
            on_config({"configs": n})
            seen.append(json_path.read_text() if json_path is not None else None)
        return {"configs": 2, "done": True}

    def plot(doc: dict[str, Any], path: str) -> None:
        plots.append((doc, path))

    _stand_in(monkeypatch, "equalhbm", PREFILL_CHUNK=16384, run=run, plot=plot)
    assert cli.main(["bench", "equal-hbm", *argv]) == 0
    return seen, plots


def test_equal_hbm_saves_its_json_and_plot_after_every_config(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # a cut-off run keeps what it finished: the JSON is rewritten after each config and
    # the plot drawn beside it; the CLI writes the final document at the end
    # kills bench/cli.py:265:cmp:11, 266:call:66, 267:call:67
    out = tmp_path / "eq.json"
    seen, plots = _equal_hbm(monkeypatch, ["--json", str(out)])
    assert [json.loads(s) for s in seen if s is not None] == [{"configs": 1}, {"configs": 2}]
    png = str(tmp_path / "eq.png")
    assert plots == [({"configs": 1}, png), ({"configs": 2}, png)]
    assert json.loads(out.read_text()) == {"configs": 2, "done": True}


def test_equal_hbm_without_json_writes_and_plots_nothing(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # kills bench/cli.py:265:cmp:11
    monkeypatch.chdir(tmp_path)
    seen, plots = _equal_hbm(monkeypatch, [])
    assert (seen, plots) == ([None, None], [])
    assert list(tmp_path.iterdir()) == []


def _nixl_doc(**extra: Any) -> dict[str, Any]:
    return {"environment": "UCX stand-in", "bytes": 1 << 20, "pages": 16, "nixl_GBps": 3.25,
            "memcpy_GBps": 6.5, "nixl_vs_memcpy": 0.5, **extra}


@pytest.mark.parametrize("slots", [0, 4])
def test_bench_nixl_reports_the_staged_import_only_when_measured(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], slots: int) -> None:
    # kills bench/cli.py:382:call:63
    staged = {"staging_slots": slots, "staged_import_GBps": 1.625,
              "staged_vs_memcpy": 0.25} if slots else {}
    calls: list[tuple[int, ...]] = []

    def run(*a: int) -> dict[str, Any]:
        calls.append(a)
        return _nixl_doc(**staged)

    _stand_in(monkeypatch, "nixl", run=run)
    assert cli.main(["bench", "nixl", "--mib", "1", "--staging-slots", str(slots)]) == 0
    assert calls == [(1, 64, 64, 5, slots)]
    expected = ["UCX stand-in", "1048576 bytes in 16 pages: NIXL READ 3.25 GB/s, memcpy "
                "6.50 GB/s (50% of memcpy)"]
    if slots:
        expected.append("staged import through 4 slots: 1.62 GB/s (25% of memcpy)")
    assert capsys.readouterr().out.splitlines() == expected


# --- churn driver (hisparse/bench/churn.py) -----------------------------------------------


def test_churn_stops_when_the_gpu_pool_cannot_admit_a_request() -> None:
    # the GPU pool is taken from outside: the driver says so instead of going on
    # kills bench/churn.py:106:raise:2
    ch = Churn(64, live=2)
    assert ch.kv.allocate(ch.kv.num_free) is not None
    with pytest.raises(RuntimeError, match=r"^r0 not admitted: the GPU pool should fit 2 "
                       r"requests$"):
        ch.lifecycle(0)
    assert ch.coordinator.state.host_used == 0 and ch.running == []


def test_churn_stops_when_no_host_block_is_free_or_evictable() -> None:
    # one host block, still held by running r0: r1's spill finds none
    # kills bench/churn.py:122:raise:3
    ch = Churn(1, acks="split")
    ch.lifecycle(0)
    with pytest.raises(RuntimeError, match=r"^spill found no host block: nothing evictable$"):
        ch.lifecycle(1)
    assert ch.coordinator.state.host_used == 1 and ch.running == ["r0"]


def test_what_is_left_names_tables_then_host_then_gpu_blocks() -> None:
    # kills bench/churn.py:159:call:7, 161:call:8
    ch = Churn(64)
    ch.lifecycle(0)  # live: r0 runs, one page spilling, three resident
    tables = [f"{name} holds {n}" for name, n in ch.coordinator.table_sizes().items() if n]
    assert tables
    assert drained_problems(ch) == [*tables, "1 host blocks in use", "3 GPU blocks in use"]
    ch.drain()
    assert drained_problems(ch) == []
    leaked = ch.kv.allocate(2)  # a GPU block no table knows of is still reported
    assert leaked is not None
    assert drained_problems(ch) == ["2 GPU blocks in use"]


# --- engine shapes (hisparse/engine/config.py) ---------------------------------------------


@pytest.mark.parametrize("name", ["hidden", "heads", "nope_dim", "v_dim", "mlp_dim", "vocab",
                                  "index_heads"])
def test_a_model_with_an_empty_dimension_is_refused_by_name(name: str) -> None:
    # kills engine/config.py:62:raise:9
    empty: dict[str, Any] = {name: 0}
    with pytest.raises(EngineConfigError, match=rf"^{name} must be at least 1$"):
        ModelShape(**empty)


def test_a_batch_without_slots_is_refused() -> None:
    # kills engine/config.py:111:raise:3
    with pytest.raises(EngineConfigError, match=r"^slots must be at least 1, got 0$"):
        EngineShape(slots=0, max_context=1024, top_k=64)


def test_a_batch_with_empty_blocks_is_refused() -> None:
    # kills engine/config.py:117:raise:5
    with pytest.raises(EngineConfigError, match=r"^block_tokens must be >= 1, got 0$"):
        EngineShape(slots=1, max_context=1024, top_k=64, block_tokens=0)


def test_each_request_verifies_its_drafts_plus_one_token_per_step() -> None:
    # kills engine/config.py:131:arith:8, 131:var:28, 135:var:29
    shape = EngineShape(slots=5, max_context=1024, top_k=64, num_speculative_tokens=2)
    assert (shape.per_slot, shape.entries) == (3, 15)
    plain = EngineShape(slots=5, max_context=1024, top_k=64)
    assert (plain.per_slot, plain.entries) == (1, 5)


# --- engine workload (hisparse/engine/workload.py) -----------------------------------------


def test_prefill_writes_all_but_the_last_prompt_token() -> None:
    # kills engine/workload.py:54:arith:4
    shape = EngineShape(slots=1, max_context=1024, top_k=64)
    assert make_request("r", [], 100, 10, shape=shape, vocab=50).prefill_len == 99


def test_a_block_size_that_does_not_divide_a_trace_block_is_refused() -> None:
    # kills engine/workload.py:88:raise:2
    shape = EngineShape(slots=1, max_context=960, top_k=64, block_tokens=48)
    with pytest.raises(EngineConfigError, match=r"^block_tokens 48 must divide 512$"):
        make_request("r", [], 100, 10, shape=shape, vocab=100)


def test_synthetic_requests_are_count_unshared_prompts_of_one_length() -> None:
    # kills engine/workload.py:150:var:30, 150:var:31, 150:var:32, 151:var:33
    shape = EngineShape(slots=4, max_context=1024, top_k=64)
    reqs = synthetic_requests(shape, vocab=500, count=3, context=100, max_new=7)
    assert [r.request_id for r in reqs] == ["s0", "s1", "s2"]
    assert [(len(r.prompt), r.max_new, r.arrival) for r in reqs] == [(100, 7, 0)] * 3
    for r in reqs:
        alone = make_request(r.request_id, [], 100, 7, shape=shape, vocab=500)
        assert np.array_equal(r.prompt, alone.prompt) and r.page_keys == alone.page_keys
    assert max(int(r.prompt.max()) for r in reqs) >= 3  # tokens span the vocabulary


def test_a_trace_row_that_is_not_an_object_is_refused_by_line(tmp_path: Path) -> None:
    # kills engine/workload.py:161:raise:4
    trace = tmp_path / "trace.jsonl"
    trace.write_text(json.dumps({"input_length": 9000, "output_length": 10, "hash_ids": [1]})
                     + "\n[9000, 10]\n")
    shape = EngineShape(slots=1, max_context=16384, top_k=64)
    with pytest.raises(EngineConfigError, match=rf"^{re.escape(str(trace))}:2: a row must be "
                       r"a JSON object$"):
        mooncake_requests(shape, vocab=100, count=2, path=trace)


# --- engine scheduler (hisparse/engine/schedule.py) ----------------------------------------


def _scheduler(gpu_blocks: int, host_blocks: int, executor: ReferenceExecutor | None = None
               ) -> tuple[HiSparseScheduler, EngineShape]:
    shape = EngineShape(slots=4, max_context=2048, top_k=16, block_tokens=64)
    bb = shape.block_tokens * ROW_BYTES * 2
    config = HiSparseConfig(host_pool_gib=(host_blocks * bb + bb // 2) / GIB, block_tokens=64,
                            row_bytes=ROW_BYTES, top_k=16, layers=2, index_leaders=(0, 0))
    return HiSparseScheduler(config, executor or ReferenceExecutor(), gpu_blocks=gpu_blocks,
                             slots=shape.slots, max_pages=shape.max_pages), shape


def test_reclaim_stops_at_the_first_spill_the_host_pool_refuses(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # two host blocks, eight complete pages: two spills start, the third is refused and
    # no further page is tried (a full pool refuses them all)
    # kills engine/schedule.py:117:loop:2
    asked: list[tuple[str, int]] = []

    class Counting(HiSparseCoordinator):  # (a subclass: the compiled build's instances
        def spill(self, page: tuple[str, int]) -> int | None:  # take no patches)
            asked.append(page)
            return super().spill(page)

    monkeypatch.setattr(schedule, "HiSparseCoordinator", Counting)
    sched, shape = _scheduler(gpu_blocks=32, host_blocks=2)
    assert isinstance(sched.coordinator, Counting)
    a = make_request("a", [], 600, 10, shape=shape, vocab=100)
    sched.add(a)
    assert sched.admit(a) is not None
    spilled: list[tuple[str, int]] = []
    sched.on_spill = lambda r, i: spilled.append((r, i))
    assert sched.reclaim(8, {"a": 599}) == 2
    assert spilled == [("a", 1), ("a", 2)]
    assert asked == [("a", 1), ("a", 2), ("a", 3)]


@pytest.mark.parametrize("aborted", [True, False])
def test_an_engine_request_aborted_mid_spill_publishes_nothing(aborted: bool) -> None:
    # ended while its eight spills are in flight: finished, they become prefix hits for
    # the next request; aborted, they are dropped
    # kills engine/schedule.py:126:call:7
    sched, shape = _scheduler(gpu_blocks=32, host_blocks=64)
    a = make_request("a", [1], 600, 10, shape=shape, vocab=100)
    b = make_request("b", [1], 600, 10, shape=shape, vocab=100)
    sched.add(a)
    assert sched.admit(a) is not None
    assert sched.reclaim(8, {"a": 599}) == 8
    sched.end("a", aborted=aborted)
    assert sched.coordinator.state.req == {"a": "aborted" if aborted else "finished"}
    sched.drain()
    sched.add(b)
    assert sched.coordinator.lookup_prefix("b") == (0 if aborted else 8)
    assert sched.coordinator.state.host_used == (0 if aborted else 8)
    assert sched.kv.num_free == 32


class _OrderedExecutor(ReferenceExecutor):
    """A reference executor standing in for the CUDA one: counts the stream orderings."""

    def __init__(self) -> None:
        super().__init__()
        self.ordered = 0

    def order_after_spills(self) -> None:
        self.ordered += 1


def test_on_cuda_the_compute_stream_waits_for_each_step_that_sends_spills(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # kills engine/schedule.py:145:call:9
    monkeypatch.setattr(schedule, "CudaExecutor", _OrderedExecutor)
    executor = _OrderedExecutor()
    sched, shape = _scheduler(gpu_blocks=32, host_blocks=64, executor=executor)
    a = make_request("a", [], 600, 10, shape=shape, vocab=100)
    sched.add(a)
    assert sched.admit(a) is not None
    assert sched.reclaim(3, {"a": 599}) == 3
    assert sched.send_commands() == 3
    assert executor.ordered == 1
    sched.deliver_acks()
    assert sched.send_commands() == 0  # replacements only: nothing to wait for
    assert executor.ordered == 1
