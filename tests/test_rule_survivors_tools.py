"""Rules of the tools around the protocol (TLC's verdict, ``hisparse plan`` and the sizing
checks, the bench CLI, the Mooncake reader) that survivors of the whole mutation run
showed no test stated (docs/mutation-run7)."""

from __future__ import annotations

import argparse
import json
import re
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hisparse.bench
from hisparse.cli import main
from hisparse.config import GIB
from hisparse.models import MODELS
from hisparse.sizing import cli as sizing_cli
from hisparse.sizing.plan import PlanRefused, plan, plan_lines
from hisparse.sizing.replay import sizing_config
from hisparse.tlc.output import EXIT_CODES, parse_output
from hisparse.workload import MooncakeShape, WorkloadError, mooncake
from tests.test_sizing import tiny

# -- TLC's verdict ----------------------------------------------------------------------


@pytest.mark.parametrize("exit_code", [11, 12, 13, 14])
def test_a_violation_exit_that_names_no_property_keeps_the_exit_codes_reason_alone(
        exit_code: int) -> None:
    # (tlc/output.py:136:bool:6: `and` -> `or` appended ": " and an empty list of names)
    out = parse_output("TLC2 Version 2.18\n", exit_code)
    assert (out.result, out.violated, out.messages) == ("violation", [], [])
    assert out.reason == EXIT_CODES[exit_code][1]
    # and one that names its property appends exactly that name
    named = parse_output("Error: Invariant Safe is violated.\n", exit_code)
    assert named.reason == f"{EXIT_CODES[exit_code][1]}: Safe"


# -- hisparse plan: the ratio column ------------------------------------------------------


def test_the_plan_ratio_is_hisparse_capacity_over_disabled_capacity() -> None:
    # (sizing/plan.py:57:var:44 divided the context length instead of HiSparse's count)
    g = MODELS["deepseek-v3.2"]
    p = plan(g, gpu_kv_gib=100, host_gib=400, contexts=(8192, 32768, 131072),
             machine_ram=1024 * GIB)
    got = [(r.context, r.disabled_max, r.hisparse_max, r.ratio) for r in p.rows]
    assert got == [(r.context, r.disabled_max, r.hisparse_max, r.hisparse_max / r.disabled_max)
                   for r in p.rows]
    assert all(r.disabled_max > 0 and r.hisparse_max != r.context for r in p.rows)
    assert [row["ratio"] for row in p.to_json()["rows"]] == [r.ratio for r in p.rows]
    table = plan_lines(p, g)
    for r in p.rows:
        line = next(x for x in table if x.startswith(f"{r.context:>8,} |"))
        assert f"| {r.hisparse_max / r.disabled_max:>5.2f}x |" in line


def test_a_context_the_gpu_holds_none_of_has_no_ratio_not_a_division_error() -> None:
    # one request of 1M tokens needs ~45 GiB with HiSparse off: a 10 GiB budget holds none,
    # and with HiSparse on none either (the admission reserve is its pages): no ratio, null
    # in the JSON (strict JSON has no Infinity), "-" in the table (sizing/plan.py's ratio
    # tested the context length, always non-zero, and divided by 0)
    g = MODELS["deepseek-v3.2"]
    p = plan(g, gpu_kv_gib=10, host_gib=400, contexts=(8192, 1_000_000),
             machine_ram=1024 * GIB)
    short, long = p.rows
    assert short.disabled_max > 0 and short.ratio == short.hisparse_max / short.disabled_max
    assert (long.context, long.disabled_max, long.hisparse_max) == (1_000_000, 0, 0)
    assert long.ratio is None
    doc = p.to_json()
    assert doc["rows"][1]["ratio"] is None
    assert json.loads(json.dumps(doc, allow_nan=False))["rows"][1]["ratio"] is None
    line = next(x for x in plan_lines(p, g) if x.startswith(f"{1_000_000:>8,} |"))
    assert "|      - |" in line


@settings(max_examples=60, deadline=None)
@given(model=st.sampled_from(sorted(MODELS)), gpu=st.integers(1, 400),
       contexts=st.lists(st.integers(1, 2_000_000), min_size=1, max_size=4))
def test_a_gpu_that_holds_no_request_of_a_context_unoffloaded_holds_none_offloaded(
        model: str, gpu: int, contexts: list[int]) -> None:
    # why a plan has no ratio to give there: the pool's admission reserve is at least that
    # context's pages, which alone leave less than its indexer keys of the budget
    try:
        p = plan(MODELS[model], gpu_kv_gib=gpu, host_gib=2000, contexts=tuple(contexts),
                 machine_ram=4096 * GIB)
    except PlanRefused:
        return
    for r in p.rows:
        assert (r.ratio is None) == (r.disabled_max == 0)
        if r.disabled_max == 0:
            assert r.hisparse_max == 0 and r.running == 0
    json.dumps(p.to_json(), allow_nan=False)  # always strict JSON


# -- the reference executor's bytes check ---------------------------------------------


def test_reference_pools_of_exactly_the_allowed_fraction_of_available_ram_fit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the bound is inclusive: pools of exactly RAM_FRACTION_FOR_BYTES of the available RAM
    # are accepted, a byte of RAM less refuses (sizing/cli.py:128:cmp:2 refused the bound)
    o = tiny(executor="reference")
    c = sizing_config(o)
    need = c.gpu_blocks * c.host_block_bytes + o.max_running * c.hot_bytes + c.host_pool_bytes
    frac = sizing_cli.RAM_FRACTION_FOR_BYTES
    exact = [h for h in range(int(need / frac) - 3, int(need / frac) + 4) if frac * h == need]
    assert exact, "the tiny options' pools are no exact fraction of any RAM size"
    have = exact[0]
    monkeypatch.setattr(sizing_cli, "_available_ram", lambda: have)
    sizing_cli.check_bytes_fit(o)  # fits: no refusal
    monkeypatch.setattr(sizing_cli, "_available_ram", lambda: have - 1)
    message = (f"--executor reference would hold {need / GIB:,.1f} GiB of KV bytes (GPU and "
               f"host pools); this machine has {(have - 1) / GIB:,.1f} GiB available: use "
               "--executor accounting (the default with --model) or smaller budgets")
    with pytest.raises(argparse.ArgumentTypeError, match=f"^{re.escape(message)}$"):
        sizing_cli.check_bytes_fit(o)


# -- hisparse bench -----------------------------------------------------------------------


def test_the_churn_bench_prints_every_figure_of_its_run_one_per_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    # the figures are the run's (a stand-in here, so they are known exactly): each on its
    # own line, its name padded to 34 (bench/cli.py:331:call:61 printed none of them)
    import hisparse.bench.churn as churn

    doc: dict[str, Any] = {"requests": 3, "lifecycle_us_p50": 12.5,
                           "acks": ["pipelined", "split"], "left_after_drain": []}
    monkeypatch.setattr(churn, "run", lambda *a, **k: doc)
    out = tmp_path / "churn.json"
    assert main(["bench", "churn", "--requests", "3", "--json", str(out)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "requests                           3",
        "lifecycle_us_p50                   12.5",
        "acks                               ['pipelined', 'split']",
        "left_after_drain                   []",
    ]
    assert json.loads(out.read_text()) == doc


def test_the_staging_bench_refuses_row_sizes_off_16_before_it_runs(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # a refusal runs nothing: the bench (a stand-in recording its calls; the real one needs
    # a GPU) is never started (bench/cli.py:408:reorder:1 ran it, then refused)
    calls: list[dict[str, Any]] = []

    def run(**kw: Any) -> dict[str, Any]:
        calls.append(kw)
        return {"environment": "stand-in", "shapes": [], "bytes_equal": True}

    fake = types.ModuleType("hisparse.bench.pdstaging")
    fake.PATHS = ("batched",)  # type: ignore[attr-defined]
    fake.run = run  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "hisparse.bench.pdstaging", fake)
    monkeypatch.setattr(hisparse.bench, "pdstaging", fake, raising=False)
    assert main(["bench", "pd-staging", "--row-bytes", "656,8,24"]) == 1
    err = capsys.readouterr().err
    assert "hisparse: violation: --row-bytes must be multiples of 16, got [8, 24]" in err
    assert calls == []
    # a good list reaches the bench as given
    assert main(["bench", "pd-staging", "--row-bytes", "656,8192", "--reps", "1"]) == 0
    assert calls == [{"pages": 128, "layers": 4, "block_tokens": 64, "row_bytes": (656, 8192),
                      "slots": 64, "reps": 1}]


# -- the Mooncake reader ------------------------------------------------------------------


@pytest.mark.parametrize(("length", "shown_length"), [(39, 39), (40, 40), (41, 43), (42, 43)])
def test_a_bad_trace_field_is_quoted_whole_up_to_40_characters_then_cut_with_dots(
        tmp_path: Path, length: int, shown_length: int) -> None:
    # repr of a string of n-2 characters is n characters long; at most 40 are quoted whole,
    # longer ones as their first 40 and "..." (workload.py:98:cmp:7 cut a 40-character
    # one; 98:int:2 quoted a 41-character one whole; both were line 91 before)
    value = "x" * (length - 2)
    assert len(repr(value)) == length
    shown = repr(value) if length <= 40 else repr(value)[:40] + "..."
    assert len(shown) == shown_length
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"timestamp": 0, "input_length": value, "output_length": 1,
                                "hash_ids": [0]}) + "\n")
    message = (f"{path}:1: input_length must be a non-negative integer of at most 2^53, "
               f"got {shown}")
    with pytest.raises(WorkloadError, match=f"^{re.escape(message)}$"):
        mooncake(path, MooncakeShape(10, 1.0, 64))
