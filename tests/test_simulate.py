"""``hisparse simulate``: the end-to-end run is clean, exercises every path, and its
protocol trace is a behaviour of the TLA+ spec."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hisparse.cli import main
from hisparse.simulate import SimulateOptions, SimulateReport, Simulation, simulate


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


def _loss_run(tmp_path: Path | None) -> tuple[SimulateReport, Simulation]:
    opts = SimulateOptions(requests=16, steps=120, seed=0, worker_restarts=6,
                           trace=None if tmp_path is None else tmp_path / "loss.jsonl")
    sim = Simulation(opts)
    return sim.run(), sim


def _drain_problems(sim: Simulation) -> list[str]:
    """Whatever the run left behind once published pages are evicted (empty = none)."""
    c = sim.coordinator
    c.evict_published()
    out = [f"{name} holds {n}" for name, n in c.table_sizes().items() if n]
    if c.state.host_used:
        out.append(f"{c.state.host_used} host blocks in use")
    if sim.kv.num_free != sim.kv.num_blocks:
        out.append(f"{sim.kv.num_blocks - sim.kv.num_free} GPU blocks in use")
    return out


def test_simulate_recovers_from_worker_restarts() -> None:
    """Seeded worker losses (some with the step's metadata lost) through the public
    API: invariants hold after every action, every row still reads back right, and
    the run drains to empty."""
    rep, sim = _loss_run(None)
    assert rep.violations == 0 and rep.data_mismatches == 0, rep.notes
    assert rep.worker_restarts == 6 and rep.metas_lost > 0 and rep.open_at_loss > 0
    assert rep.invariant_checks > 0 and rep.spills > 0 and rep.misses > 0
    assert _drain_problems(sim) == []


def test_simulate_without_restarts_is_unchanged() -> None:
    """The fault is off by default: a run draws and reports exactly as before."""
    plain = simulate(SimulateOptions(requests=16, steps=120, seed=1))
    assert plain.worker_restarts == 0 and plain.metas_lost == 0 and plain.open_at_loss == 0
    assert "worker_restarts" not in plain.sizes


@pytest.mark.tlc
def test_simulate_worker_restarts_trace_accepted(tmp_path: Path) -> None:
    rep, _ = _loss_run(tmp_path)
    assert rep.violations == 0 and rep.worker_restarts == 6 and rep.open_at_loss > 0
    steps = [json.loads(line) for line in (tmp_path / "loss.jsonl").read_text().splitlines()]
    assert any(s.get("action") == "WorkerLoss" for s in steps)
    assert main(["check", "--trace", str(tmp_path / "loss.jsonl")]) == 0


def test_worker_processes_give_the_same_report_and_trace(tmp_path: Path) -> None:
    """The worker in its own process (everything crossing as bytes) changes nothing:
    the same seed gives the same JSON report and the same protocol trace, with worker
    restarts, lost metadata and speculative steps in the run."""
    from hisparse.simulate import report_json

    docs, traces = [], []
    for procs in (False, True):
        trace = tmp_path / f"procs-{procs}.jsonl"
        opts = SimulateOptions(requests=16, steps=120, seed=2, worker_restarts=3,
                               num_speculative_tokens=1, trace=trace, worker_processes=procs)
        rep = simulate(opts)
        assert rep.violations == 0 and rep.data_mismatches == 0, rep.notes
        assert rep.spills > 0 and rep.misses > 0 and rep.worker_restarts == 3
        assert rep.metas_lost > 0 and rep.open_at_loss > 0
        docs.append(report_json(rep))
        traces.append(trace.read_bytes())
    assert docs[0] == docs[1]
    assert traces[0] == traces[1]
