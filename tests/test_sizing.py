"""Sizing: model geometry, GPU blocks from a GiB budget, ``hisparse plan``'s answers and
refusals, the HiSparse-disabled replay (no offload command, no empty table), and the
sizing replay agreeing exactly between the accounting and the reference executor."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from hisparse import cli
from hisparse.config import GIB, HiSparseConfig
from hisparse.models import MLA_FP8_ROW_BYTES, MODELS, ModelGeometry, model
from hisparse.simulate import build_workload
from hisparse.sizing import baseline
from hisparse.sizing.plan import PlanRefused, plan
from hisparse.sizing.replay import SizingOptions, run_sizing, simulate_options, sizing_config
from hisparse.spec import messages

TRACE = Path(__file__).parent / "data" / "mooncake_small.jsonl"
TINY = ModelGeometry(name="tiny", layers=2, row_bytes=32, top_k=32, block_tokens=16,
                     index_leaders=(0, 0), indexer_key_bytes=4, source="test")
# 4 running requests' hot rows (64 rows of 64 bytes) and 300 blocks of 1 KiB; 600 host blocks
TINY_GPU_GIB = (4 * 64 * 64 + 300 * 1024) / GIB
TINY_HOST_GIB = 600 * 1024 / GIB


def tiny(**kw: Any) -> SizingOptions:
    return SizingOptions(geometry=TINY, gpu_kv_gib=TINY_GPU_GIB, host_gib=TINY_HOST_GIB,
                         workload_path=TRACE, requests=12, max_running=4, topk_drift=0.2,
                         **kw)


def test_published_geometry() -> None:
    ds = MODELS["deepseek-v3.2"]
    assert MLA_FP8_ROW_BYTES == 656
    assert (ds.layers, ds.indexers, ds.top_k, ds.block_tokens) == (61, 61, 2048, 64)
    assert ds.kv_bytes_per_token == 656 * 61 and ds.indexer_bytes_per_token == 132 * 61
    glm = MODELS["glm-5.2"]
    owners = [i for i, lead in enumerate(glm.index_leaders) if i == lead]
    assert owners == [0, 1, 2, *range(6, 75, 4)] and glm.indexers == 21
    assert glm.index_leaders[5] == 2 and glm.index_leaders[77] == 74
    assert model("glm-5.2") is glm
    with pytest.raises(ValueError, match=r"^unknown model 'nope'; choose one of "
                                         r"deepseek-v3\.2, glm-5\.2"):
        model("nope")  # (models.py:100:raise:0: no test asked for an unknown one)
    for g in MODELS.values():  # the config accepts every model's leaders and rows
        HiSparseConfig(host_pool_blocks=1, row_bytes=g.row_bytes, layers=g.layers,
                       index_leaders=g.index_leaders, block_tokens=g.block_tokens)


def test_gpu_blocks_come_from_the_budget_after_hot_rows() -> None:
    c = HiSparseConfig(host_pool_gib=1, gpu_kv_gib=1, hot_slots=3, block_tokens=16,
                       row_bytes=32, layers=2, top_k=8)
    assert c.hot_bytes == 16 * 32 * 2  # 2 x top-K rows, every layer
    assert c.gpu_blocks == (GIB - 3 * c.hot_bytes) // (16 * 32 * 2)
    assert c.gpu_blocks_disabled == GIB // (16 * 32 * 2)
    with pytest.raises(ValueError, match="holds no whole GPU block"):
        HiSparseConfig(host_pool_gib=1, gpu_kv_gib=c.hot_bytes * 3 / GIB, hot_slots=3,
                       block_tokens=16, row_bytes=32, layers=2, top_k=8)


def test_plan_answers_from_geometry_alone() -> None:
    g = MODELS["deepseek-v3.2"]
    p = plan(g, gpu_kv_gib=100, host_gib=400, contexts=(32768, 131072),
             machine_ram=1024 * GIB)
    assert (p.model, p.gpu_kv_gib, p.host_gib) == ("deepseek-v3.2", 100, 400)
    block = 64 * 656 * 61
    long = p.rows[1]
    assert long.pages == 2048 and p.min_host_blocks == 2048
    assert long.disabled_bytes == 2048 * block + 131072 * 132 * 61
    assert long.disabled_max == 100 * GIB // long.disabled_bytes
    hot = 4096 * 656 * 61
    lru = 16 * 4096 * 61
    assert long.hisparse_bytes == hot + lru + 2 * block + 131072 * 132 * 61
    assert long.hisparse_max == (100 * GIB - 2048 * block) // long.hisparse_bytes
    assert long.host_needed == long.hisparse_max * 2048 * block
    assert long.host_holds == p.host_blocks // 2048
    # what runs: the fewer of what HBM and the host pool hold, for each context
    # (plan.py:139:var:35 bounded it by the longest context instead)
    for row in p.rows:
        assert row.running == min(row.hisparse_max, row.host_holds)
    assert long.hisparse_max > 4 * long.disabled_max  # the point of HiSparse at 128k
    short_ratio, long_ratio = p.rows[0].ratio, long.ratio
    assert short_ratio is not None and long_ratio is not None
    assert short_ratio < long_ratio  # and it grows with context


def test_plan_refuses_what_an_engine_refuses_at_startup() -> None:
    g = MODELS["glm-5.2"]
    with pytest.raises(PlanRefused, match="above 95% of this machine's"):
        plan(g, gpu_kv_gib=100, host_gib=97, contexts=(8192,), machine_ram=100 * GIB)
    plan(g, gpu_kv_gib=100, host_gib=95, contexts=(8192,), machine_ram=100 * GIB)
    one = 2048 * 64 * 656 * 78  # the longest request's pages, 131072 tokens
    with pytest.raises(PlanRefused, match="cannot hold one longest request"):
        plan(g, gpu_kv_gib=100, host_gib=(one - 1) / GIB, contexts=(131072,),
             machine_ram=1024 * GIB)
    plan(g, gpu_kv_gib=100, host_gib=one / GIB, contexts=(131072,), machine_ram=1024 * GIB)
    # no context, or one under a token: refused by name (sizing/plan.py:99:bool:0 let
    # a 0 through and met no context with min()'s own error)
    for contexts in ((), (0,), (8192, 0)):
        with pytest.raises(PlanRefused, match=r"^give at least one context length of 1 token"):
            plan(g, gpu_kv_gib=100, host_gib=95, contexts=contexts, machine_ram=100 * GIB)


@pytest.mark.parametrize("argv, message", [
    (["--host-gib", "900", "--machine-ram-gib", "512"], "above 95% of this machine's"),
    (["--host-gib", "1", "--machine-ram-gib", "512"], "cannot hold one longest request"),
])
def test_plan_cli_refuses_in_one_line(argv: list[str], message: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli.main(["plan", "--model", "deepseek-v3.2", "--gpu-kv-gib", "100", *argv])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and err.count("\n") == 1


def test_plan_cli_answers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "plan.json"
    rc = cli.main(["plan", "--model", "deepseek-v3.2", "--gpu-kv-gib", "100", "--host-gib",
                   "400", "--machine-ram-gib", "512", "--context", "8192,131072",
                   "--json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert [r["context"] for r in doc["rows"]] == [8192, 131072]
    assert f"{doc['rows'][1]['hisparse_max']:>6,}" in text


class _Built:
    """Counts every HiSparse message the scheduler side builds (``trusted_*``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.by_class: dict[str, int] = {}
        real = messages._build

        def counting(cls: type[Any], values: dict[str, Any]) -> Any:
            self.by_class[cls.__name__] = self.by_class.get(cls.__name__, 0) + 1
            return real(cls, values)

        monkeypatch.setattr(messages, "_build", counting)


def test_disabled_hisparse_builds_no_offload_command_and_no_empty_table(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    o = tiny()
    config = sizing_config(o)
    arrivals = build_workload(simulate_options(o, config))
    built = _Built(monkeypatch)
    run = baseline.DisabledRun(arrivals, gpu_blocks=config.gpu_blocks_disabled,
                               max_running=o.max_running)
    rep = run.run(10_000)
    assert rep.finished == len(arrivals) and max(rep.waiting) > 0  # it scheduled, and queued
    assert built.by_class == {}  # no transfer, replacement or (empty) connector metadata
    # the same arrivals with HiSparse on do build them: the count above can fail
    run_sizing(o)
    assert built.by_class.get("HiSparseConnectorMetadata", 0) > 0
    assert built.by_class.get("SparseKVPageTransfer", 0) > 0


def _without_sizes(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k not in ("sizes", "notes", "data_mismatches")}


@pytest.mark.parametrize("check", [False, True])
def test_sizing_replay_accounting_equals_reference(check: bool) -> None:
    """Hits, misses, spills, bytes, prefix hits and every series: exactly equal."""
    acc = run_sizing(tiny(check=check))
    ref = run_sizing(tiny(check=check, executor="reference"))
    on = acc.hisparse
    assert on["spills"] > 0 and on["misses"] > 0 and on["h2d_bytes"] > 0
    assert on["prefix_hits"] > 0 and on["violations"] == 0
    assert ref.hisparse["data_mismatches"] == 0  # the reference compared every row
    assert _without_sizes(acc.hisparse) == _without_sizes(ref.hisparse)
    assert acc.disabled == ref.disabled
    assert acc.waits_on == ref.waits_on
    # one admission wait per request on each side, none negative, some queued
    # (replay.py:114:call:3 recorded none: both sides' lists were equal and empty)
    for waits in (acc.waits_on, acc.waits_off):
        assert len(waits) == on["finished"] == tiny().requests
        assert min(waits) >= 0 and max(waits) > 0
    # each side stops once drained, far inside its step cap (baseline.py:97:not:1 ran the
    # disabled side to the cap)
    for side in (acc.hisparse, acc.disabled):
        assert side["still_running"] == 0 and 0 < side["steps"] < tiny().steps // 100
    # both sides decode the same tokens, one per running request per step
    # (baseline.py:76:arith:0 counted them down)
    assert acc.disabled["decoded_tokens"] == on["decoded_tokens"] > 0
    # the disabled side's blocks in use stay within its pool and come back to 0
    # (baseline.py:79:var:4 counted against the running bound instead of the pool)
    used = acc.disabled["series"]["gpu_blocks_used"]
    assert 0 == used[-1] <= min(used) and 0 < max(used) <= acc.disabled["gpu_blocks"]


def test_sizing_replay_side_by_side_cli(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    out, png = tmp_path / "s.json", tmp_path / "s.png"
    t0 = time.monotonic()
    rc = cli.main(["simulate", "--model", "deepseek-v3.2", "--workload", "mooncake",
                   str(TRACE), "--gpu-kv-gib", "3", "--host-gib", "8", "--max-running", "8",
                   "--no-progress", "--json", str(out), "--plot", str(png)])
    took = time.monotonic() - t0
    assert rc == 0
    text = capsys.readouterr().out
    doc = json.loads(out.read_text())
    # the reported wall time lies within the call's own (sizing/cli.py:160:arith:2 added
    # its start): no bound but the call itself, so no load can fail it
    assert 0 < doc["wall_s"] <= took and doc["cpu_s"] > 0
    assert f"ran in {doc['wall_s']:.1f} s wall, {doc['cpu_s']:.1f} s CPU (both runs)" in text
    s = doc["summary"]
    assert s["hisparse"]["finished"] == s["disabled"]["finished"] == 12
    # each side's figures beside its series, the series under one key
    # (sizing/cli.py:183:cmp:25 kept only the series)
    for side in ("hisparse", "disabled"):
        assert doc[side]["finished"] == 12 and "series" not in doc[side]
    assert doc["options"]["executor"] == "accounting"
    assert len(doc["series"]["hisparse.running"]) == s["hisparse"]["steps"]
    assert len(doc["series"]["disabled.running"]) == s["disabled"]["steps"]
    # the block counts are HiSparseConfig's, derived once from the GiB budgets
    c = sizing_config(replace(tiny(), geometry=MODELS["deepseek-v3.2"], gpu_kv_gib=3,
                              host_gib=8, max_running=8))
    assert doc["options"]["gpu_blocks_on"] == c.gpu_blocks
    assert doc["options"]["gpu_blocks_off"] == c.gpu_blocks_disabled
    assert "HiSparse on" in text and "admission wait p99, steps" in text
    # what the accounting executor does not check is said (sizing/table.py:74:cmp:0
    # printed a data-mismatch count it never compared)
    assert "; accounting executor: no bytes held or compared" in text
    assert "data mismatches" not in text
    assert png.stat().st_size > 0


@pytest.mark.parametrize("argv, message", [
    (["--workload", "mooncake", "--gpu-kv-gib", "100", "--host-gib", "400",
      "--executor", "reference"], "--executor reference would hold"),
    (["--gpu-kv-gib", "100", "--host-gib", "400"], "add --workload mooncake"),
    (["--workload", "mooncake", "--gpu-kv-gib", "100"], "needs both budgets"),
    (["--workload", "mooncake", "--gpu-kv-gib", "100", "--host-gib", "400",
      "--abort-rate", "0.1"], "drop --abort-rate"),
    # (a rate of 0 is still a flag the replay does not take: sizing/cli.py:88:none:6)
    (["--workload", "mooncake", "--gpu-kv-gib", "100", "--host-gib", "400",
      "--abort-rate", "0"], "drop --abort-rate"),
    (["--workload", "mooncake", "--gpu-kv-gib", "100", "--host-gib", "400",
      "--metrics-port", "0"], "--metrics-port"),
    (["--workload", "mooncake", "--gpu-kv-gib", "100", "--host-gib", "400",
      "--message-faults", "0.05"], "drop --message-faults"),
    (["--workload", "mooncake", "--gpu-kv-gib", "100", "--host-gib", "400",
      "--indexer-offload"], "--indexer-offload"),
    (["--workload", "mooncake", "--gpu-kv-gib", "100", "--host-gib", "400",
      "--offload-blocks", "7"], "--offload-blocks"),
    # each of these alone (sizing/cli.py:78:bool:1 refused only all of them at once)
    (["--workload", "mooncake", "--gpu-kv-gib", "100", "--host-gib", "400",
      "--tp", "2"], "one in-process worker"),
    # budgets that hold no block are refused before the replay starts
    # (sizing/cli.py:148:call:16 let the replay meet them)
    (["--workload", "mooncake", "--gpu-kv-gib", "0.001", "--host-gib", "8"],
     "holds no whole GPU block"),
    (["--workload", "mooncake", "--gpu-kv-gib", "100", "--host-gib", "400",
      "--speculative", "2"], "one in-process worker"),
])
def test_model_simulate_refuses_in_one_line(argv: list[str], message: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli.main(["simulate", "--model", "deepseek-v3.2", *argv, str(TRACE)]
                  if "mooncake" in argv else ["simulate", "--model", "deepseek-v3.2", *argv])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and err.count("\n") == 1


@pytest.mark.parametrize("flag, value", [
    ("--gpu-blocks", "8"), ("--block-tokens", "16"), ("--row-bytes", "32"),
    ("--top-k", "64"), ("--layers", "2"),
])
def test_each_toy_size_is_refused_with_a_model_by_name(
        flag: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The model and the GiB budgets set every toy size; each one given is refused, by
    its flag (--host-blocks never reaches it: argparse refuses it beside --host-gib).
    (sizing/cli.py:30:drop:4, 6, 7, 8 and 9 each let one through)"""
    rc = cli.main(["simulate", "--model", "deepseek-v3.2", "--workload", "mooncake",
                   "--gpu-kv-gib", "100", "--host-gib", "400", flag, value, str(TRACE)])
    err = capsys.readouterr().err
    assert rc == 2 and f"{flag} comes from --model deepseek-v3.2" in err
    assert err.count("\n") == 1


def test_a_gpu_budget_without_a_model_is_refused_in_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    # (cli.py:449:raise:1: no test gave a GPU budget to a run without --model; a host
    # budget alone is a plain run's host pool)
    assert cli.main(["simulate", "--gpu-kv-gib", "3", "--requests", "2", "--steps", "5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.endswith("--gpu-kv-gib sizes a --model's pools: add --model\n")


def test_mooncake_defaults_admit_the_trace(tmp_path: Path) -> None:
    out = tmp_path / "m.json"
    rc = cli.main(["simulate", "--workload", "mooncake", str(TRACE), "--requests", "12",
                   "--no-progress", "--json", str(out)])
    doc = json.loads(out.read_text())
    assert rc == 0 and doc["never_admitted"] == 0 and doc["too_large"] == 0
    longest = max(len(a.page_keys) for a in build_workload(replace(
        simulate_options(tiny(), sizing_config(tiny())), block_tokens=32)))
    assert doc["gpu_blocks"] == max(56, 2 * longest)


def test_simulate_without_flags_is_unchanged() -> None:
    """The README's first command: the same options as before --model existed."""
    from hisparse.simulate import SimulateOptions

    args = cli.build_parser().parse_args(["simulate"])
    assert cli._simulate_options(args) == SimulateOptions()


@pytest.mark.parametrize(("flags", "check"), [([], False), (["--check-invariants"], True),
                                              (["--check-invariants", "--no-check"], False),
                                              (["--no-check"], False)])
def test_model_simulate_checks_invariants_only_when_asked(flags: list[str],
                                                         check: bool) -> None:
    # off by default with --model (each check costs O(state)); --no-check wins
    # (sizing/cli.py:103:not:1 checked exactly when both were given)
    from hisparse.simulate import SimulateOptions
    from hisparse.sizing.cli import sizing_options

    args = cli.build_parser().parse_args(
        ["simulate", "--model", "deepseek-v3.2", "--workload", "mooncake", str(TRACE),
         "--gpu-kv-gib", "100", "--host-gib", "400", *flags])
    d = SimulateOptions()
    o = sizing_options(args, {"gpu_blocks": None, "host_blocks": None,
                              "block_tokens": d.block_tokens, "row_bytes": d.row_bytes,
                              "top_k": d.top_k, "layers": d.layers})
    assert o.check is check


def test_the_disabled_replay_admits_a_request_of_exactly_its_pool() -> None:
    # as large as the pool fits; one page more never does (baseline.py:90:cmp:5 called
    # the exact fit too large)
    from hisparse.workload import Arrival

    arrivals = [Arrival(0, "fits", tuple(f"a{i}" for i in range(4)), 2),
                Arrival(0, "over", tuple(f"b{i}" for i in range(5)), 2),
                Arrival(3, "later", ("c0",), 1)]
    rep = baseline.DisabledRun(arrivals, gpu_blocks=4, max_running=2).run(100)
    assert (rep.requests, rep.finished, rep.too_large, rep.never_admitted) == (3, 2, 1, 1)
    assert rep.decoded_tokens == 3
    # a wait is the steps from arrival to admission: "later" found room at once
    # (baseline.py:72:arith:8 added the arrival step)
    assert rep.waits == [0, 0]


@pytest.mark.parametrize(("violations", "mismatches", "code"), [(0, 0, 0), (1, 0, 1),
                                                                 (0, 1, 1), (2, 3, 1)])
def test_a_sizing_replay_exits_1_on_a_violation_or_a_mismatch(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        violations: int, mismatches: int, code: int) -> None:
    # either is a failed run (sizing/cli.py:174:bool:4 needed both); the summary is
    # stood in for, the replay itself is real
    import hisparse.sizing.cli as sizing_cli

    real = sizing_cli.summary

    def summary(res: Any) -> dict[str, Any]:
        return {**real(res), "violations": violations, "data_mismatches": mismatches}

    monkeypatch.setattr(sizing_cli, "summary", summary)
    rc = cli.main(["simulate", "--model", "deepseek-v3.2", "--workload", "mooncake", str(TRACE),
                   "--gpu-kv-gib", "3", "--host-gib", "8", "--max-running", "8", "--requests",
                   "4", "--no-progress"])
    assert rc == code


def test_plan_takes_a_context_of_one_token_and_refuses_none() -> None:
    # the bound is one token (sizing/plan.py:99:cmp:2 refused a 1-token context)
    g = MODELS["deepseek-v3.2"]
    p = plan(g, gpu_kv_gib=100, host_gib=400, contexts=(1,), machine_ram=1024 * GIB)
    assert p.gpu_kv_gib == 100
    for contexts in ((), (0,), (1, 0)):
        with pytest.raises(PlanRefused, match="at least one context length of 1 token"):
            plan(g, gpu_kv_gib=100, host_gib=400, contexts=contexts, machine_ram=1024 * GIB)


def test_the_reference_bytes_check_counts_every_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    # GPU pool, every running request's hot rows and the host pool, added up
    # (sizing/cli.py:125:arith:1 subtracted the hot rows)
    import argparse

    from hisparse.sizing import cli as sizing_cli

    o = tiny(executor="reference")
    c = sizing_config(o)
    need = c.gpu_blocks * c.host_block_bytes + o.max_running * c.hot_bytes + c.host_pool_bytes
    frac = sizing_cli.RAM_FRACTION_FOR_BYTES
    monkeypatch.setattr(sizing_cli, "_available_ram", lambda: int(need / frac) + 1)
    sizing_cli.check_bytes_fit(o)  # just fits
    monkeypatch.setattr(sizing_cli, "_available_ram", lambda: int(need / frac) - 1)
    with pytest.raises(argparse.ArgumentTypeError, match="--executor reference would hold"):
        sizing_cli.check_bytes_fit(o)


def test_the_sizing_plot_draws_with_agg_and_labels_its_shared_step_axis(
        saved_figures: list[Any], tmp_path: Path) -> None:
    # the figure is read where it is saved, not from its pixels: the lower axes name the
    # decode step both share (sizing/table.py:97:call:8 left it unnamed); and it draws
    # off-screen with Agg whatever backend was chosen before (sizing/table.py:84:call:0
    # kept the one chosen, here PDF's)
    import matplotlib
    import numpy as np

    from hisparse.sizing.table import plot

    saved = saved_figures
    before = matplotlib.get_backend()
    matplotlib.use("pdf")
    try:
        o = {"model": "tiny", "gpu_kv_gib": 1.0, "host_gib": 2.0, "requests": 3,
             "time_compression": 1.0}
        on = {"host_blocks": 8, "series": {"running": [1, 2, 1], "host_blocks_used": [0, 4, 2]}}
        off = {"series": {"running": [1, 1, 1]}}
        png = tmp_path / "sizing.png"
        plot(o, on, off, png)
        assert matplotlib.get_backend().lower() == "agg"
    finally:
        matplotlib.use(before)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    [fig] = saved
    top, bottom = fig.axes
    assert bottom.get_xlabel() == "decode step"
    assert (top.get_ylabel(), bottom.get_ylabel()) == ("running requests", "host pool used, %")
    assert np.asarray(bottom.lines[0].get_ydata(), dtype=float).tolist() == [0.0, 50.0, 25.0]


def test_model_simulate_asks_for_matplotlib_only_with_a_plot(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    # --plot without matplotlib: one line, exit 2, before any replay; without --plot the
    # replay runs with no matplotlib at all (sizing/cli.py:146:cmp:17 asked the wrong way)
    import sys

    from hisparse.sizing import cli as sizing_cli

    replays: list[SizingOptions] = []

    def replay(o: SizingOptions, **kw: Any) -> Any:
        replays.append(o)
        return run_sizing(o, **kw)

    monkeypatch.setattr(sizing_cli, "run_sizing", replay)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib: ImportError
    argv = ["simulate", "--model", "deepseek-v3.2", "--workload", "mooncake", str(TRACE),
            "--gpu-kv-gib", "3", "--host-gib", "8", "--max-running", "8", "--no-progress"]
    assert cli.main([*argv, "--plot", str(tmp_path / "p.png")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--plot needs matplotlib" in err
    assert replays == []
    assert cli.main(argv) == 0
    assert len(replays) == 1 and "HiSparse on" in capsys.readouterr().out
