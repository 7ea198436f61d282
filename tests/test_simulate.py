"""``hisparse simulate``: the end-to-end run is clean, exercises every path, and its
protocol trace is a behaviour of the TLA+ spec."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest

import hisparse.simulate as simulate_module
from hisparse.cli import main
from hisparse.coordinator import Admission, HiSparseCoordinator
from hisparse.simulate import (
    SimulateOptions,
    SimulateReport,
    Simulation,
    coverage_notes,
    simulate,
)
from hisparse.workload import Arrival
from tests.protocol_helpers import ZeroDraws


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


TP_RUN = SimulateOptions(requests=16, steps=120)


@pytest.mark.parametrize("backing", ["private", "shared"])
def test_two_ranks_in_processes_are_clean(backing: str) -> None:
    """Two reference workers, each in its own process, every rank's acks fed to the
    coordinator and every rank's rows checked; shared: one host allocation, only rank 0
    copies, rank 1 reads the writer's bytes after its events."""
    rep = simulate(replace(TP_RUN, seed=1, tp=2, backing=backing,
                                   worker_processes=True))
    assert rep.violations == 0 and rep.data_mismatches == 0, rep.notes
    assert rep.spills > 0 and rep.misses > 0 and rep.prefix_hits > 0
    assert rep.sizes["tp_ranks"] == 2 and rep.sizes["backing"] == backing


def test_two_ranks_recover_from_rank_restarts() -> None:
    """Seeded losses of one rank at a time: the other rank's acks keep flowing, the run
    recovers, every row reads back right and everything drains."""
    opts = replace(TP_RUN, seed=0, tp=2, worker_restarts=6)
    sim = Simulation(opts)
    rep = sim.run()
    assert rep.violations == 0 and rep.data_mismatches == 0, rep.notes
    assert rep.worker_restarts == 6 and rep.open_at_loss > 0
    assert _drain_problems(sim) == []


def test_a_reader_that_skips_the_writer_event_reads_stale_bytes() -> None:
    """The injected bug reader_skips_writer_event on the shared backing: the reader's
    stream does not wait on the writer's copy, reads the shared allocation before the
    bytes land, and the row check counts the mismatches."""
    from hisparse.sharedpool import SharedHostExecutor

    sim = Simulation(replace(TP_RUN, seed=1, tp=2, backing="shared"))
    reader = sim.local(1).executor
    assert isinstance(reader, SharedHostExecutor) and not reader.writer
    reader.skip_writer_wait = True
    rep = sim.run()
    assert rep.violations == 0 and rep.data_mismatches > 0


@pytest.mark.tlc
@pytest.mark.parametrize("backing", ["private", "shared"])
def test_simulate_tp2_trace_accepted(tmp_path: Path, backing: str) -> None:
    trace = tmp_path / f"tp2-{backing}.jsonl"
    out = tmp_path / f"tp2-{backing}.json"
    code = main(["simulate", "--requests", "8", "--steps", "80", "--seed", "3", "--tp", "2",
                 "--backing", backing, "--worker-restarts", "2", "--gpu-blocks", "24",
                 "--host-blocks", "16", "--no-progress", "--json", str(out),
                 "--trace", str(trace)])
    assert code == 0
    doc = json.loads(out.read_text())
    assert doc["spills"] > 0 and doc["open_at_loss"] > 0 and doc["metas_lost"] > 0
    steps = [json.loads(line) for line in trace.read_text().splitlines()]
    assert {s["args"].get("rank") for s in steps if s.get("kind") == "step"} >= {0, 1}
    assert any(s.get("action") == "WorkerLoss" for s in steps)
    assert main(["check", "--trace", str(trace)]) == 0


def _faults_run(tmp_path: Path | None, tp: int = 1) -> tuple[SimulateReport, Simulation]:
    opts = SimulateOptions(requests=40, steps=300, seed=4, worker_restarts=4,
                           message_faults=0.05, tp=tp,
                           trace=None if tmp_path is None else tmp_path / "faults.jsonl")
    sim = Simulation(opts)
    return sim.run(), sim


@pytest.mark.parametrize("tp", [1, 2])
def test_simulate_with_message_faults_is_clean_and_drains(tp: int) -> None:
    """Duplicated, delayed and dropped messages in both directions, with worker
    restarts: no violation, every row reads back right, every fault kind happened, the
    gaps took the loss path, and the run drains to empty."""
    rep, sim = _faults_run(None, tp)
    assert rep.violations == 0 and rep.data_mismatches == 0, rep.notes
    mf = rep.message_faults
    assert {k for k, n in mf.items() if n} == set(mf), mf  # every kind, both directions
    assert rep.worker_restarts == 4 + mf["gaps"]
    assert _drain_problems(sim) == []


def test_simulate_message_faults_are_off_by_default() -> None:
    plain = simulate(SimulateOptions(requests=16, steps=120, seed=1))
    assert plain.message_faults == {} and "message_faults" not in plain.sizes


@pytest.mark.tlc
def test_simulate_message_faults_trace_accepted(tmp_path: Path) -> None:
    rep, _ = _faults_run(tmp_path)
    assert rep.violations == 0 and rep.message_faults["gaps"] > 0
    assert main(["check", "--trace", str(tmp_path / "faults.jsonl")]) == 0


def test_simulate_cli_refuses_a_fault_rate_above_a_third(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as err:
        main(["simulate", "--message-faults", "0.5"])
    assert err.value.code == 2
    assert "between 0 and 1/3" in capsys.readouterr().err


def test_a_construction_that_fails_closes_what_it_started(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the workers are up when the P/D side fails to start: they are closed, not leaked
    # (simulate.py:224:call:56)
    closed: list[bool] = []
    real_close = Simulation.close

    def boom(self: Simulation) -> None:
        raise RuntimeError("no prefiller")

    def close(self: Simulation) -> None:
        closed.append(bool(self.ports))
        real_close(self)

    monkeypatch.setattr(Simulation, "_start_pd", boom)
    monkeypatch.setattr(Simulation, "close", close)
    with pytest.raises(RuntimeError, match="no prefiller"):
        Simulation(SimulateOptions(requests=4, pd_share=0.5))
    assert closed == [True]


def test_a_command_held_back_at_the_end_still_reaches_its_worker(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # seed 2 at a rate of 0.3 ends with a delayed command on the down channel: the end
    # of the run delivers it late (simulate.py:743:call:90 dropped it instead)
    from hisparse import msgfaults
    from hisparse.workerport import LocalWorker

    flushed: list[bytes] = []  # what the end of the run flushed from the down channels
    late: list[bytes] = []  # what the workers were given from then on
    real_flush, real_bind = msgfaults.MessageFaults.flush, LocalWorker.bind

    def flush(self: msgfaults.MessageFaults, direction: str, rank: int) -> list[bytes]:
        out = real_flush(self, direction, rank)
        if direction == "down":
            flushed.extend(out)
        return out

    def bind(self: LocalWorker, raw: bytes) -> None:
        if flushed:
            late.append(raw)
        real_bind(self, raw)

    monkeypatch.setattr(msgfaults.MessageFaults, "flush", flush)
    monkeypatch.setattr(LocalWorker, "bind", bind)
    rep = simulate(SimulateOptions(requests=12, steps=100, seed=2, message_faults=0.3))
    assert rep.violations == 0 and len(flushed) == 1
    assert late[:1] == flushed  # the held command first, then the drain's own


def test_a_reader_waiting_on_a_copy_the_writer_never_ran_fails_before_landing() -> None:
    # the writer lands nothing when the copy is not its (simulate.py:629:reorder:15 landed
    # first, and failed on the lookup instead)
    from types import SimpleNamespace

    landed: list[int] = []
    writer = SimpleNamespace(queued=lambda: [1, 2], land=landed.append)
    port = SimpleNamespace(rank=1, decode=lambda topk, step: SimpleNamespace(waits_on={5}))
    with pytest.raises(RuntimeError, match=r"^rank 1 waits on copy 5, which the writer does "
                                           r"not run$"):
        Simulation._decode(SimpleNamespace(ports=[writer]), port, {}, 0)  # type: ignore[arg-type]
    assert landed == []


def test_synthetic_requests_draw_every_shared_prefix_and_none() -> None:
    # prefixes=3: prefix 0, 1 or 2, or a request of its own (simulate.py:396:arith:22)
    from types import SimpleNamespace

    arrived: list[object] = []
    stub = SimpleNamespace(o=SimulateOptions(), rng=random.Random(0), _t=0,
                           _arrive=arrived.append)
    for i in range(200):
        Simulation._new_request(stub, i)  # type: ignore[arg-type]
    firsts = {a.page_keys[0].split(":")[0] for a in arrived}  # type: ignore[attr-defined]
    assert SimulateOptions().prefixes == 3
    assert {"pre0", "pre1", "pre2"} <= firsts and any(f.startswith("req") for f in firsts)
    assert firsts - {"pre0", "pre1", "pre2"} == {f"req{i}" for i in range(200)} & firsts


def test_a_host_block_holds_a_page_of_every_layer() -> None:
    # tokens x row bytes x layers, whatever the run's size (simulate.py:109:var:16)
    o = SimulateOptions(block_tokens=2, row_bytes=16, layers=3, requests=5)
    assert o.host_block_bytes == 2 * 16 * 3


# --- the run's figures and sizes, exactly (mutation survivors of simulate.py) -----------


def test_an_abort_rate_of_zero_never_aborts_even_on_a_draw_of_zero() -> None:
    """A request is aborted with chance ``abort_rate``: a draw below it. At rate 0 no
    draw is, not even 0.0 (simulate.py:484:cmp:49 aborted on a draw equal to the rate:
    every running request at its first step)."""
    sim = Simulation(SimulateOptions(requests=8, steps=200, seed=0, abort_rate=0.0))
    sim.rng = ZeroDraws(0)
    rep = sim.run()
    assert rep.violations == 0 and rep.data_mismatches == 0, rep.notes
    assert rep.aborted == 0 and rep.finished == rep.requests == 8


def test_admissions_refused_counts_each_refused_admission(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``admissions_refused`` is the number of ``admit()`` calls the coordinator refused
    (None: the GPU pool short), counted here by a coordinator subclass that wraps the call
    (simulate.py:473:arith:25 counted them down). (A subclass, not a patched instance:
    the compiled build's coordinator is a native class.)"""
    refused = [0]

    class Counting(HiSparseCoordinator):
        def admit(self, request_id: str, max_hits: int | None = None) -> Admission | None:
            adm = super().admit(request_id, max_hits)
            refused[0] += adm is None
            return adm

    monkeypatch.setattr(simulate_module, "HiSparseCoordinator", Counting)
    sim = Simulation(SimulateOptions(requests=16, steps=120, seed=0))
    assert isinstance(sim.coordinator, Counting)
    rep = sim.run()
    assert rep.violations == 0, rep.notes
    assert rep.admissions_refused == refused[0] > 0


def test_aborted_counts_aborted_imports_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """``aborted`` counts every request the run aborted while it ran or imported: each
    ``abort()`` of a running or importing request, counted here by a coordinator subclass
    that wraps the call (simulate.py:559:arith:44 counted an import aborted mid-import
    down)."""
    calls = {"running": 0, "importing": 0}
    sims: list[Simulation] = []

    class Counting(HiSparseCoordinator):
        def abort(self, request_id: str) -> None:
            for where in calls:
                calls[where] += request_id in getattr(sims[0], where)
            super().abort(request_id)

    monkeypatch.setattr(simulate_module, "HiSparseCoordinator", Counting)
    sims.append(Simulation(SimulateOptions(requests=12, steps=200, seed=3, pd_share=1.0,
                                           abort_rate=0.1, gpu_blocks=40)))
    assert isinstance(sims[0].coordinator, Counting)
    rep = sims[0].run()
    assert rep.violations == 0 and rep.data_mismatches == 0, rep.notes
    assert calls["importing"] > 0  # (not vacuous: imports were aborted)
    assert rep.aborted == calls["running"] + calls["importing"]


def test_worker_losses_fall_on_steps_up_to_the_last_arrival() -> None:
    """The loss steps are drawn from steps 1 to the last arrival's step (and before the
    run's last step): with more losses asked than such steps, every one of them
    (simulate.py:340:arith:40 stopped two steps short of the last arrival)."""
    arrivals = [Arrival(s, f"r{s}", (f"k{s}",), 3) for s in (0, 2, 6)]
    losses = Simulation(SimulateOptions(steps=100, worker_restarts=10), arrivals)._losses
    assert losses == {1, 2, 3, 4, 5, 6}
    losses = Simulation(SimulateOptions(steps=4, worker_restarts=10), arrivals)._losses
    assert losses == {1, 2, 3}
    losses = Simulation(SimulateOptions(steps=4, worker_restarts=2), arrivals)._losses
    assert len(losses) == 2 and losses <= {1, 2, 3}


def test_sizes_name_the_workload_and_its_trace() -> None:
    # a synthetic run is named alone; a trace's path follows its workload's name
    # (simulate.py:348:cmp:66 named the path only when there was none)
    arrivals = [Arrival(0, "r0", ("k0",), 3)]
    assert Simulation(SimulateOptions(), arrivals).sizes()["workload"] == "synthetic"
    trace = Path("traces/conversation_trace.jsonl")
    sim = Simulation(SimulateOptions(workload="mooncake", workload_path=trace), arrivals)
    assert sim.sizes()["workload"] == f"mooncake {trace}"


def test_layer_one_follows_layer_zero_and_every_other_layer_leads() -> None:
    # (simulate.py:197:int:14 made layer 2 follow layer 0 and layer 1 lead)
    arrivals = [Arrival(0, "r0", ("k0",), 3)]
    for layers, want in ((2, (0, 0)), (3, (0, 0, 2)), (5, (0, 0, 2, 3, 4))):
        sim = Simulation(SimulateOptions(layers=layers), arrivals)
        assert sim.config.index_leaders == want
        assert sim.sizes()["index_leaders"] == list(want)


def test_the_host_miss_note_is_written_only_when_nothing_was_read_from_the_host() -> None:
    # a run that spilled: the note says so only with 0 host misses (simulate.py:818:cmp:28)
    note = "no decode step read a row from the host tier (0 host misses)"
    assert coverage_notes(SimulateReport(spills=5, misses=0)) == [note]
    assert coverage_notes(SimulateReport(spills=5, misses=3)) == []
    assert [n for n in coverage_notes(SimulateReport(spills=0, misses=0))
            if "offload never exercised" in n]
