"""``hisparse simulate``: the end-to-end run is clean, exercises every path, and its
protocol trace is a behaviour of the TLA+ spec."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hisparse.cli import main
from hisparse.simulate import SimulateOptions, simulate


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_simulate_is_clean_and_covers_every_path(seed: int) -> None:
    rep = simulate(SimulateOptions(requests=32, steps=200, seed=seed))
    assert rep.violations == 0, rep.notes
    assert rep.data_mismatches == 0
    assert rep.spills > 0 and rep.prefix_hits > 0 and rep.aborted > 0
    assert rep.resident_hits > 0 and rep.hot_hits > 0 and rep.misses > 0
    assert rep.h2d_bytes > 0 and rep.d2h_bytes > 0
    assert rep.invariant_checks > 0


def test_simulate_with_speculative_steps() -> None:
    """Two extra verification steps per request share one hot state, resolved in order."""
    rep = simulate(SimulateOptions(seed=0, num_speculative_tokens=2))
    assert rep.violations == 0 and rep.data_mismatches == 0, rep.notes
    assert rep.spills > 0 and rep.hot_hits > 0 and rep.misses > 0


@pytest.mark.tlc
def test_simulate_cli_json_and_trace_accepted(tmp_path: Path) -> None:
    out, trace = tmp_path / "sim.json", tmp_path / "sim.jsonl"
    code = main(["simulate", "--requests", "20", "--steps", "150", "--seed", "3",
                 "--no-progress", "--json", str(out), "--trace", str(trace)])
    assert code == 0
    doc = json.loads(out.read_text())
    for key in ("steps", "requests", "spills", "prefix_hits", "resident_hits", "hot_hits",
                "misses", "h2d_bytes", "d2h_bytes", "invariant_checks", "violations",
                "data_mismatches"):
        assert key in doc
    assert doc["violations"] == 0 and doc["data_mismatches"] == 0 and doc["spills"] > 0
    assert main(["check", "--trace", str(trace)]) == 0
