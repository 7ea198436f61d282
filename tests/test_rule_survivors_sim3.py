"""Rules of the simulator's P/D imports and their report line, the indexer run's admission
order and the churn bench's host pool that survivors of the whole mutation run showed
(docs/mutation-run7)."""

from __future__ import annotations

from typing import Any

import pytest

from hisparse.bench.churn import churn, run
from hisparse.indexer_sim import IndexerSimulation
from hisparse.metrics import HiSparseMetrics
from hisparse.report import result_lines
from hisparse.simulate import SimulateOptions, SimulateReport, Simulation, report_json
from hisparse.workload import Arrival

# --- the report: the P/D imports line ------------------------------------------------------


def test_a_pd_share_run_reports_its_imports_on_one_line_after_the_faults() -> None:
    # the imports' figures: by target, the failures by reason, the bytes staged and direct,
    # the staging pool's peak and mean occupancy; a run without imports has no such line
    # (kills report.py:132:call:21, which dropped the line)
    imports = {
        "arrived": 1200, "device": 900, "host": 250, "failed": 50,
        "failed_by_reason": {"aborted": 30, "transfer_error": 20},
        "unaligned_final_block": 600, "staged_bytes": 3 * 2**20, "direct_bytes": 1536,
        "staging_slots": 4, "staging_peak": 3, "staging_occupancy_mean": 0.25,
    }
    doc = report_json(SimulateReport(imports=imports, worker_restarts=2))
    out = result_lines(doc)
    assert out[-2:] == [
        "faults       2 worker restarts recovered (0 with that step's connector metadata "
        "lost; 0 transfers open when lost)",
        "imports      1,200 arrived with prefill KV (600 ending inside their final block): "
        "device 900, host 250, failed 50 (aborted 30, transfer error 20); staged 3.0 MiB, "
        "direct 1.5 KiB; staging peak 3 of 4 slots, mean occupancy 25.0%",
    ]
    plain = result_lines(report_json(SimulateReport()))
    assert not [line for line in plain if line.startswith("imports")]


# --- the simulator: an import's ID declared again ------------------------------------------


@pytest.mark.parametrize("again", [2, 3, 4])
def test_an_aborted_import_is_counted_failed_once_whenever_its_id_arrives_again(
        again: int) -> None:
    # "r" (four pages) arrives with prefill KV at step 0 and is admitted to import; at
    # step 1 the simulator aborts it mid-import (abort rate 1) and the worker fails it.
    # Its ID then arrives again at step `again`: at step 2 before the schedule has seen
    # the failure (the arrival ends it), later after. Either way the first import is
    # counted failed once, by the worker's reason, the second completes on the device and
    # the prefiller holds nothing at the end (kills simulate.py:377:call:23, which at
    # step 2 dropped the failure from the figures)
    keys = ("k0", "k1", "k2", "k3")
    arrivals = [Arrival(0, "r", keys, 3), Arrival(again, "r", keys, 3)]
    sim = Simulation(SimulateOptions(pd_share=1.0, gpu_blocks=16, host_blocks=16, steps=30,
                                     abort_rate=1.0), arrivals)
    rep = sim.run()
    assert rep.violations == 0 and rep.data_mismatches == 0, rep.notes
    assert rep.requests == 2
    assert rep.imports == {
        "arrived": 2, "device": 1, "host": 0, "failed": 1, "failed_by_reason": {"aborted": 1},
        "unaligned_final_block": 0, "staged_bytes": 0, "direct_bytes": 36864,
        "staging_slots": 4, "staging_peak": 0, "staging_occupancy_mean": 0.0,
    }
    assert sim.pd is not None and sim.pd.held == set() and sim.importing == {}
    arena = sim.pd.prefiller.arena
    assert arena.num_free == arena.num_pages


def test_an_import_still_waiting_when_the_run_ends_is_dropped_by_the_prefiller() -> None:
    # one request runs at a time: "a" imports and decodes past the last step, so "b",
    # arrived with prefill KV, is never admitted. The drain ends it and its prefiller
    # drops its pages: nothing is held, every page of the prefiller's buffer is free
    # (kills simulate.py:759:call:75, which left "b"'s pages held)
    arrivals = [Arrival(0, "a", ("a0", "a1"), 50), Arrival(0, "b", ("b0", "b1", "b2"), 2)]
    sim = Simulation(SimulateOptions(pd_share=1.0, gpu_blocks=8, host_blocks=8, steps=5,
                                     abort_rate=0.0, concurrency=1), arrivals)
    rep = sim.run()
    assert rep.violations == 0 and rep.data_mismatches == 0, rep.notes
    assert (rep.requests, rep.never_admitted, rep.still_running, rep.too_large) == (2, 1, 1, 0)
    assert rep.imports["arrived"] == 2 and rep.imports["device"] == 1
    assert rep.imports["failed"] == 0
    assert sim.pd is not None and sim.pd.held == set() and sim.pending == []
    arena = sim.pd.prefiller.arena
    assert arena.num_free == arena.num_pages
    assert "b" not in sim.coordinator.state.req


# --- the indexer run: first come, first served -------------------------------------------


class AdmissionLog(IndexerSimulation):
    """An indexer run that notes each admission it tries: (step, request, admitted)."""

    def __init__(self, opts: SimulateOptions, arrivals: list[Arrival] | None = None,
                 metrics: HiSparseMetrics | None = None) -> None:
        super().__init__(opts, arrivals, metrics)
        self.tried: list[tuple[int, str, bool]] = []
        self.held_back = 0  # refusals with another request waiting behind

    def _admit(self, r: str) -> bool:
        ok = super()._admit(r)
        self.tried.append((self._t, r, ok))
        if not ok and self.pending[-1] != r:
            self.held_back += 1
        return ok


def test_a_request_refused_admission_holds_back_every_request_behind_it() -> None:
    # "x" takes three of the four GPU blocks; "a" (two pages) then waits for them, and
    # "b" (one page, which would fit) waits behind "a" until both are admitted in order
    # (kills indexer_sim.py:127:loop:1, which let "b" pass "a")
    arrivals = [Arrival(0, "x", ("x0", "x1", "x2"), 4), Arrival(1, "a", ("a0", "a1"), 2),
                Arrival(1, "b", ("b0",), 2)]
    sim = AdmissionLog(SimulateOptions(indexer_offload=True, gpu_blocks=4, steps=30,
                                       abort_rate=0.0), arrivals)
    rep = sim.run()
    assert rep.violations == 0 and rep.data_mismatches == 0, rep.notes
    assert sim.tried == [(0, "x", True), (1, "a", False), (2, "a", False), (3, "a", False),
                         (4, "a", True), (4, "b", True)]
    assert (rep.finished, rep.admissions_refused) == (3, 3)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_indexer_run_admits_in_arrival_order_and_stops_at_a_refusal(seed: int) -> None:
    # over seeded synthetic runs with a small GPU pool: no admission is tried after a
    # refusal in the same step, and requests are admitted in the order they arrived
    # (indexer_sim.py:127:loop:1 went on past a refusal)
    opts = SimulateOptions(indexer_offload=True, gpu_blocks=24, requests=12, steps=60,
                           seed=seed, abort_rate=0.0, offload_blocks=32)
    sim = AdmissionLog(opts)
    rep = sim.run()
    assert rep.violations == 0 and rep.data_mismatches == 0, rep.notes
    assert sim.held_back  # (not vacuous: a refused request had others behind it)
    for (t, _, ok), (t2, _, _) in zip(sim.tried, sim.tried[1:], strict=False):
        assert ok or t2 != t
    admitted = [r for _, r, ok in sim.tried if ok]
    order = [a.request_id for a in sim.arrivals]
    assert admitted == [r for r in order if r in admitted]


# --- the churn bench: the host pool asked for ---------------------------------------------


def _figures(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: doc[k] for k in ("prefix_hits", "retired", "tables_at_end", "left_after_drain")}


def test_the_churn_bench_churns_through_the_host_pool_it_was_given() -> None:
    # 150 lifecycles through a host pool of 120 blocks: the pool fills, every later spill
    # evicts, and at the end it publishes 119 pages (one spill still open); the figures
    # are those of one churn run with that pool (kills bench/churn.py:231:var:16, which
    # sized the pool by the request count: 149 published)
    doc = run(150, host_blocks=120, eviction_pools=(), acks=("pipelined",))
    assert doc["host_blocks"] == 120 and doc["eviction"] == []
    assert doc["tables_at_end"]["prefix"] == 119
    assert doc["tables_at_end"]["open_spills"] == 1
    assert doc["left_after_drain"] == []
    assert _figures(doc) == _figures(churn(150, 120, "pipelined"))
