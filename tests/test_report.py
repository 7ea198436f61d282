"""The simulate report: requests are accounted once each, rates follow from the counts,
every figure has its unit, a run without offload says so, the same seed gives the same
document, and the plot is a real PNG (from a run and from a saved run)."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from hisparse.cli import main
from hisparse.report import lines, rates
from hisparse.simulate import SimulateOptions, report_json, simulate

PNG = b"\x89PNG\r\n\x1a\n"
FAST = SimulateOptions(requests=24, steps=300, seed=1)


def test_requests_are_accounted_once_each() -> None:
    rep = simulate(replace(FAST, steps=60))  # cut off: some still running or waiting
    assert rep.still_running + rep.never_admitted + rep.not_arrived > 0
    assert rep.finished + rep.aborted + rep.never_admitted + rep.still_running == rep.requests
    assert rep.requests + rep.not_arrived == 24
    no_aborts = simulate(replace(FAST, abort_rate=0.0))
    assert no_aborts.aborted == 0 and no_aborts.finished == 24


def test_rates_follow_from_counts_and_series() -> None:
    rep = simulate(FAST)
    r = rates(rep)
    lookups = rep.resident_hits + rep.hot_hits + rep.misses
    assert lookups > 0 and rep.decoded_tokens == sum(rep.series["decoded_tokens"]) > 0
    assert r["host_hit_rate"] == rep.misses / lookups
    assert abs(r["resident_hit_rate"] + r["hot_hit_rate"] + r["host_hit_rate"] - 1) < 1e-12
    assert r["h2d_bytes_per_token"] == rep.h2d_bytes / rep.decoded_tokens
    assert r["prefix_hit_rate"] == rep.prefix_hits / rep.pages_admitted
    assert sum(rep.series["spills"]) == rep.spills
    assert sum(rep.series["misses"]) == rep.misses
    assert sum(rep.series["h2d_bytes"]) == rep.h2d_bytes
    assert sum(rep.series["d2h_bytes"]) == rep.d2h_bytes
    assert r["gpu_occupancy_peak"] == max(rep.series["gpu_blocks_used"]) / rep.gpu_blocks
    assert all(len(v) == rep.steps for v in rep.series.values())


def test_text_has_units_and_sizes_first() -> None:
    text = lines(report_json(simulate(FAST)))
    assert text[0].startswith("workload") and text[1].startswith("sizes")
    body = "\n".join(text)
    for unit in ("B/token", "pages/step", "tokens/step", "% of admitted pages", "GPU pool mean",
                 "resident ", "hot ", "host ", "still running", "never admitted",
                 "refused for want of GPU blocks"):
        assert unit in body, unit
    assert "trace " not in body  # no trace line without --trace


def test_a_run_without_offload_says_so() -> None:
    rep = simulate(replace(FAST, gpu_blocks=400))
    assert rep.spills == 0
    assert any(n.startswith("offload never exercised") for n in rep.notes)
    assert not any("offload never" in n for n in simulate(FAST).notes)


def test_long_run_still_exercises_offload() -> None:
    """--steps no longer spreads arrivals: 64 requests over 1600 steps still spill."""
    rep = simulate(SimulateOptions(requests=64, steps=1600))
    assert rep.spills > 0 and rep.misses > 0 and rep.steps < 1600  # ends when all is done


def test_same_seed_same_document() -> None:
    a, b = report_json(simulate(FAST)), report_json(simulate(FAST))
    assert a == b
    assert report_json(simulate(replace(FAST, seed=2))) != a


def test_simulate_json_plot_and_report_command(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    out, png, again = tmp_path / "run.json", tmp_path / "run.png", tmp_path / "again.png"
    assert main(["simulate", "--requests", "24", "--seed", "1", "--no-progress",
                 "--json", str(out), "--plot", str(png)]) == 0
    printed = capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert doc == json.loads(json.dumps(report_json(simulate(FAST))))
    assert png.read_bytes()[:8] == PNG and png.stat().st_size > 10_000
    assert main(["report", str(out), "--plot", str(again)]) == 0
    assert capsys.readouterr().out.splitlines()[:-1] == printed.splitlines()[:-1]
    assert again.read_bytes()[:8] == PNG


def test_report_refuses_a_file_that_is_not_a_run(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"steps": 1}))
    assert main(["report", str(bad)]) == 2
    assert "not a hisparse simulate --json file" in capsys.readouterr().err


def test_report_json_keeps_counts_and_adds_rates() -> None:
    rep = simulate(FAST)
    doc = report_json(rep)
    counts = asdict(rep)
    assert counts.pop("imports") == {} and "imports" not in doc  # only with --pd-share
    assert {k: doc[k] for k in counts} == counts
    assert doc["rates"] == rates(rep) and doc["trace_steps"] is None


def test_a_plot_without_matplotlib_is_refused_before_the_run(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # (report.py:158:raise:2: matplotlib is installed wherever the suite runs)
    import sys

    from hisparse.report import ReportError, check_plot_available

    check_plot_available()
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib: ImportError
    with pytest.raises(ReportError, match=r"^--plot needs matplotlib: pip install 'hisparse\[plot\]'$"):
        check_plot_available()


@pytest.mark.parametrize(("backing", "pool"), [
    ("private", "private per rank"),
    ("shared", "one shared allocation (rank 0 copies, the others read after its events)")])
def test_a_tensor_parallel_run_says_how_its_ranks_share_the_work(backing: str,
                                                                 pool: str) -> None:
    # (report.py:78:arith:17: no report of a TP run was rendered)
    from hisparse.report import header_lines

    sizes = {**report_json(simulate(FAST))["sizes"], "tp_ranks": 2, "backing": backing}
    assert header_lines(sizes)[2] == (
        "ranks        2 tensor-parallel ranks, the same commands to each, every rank's acks "
        f"merged and rows checked; host pool {pool}; hits and host->device bytes are rank 0's")


def test_simulate_plot_without_matplotlib_exits_2_before_the_run(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    # the CLI asks first: one line, exit 2, and no simulation built (cli.py:519:call:116)
    import sys

    from hisparse import simulate
    from hisparse.cli import main

    built: list[object] = []
    monkeypatch.setattr(simulate, "make_simulation", lambda *a, **k: built.append(a))
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["simulate", "--requests", "2", "--plot", str(tmp_path / "p.png")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--plot needs matplotlib" in err
    assert built == []


def test_report_without_plot_needs_no_matplotlib(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # only --plot asks for matplotlib (cli.py:588:cmp:23 asked when no plot was wanted)
    import sys

    from hisparse.cli import main

    out = tmp_path / "run.json"
    assert main(["simulate", "--requests", "2", "--steps", "5", "--no-progress",
                 "--json", str(out)]) == 0
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["report", str(out)]) == 0
    assert main(["report", str(out), "--plot", str(tmp_path / "p.png")]) == 2
