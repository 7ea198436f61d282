"""``hisparse bench`` targets run and report (figures are not asserted); their arguments."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from hisparse.bench.cli import _ack_shapes
from hisparse.bench.protocol import ACTIONS
from hisparse.cli import main


def test_bench_protocol_writes_every_action(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench.json"
    assert main(["bench", "protocol", "--lifecycles", "20", "--requests", "4",
                 "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    # every figure printed, each lifecycle the sum of its own mode's actions
    # (bench/cli.py:52:call:2 dropped a line; bench/protocol.py:86:var:11 reported the
    # unchecked actions as the checked ones)
    text = capsys.readouterr().out.splitlines()
    for mode in ("check_off", "check_on"):
        per = figures[f"per_action_us_{mode}"]
        assert figures[f"lifecycle_us_{mode}"] == sum(per.values())
        at = text.index(f"per action, invariants {mode.replace('_', ' ')} (µs):")
        assert text[at + 1: at + 2 + len(per)] == [
            f"  {name:<15} {us:9.2f}" for name, us in per.items()
        ] + [f"  {'lifecycle':<15} {figures[f'lifecycle_us_{mode}']:9.2f}"]
    assert text[-2:] == [f"transitions trigger   {figures['transitions_trigger_us']:.2f} µs",
                         f"compiled table lookup {figures['compiled_table_us']:.3f} µs"]
    # the shape is reported as given (bench/protocol.py:83:var:8 named the background)
    assert (figures["lifecycles"], figures["background_requests"]) == (20, 4)
    for mode in ("check_off", "check_on"):
        assert set(figures[f"per_action_us_{mode}"]) == set(ACTIONS)
        assert all(v > 0 for v in figures[f"per_action_us_{mode}"].values())


def test_bench_coordinator_runs(tmp_path: Path) -> None:
    out = tmp_path / "coord.json"
    assert main(["bench", "coordinator", "--requests", "8", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["check_off"]["spill_lifecycle_us"] > 0 and doc["check_on"]["idle_step_us"] > 0


def test_bench_churn_ack_shapes_are_parsed_and_bad_ones_refused() -> None:
    assert _ack_shapes("split") == ("split",)
    assert _ack_shapes("pipelined, split") == ("pipelined", "split")
    for bad in ("batched", "split,split", "pipelined,"):
        with pytest.raises(argparse.ArgumentTypeError):
            _ack_shapes(bad)
    with pytest.raises(SystemExit) as exc:
        main(["bench", "churn", "--requests", "10", "--acks", "both"])
    assert exc.value.code == 2


@pytest.mark.parametrize("argv, what", [
    (["engine-kernels", "--batches", "1,8,5000"], "at most 4096"),
    (["engine-kernels", "--scan-batches", "9999"], "at most 4096"),
    (["engine-kernels", "--positions", str((1 << 21) + 1)], "at most 2097152"),
    (["equal-hbm", "--contexts", "131072,4194304"], "at most 2097152"),
])
def test_bench_sizes_beyond_their_bound_are_refused_at_parse_time(
        argv: list[str], what: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A size no GPU holds is refused before anything is imported or allocated: exit 2,
    one line naming the bound (not an out-of-memory error minutes later)."""
    with pytest.raises(SystemExit) as exc:
        main(["bench", *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert what in err[-1]


def test_the_engine_bench_plots_beside_its_json_and_only_then(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # the engine itself needs torch and a GPU: a stand-in module takes its place, so the
    # CLI's own rule is what runs (bench/cli.py:165:cmp:0 plotted only without a JSON)
    import sys
    import types

    import hisparse.bench
    from hisparse.bench.cli import _engine

    calls: list[tuple[str, object]] = []
    fake = types.ModuleType("hisparse.bench.engine")

    def run(budget_gib: float) -> dict[str, int]:
        calls.append(("run", budget_gib))
        return {"figures": 1}

    def plot(doc: dict[str, int], path: str) -> None:
        calls.append(("plot", (doc, path)))

    fake.run, fake.plot = run, plot  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "hisparse.bench.engine", fake)
    monkeypatch.setattr(hisparse.bench, "engine", fake, raising=False)
    out = tmp_path / "engine.json"
    assert _engine(argparse.Namespace(budget_gib=5.0, json=out)) == {"figures": 1}
    assert calls == [("run", 5.0), ("plot", ({"figures": 1}, str(tmp_path / "engine.png")))]
    calls.clear()
    assert _engine(argparse.Namespace(budget_gib=7.0, json=None)) == {"figures": 1}
    assert calls == [("run", 7.0)]


@pytest.mark.parametrize("equal", [True, False])
def test_the_staging_bench_prints_each_path_and_fails_when_bytes_differ(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], equal: bool) -> None:
    # the bench itself needs CuPy and a GPU: a stand-in module returns its document, so
    # the CLI's own report and verdict run (bench/cli.py:421:not:0 failed equal bytes)
    import sys
    import types

    import hisparse.bench
    from hisparse.bench.cli import BenchFailed, _pd_staging

    fake = types.ModuleType("hisparse.bench.pdstaging")
    paths = ("batched", "per_block", "import_path")
    shape = {"pages": 2, "layers": 1, "block_bytes": 2048, "bytes": 4096, "staging_slots": 1,
             "bulk_d2h_GBps": 50.0, **{p: {"GBps": 25.0, "vs_bulk": 0.5,
                                            "enqueue_host_us_per_page": 1.5,
                                            "bytes_equal": equal} for p in paths}}
    doc = {"environment": "H200 stand-in", "shapes": [shape], "bytes_equal": equal}
    fake.PATHS = paths  # type: ignore[attr-defined]
    fake.run = lambda **kw: doc  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "hisparse.bench.pdstaging", fake)
    monkeypatch.setattr(hisparse.bench, "pdstaging", fake, raising=False)
    args = argparse.Namespace(pages=2, layers=1, block_tokens=64, row_bytes=[16],
                              staging_slots=1, reps=1)
    if equal:
        assert _pd_staging(args) is doc
    else:
        with pytest.raises(BenchFailed, match="staged host blocks differ from the source pages"):
            _pd_staging(args)
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == ["H200 stand-in", "2 pages x 1 caches, blocks of 2.0 KiB, 0.0 MB, "
                       "1 slots: bulk D2H 50.0 GB/s"]
    assert [line.split()[0] for line in out[2:]] == list(paths)
    assert all(line.endswith(f"bytes equal {equal}") for line in out[2:])
    with pytest.raises(BenchFailed, match=r"multiples of 16, got \[8\]"):
        _pd_staging(argparse.Namespace(**{**vars(args), "row_bytes": [16, 8]}))


def test_the_nixl_bench_times_within_its_own_run_and_lands_equal_bytes() -> None:
    # every figure is a median of intervals inside the call, so each is at most the
    # call's own wall time (bench/nixl.py:122:arith:8 added its start instead); the
    # staged path's peak stays within its slots. No timing is compared with any bound
    # but the call's own.
    import time

    from hisparse.bench.nixl import run

    t0 = time.perf_counter()
    doc = run(total_mib=1, page_kib=64, chunk_pages=2, reps=2, staging_slots=4)
    wall = time.perf_counter() - t0
    assert doc["pages"] == 16 and doc["bytes"] == 1 << 20
    assert (doc["chunk_pages"], doc["reps"], doc["page_bytes"]) == (2, 2, 64 << 10)
    for key in ("nixl_read_s", "memcpy_s", "staged_import_s"):
        assert 0 < doc[key] <= wall, (key, doc[key], wall)
    assert doc["staged_import_GBps"] == doc["bytes"] / doc["staged_import_s"] / 1e9
    assert 1 <= doc["staging_peak"] <= doc["staging_slots"] == 4


def test_the_resolver_bench_prints_every_shape_in_full(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # the bench needs CuPy and a GPU: a stand-in returns its document, and the CLI's own
    # report runs (bench/cli.py:125:arith:0 broke the phases line)
    import sys
    import types

    import hisparse.bench
    from hisparse.bench.cli import _resolver

    base = {"batch": 8, "miss_rate": 0.05, "placement": "random", "fused_us": 12.5,
            "fused_GBps": 40.0, "gather_us": 25.0, "fraction_of_gather": 0.5,
            "gather_sorted_GBps": 30.0, "phases_us": {"claim": 1.0, "copy": 2.5},
            "floors_us": {"launch_us": 3.0, "claim_us": 4.0}}
    full = {**base, "batch": 64, "fused_unsorted_us": 20.0, "fused_unsorted_GBps": 35.0,
            "torch_us": 50.0, "speedup_vs_torch": 4.0, "torch_agrees": True}
    doc: dict[str, object] = {"environment": "H200 stand-in", "bulk_h2d": {"GBps": 55.5},
                              "shapes": [base, full]}
    calls: list[dict[str, object]] = []
    fake = types.ModuleType("hisparse.bench.resolver")

    def run(**kw: object) -> dict[str, object]:
        calls.append(kw)
        return doc

    fake.run = run  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "hisparse.bench.resolver", fake)
    monkeypatch.setattr(hisparse.bench, "resolver", fake, raising=False)
    args = argparse.Namespace(batches=["8", "64"], miss_rates=[0.05], reps=3, no_torch=False,
                              no_flush=True, placements=["random"], context=1024)
    assert _resolver(args) is doc
    assert calls == [{"batches": (8, 64), "miss_rates": (0.05,), "reps": 3, "with_torch": True,
                      "flush_l2": False, "placements": ("random",), "context": 1024}]
    phases = "       phases (block 0, µs): claim 1.0, copy 2.5"
    floors = "       floors (µs): empty launch 3.0, claim and release only 4.0"
    assert capsys.readouterr().out.splitlines() == [
        "H200 stand-in", "bulk H2D 55.5 GB/s",
        "B=8    miss=0.05   random      fused     12.5 µs   40.0 GB/s | gather     25.0 µs"
        " (50% of it), in address order  30.0 GB/s", phases, floors,
        "B=64   miss=0.05   random      fused     12.5 µs   40.0 GB/s | gather     25.0 µs"
        " (50% of it), in address order  30.0 GB/s | unsorted  35.0 GB/s torch      50.0 µs"
        " (  4.0x, agrees=True)", phases, floors,
    ]


def test_the_nixl_bench_fails_when_the_landed_bytes_differ(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the staging pool shows zeros where NIXL landed the pages: the bench must refuse
    # its figures (bench/nixl.py:63:raise:3: no test made the bytes differ)
    import numpy as np

    from hisparse.bench.cli import BenchFailed
    from hisparse.bench.nixl import run
    from hisparse.transport.staging import StagingPool

    monkeypatch.setattr(StagingPool, "view",
                        lambda self, slot: np.zeros(self.page_bytes, np.uint8))
    with pytest.raises(BenchFailed, match=r"^NIXL landed bytes that differ from the prefiller's$"):
        run(total_mib=1, page_kib=64, chunk_pages=2, reps=1)


def test_a_bounded_count_takes_its_bound_and_refuses_one_more() -> None:
    # (bench/cli.py:242:cmp:10 refused the bound itself)
    from hisparse.bench.cli import _int_upto

    assert _int_upto(4096)("4096") == 4096
    with pytest.raises(argparse.ArgumentTypeError, match=r"^must be at most 4096, got 4097$"):
        _int_upto(4096)("4097")


@pytest.mark.parametrize(("flag", "chunk"), [([], "default"), (["--prefill-chunk", "4096"], 4096)])
def test_the_equal_hbm_bench_takes_the_prefill_chunk_given_or_its_default(
        monkeypatch: pytest.MonkeyPatch, flag: list[str], chunk: object) -> None:
    # the bench needs torch and a GPU: a stand-in module records what the CLI hands it
    # (bench/cli.py:274:bool:5 handed the default when a chunk was given, None otherwise)
    import sys
    import types

    import hisparse.bench

    got: list[dict[str, object]] = []
    fake = types.ModuleType("hisparse.bench.equalhbm")

    def run(**kw: object) -> dict[str, object]:
        got.append(kw)
        return {}

    fake.PREFILL_CHUNK, fake.run = 16384, run  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "hisparse.bench.equalhbm", fake)
    monkeypatch.setattr(hisparse.bench, "equalhbm", fake, raising=False)
    assert main(["bench", "equal-hbm", *flag]) == 0
    assert got[0]["prefill_chunk"] == (16384 if chunk == "default" else chunk)
    assert got[0]["same_batch"] is True  # (bench/cli.py:275:not:5 turned it off)
    got.clear()
    assert main(["bench", "equal-hbm", "--no-same-batch", *flag]) == 0
    assert got[0]["same_batch"] is False


def test_the_churn_bench_fails_when_state_is_left_after_its_drain(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # (bench/cli.py:333:raise:5: every churn run drains clean, so a stand-in run leaves
    # something behind)
    import hisparse.bench.churn as churn

    left = ["pipelined: 1 open spill"]
    calls: list[tuple[Any, ...]] = []

    def run(*a: Any, **k: Any) -> dict[str, Any]:
        calls.append((a, k))
        return {"requests": 1, "left_after_drain": left}

    monkeypatch.setattr(churn, "run", run)
    assert main(["bench", "churn", "--requests", "1", "--host-blocks", "64"]) != 0
    assert "state left after the drain: ['pipelined: 1 open spill']" in capsys.readouterr().err
    # the flags reach the run (bench/cli.py:304:call:35 dropped --host-blocks)
    assert calls == [((1,), {"host_blocks": 64, "acks": ("pipelined", "split")})]


def test_the_nixl_bench_refuses_a_negative_staging_pool(
        capsys: pytest.CaptureFixture[str]) -> None:
    # (bench/cli.py:376:raise:7: no test gave one; refused before NIXL starts)
    assert main(["bench", "nixl", "--staging-slots", "-1"]) != 0
    assert "--staging-slots must be 0 or more" in capsys.readouterr().err


def test_the_tp_bench_takes_its_ranks_and_fails_on_a_mismatch(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # the bench needs CuPy and GPUs: a stand-in module records what the CLI hands it
    # (bench/cli.py:341:call:37 dropped --ranks)
    import sys
    import types

    import hisparse.bench
    from hisparse.bench.cli import BenchFailed, _tp

    got: list[dict[str, Any]] = []
    runs: dict[str, Any] = {"private": {"mismatches": 0}}
    fake = types.ModuleType("hisparse.bench.tp")

    def run(**kw: Any) -> dict[str, Any]:
        got.append(kw)
        return {"environment": "stand-in", "runs": runs}

    fake.run, fake.lines = run, lambda doc: ["a line"]  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "hisparse.bench.tp", fake)
    monkeypatch.setattr(hisparse.bench, "tp", fake, raising=False)
    assert main(["bench", "tp", "--ranks", "3", "--transport", "pipe"]) == 0
    assert got == [{"ranks": 3, "transport": "pipe"}]
    assert capsys.readouterr().out.splitlines()[:2] == ["stand-in", "a line"]
    runs["shared"] = {"mismatches": 2}
    with pytest.raises(BenchFailed, match=r"resolved rows differ from the oracle: \{'shared': 2\}"):
        _tp(argparse.Namespace(ranks=2, transport="torch"))


def test_bench_protocol_times_the_shape_asked_in_both_modes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # no figure says how many lifecycles ran beside how many resident requests: the runs
    # themselves are asked (bench/protocol.py:86:var:6 and 87:var:9 swapped the two)
    from hisparse.bench import protocol

    calls: list[tuple[int, bool, int]] = []

    def lifecycles(n: int, check: bool, requests: int) -> dict[str, float]:
        calls.append((n, check, requests))
        return dict.fromkeys(ACTIONS, 1.0)

    monkeypatch.setattr(protocol, "_lifecycles", lifecycles)
    monkeypatch.setattr(protocol, "_trigger_costs", lambda n: {})
    protocol.run(lifecycles=5, background=2)
    assert calls == [(5, False, 2), (5, True, 2)]


def test_bench_coordinator_prints_both_modes(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    # (bench/cli.py:73:call:55 printed nothing for a mode)
    out = tmp_path / "coord.json"
    assert main(["bench", "coordinator", "--requests", "8", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    text = capsys.readouterr().out
    for mode in ("check_off", "check_on"):
        f = doc[mode]
        assert (f"invariants {mode.replace('_', ' ')}: spill lifecycle "
                f"{f['spill_lifecycle_us']:.1f} µs, idle decode step {f['idle_step_us']:.2f} µs"
                f" ({doc['running_requests']} running requests)") in text


def test_the_eviction_cost_times_one_evicting_spill_per_sample() -> None:
    # the pool fills with its first host_blocks spills, then each of the samples evicts
    # (bench/churn.py:170:var:4 ran host_blocks samples whatever was asked)
    from hisparse.bench.churn import eviction_cost

    for samples in (10, 30):
        doc = eviction_cost(128, samples=samples)
        assert (doc["host_blocks"], doc["evicting_spills"]) == (128, samples)
        assert doc["evicting_spill_cpu_us"] > 0


def test_the_churn_figures_are_the_requests_over_the_clocks_read(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # stand-in clocks (each CPU-clock read half a second on, the wall clock 2 s over the
    # run) make every figure exact: ten deciles of a run whose tenths do not divide it
    # (bench/churn.py:192:int:3 took an eleventh), and the wall rate is the requests over
    # the wall time (bench/churn.py:209:var:14 divided the host pool's size)
    import types

    import hisparse.bench.churn as churn

    cpu = iter(0.5 * k for k in range(100))
    wall = iter((10.0, 12.0))
    monkeypatch.setattr(churn, "time", types.SimpleNamespace(
        process_time=lambda: next(cpu), perf_counter=lambda: next(wall)))
    requests, tenth = 25, 2  # deciles after requests 2, 4, ..., 20; 21 to 25 uncounted
    doc = churn.churn(requests, host_blocks=128, acks="pipelined")
    assert doc["per_request_cpu_us_by_decile"] == [0.5 / tenth * 1e6] * 10
    assert doc["last_over_first_decile"] == 1.0
    assert doc["rss_warm_after_requests"] == tenth
    # the start, ten deciles, the end: eleven half-second steps of CPU time
    assert doc["cpu_seconds"] == 5.5
    assert doc["requests_per_cpu_s"] == round(requests / 5.5, 1)
    assert doc["wall_seconds"] == 2.0
    assert doc["requests_per_wall_s"] == round(requests / doc["wall_seconds"], 1) == 12.5
    assert doc["left_after_drain"] == []


def test_the_churn_drivers_finished_head_is_cut_past_4096() -> None:
    # the driver keeps at most 4096 finished requests ahead of its live ones, and cuts
    # them on the lifecycle that finishes the 4097th (bench/churn.py:138:int:1 kept one
    # more)
    from hisparse.bench.churn import Churn

    ch = Churn(host_blocks=64, live=4)
    lengths = []
    for i in range(4096 + ch.live + 1):
        ch.lifecycle(i)
        assert ch.head <= 4096 and len(ch.running) - ch.head == min(i + 1, ch.live)
        lengths.append(len(ch.running))
    assert max(lengths) == lengths[-2] == 4096 + ch.live
    assert (ch.head, lengths[-1]) == (0, ch.live)  # the 4097th finished: all cut
