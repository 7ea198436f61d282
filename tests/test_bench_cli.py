"""``hisparse bench`` targets run and report (figures are not asserted); their arguments."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from hisparse.bench.cli import _ack_shapes
from hisparse.bench.protocol import ACTIONS
from hisparse.cli import main


def test_bench_protocol_writes_every_action(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    assert main(["bench", "protocol", "--lifecycles", "20", "--requests", "4",
                 "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
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
    for key in ("nixl_read_s", "memcpy_s", "staged_import_s"):
        assert 0 < doc[key] <= wall, (key, doc[key], wall)
    assert doc["staged_import_GBps"] == doc["bytes"] / doc["staged_import_s"] / 1e9
    assert 1 <= doc["staging_peak"] <= doc["staging_slots"] == 4
