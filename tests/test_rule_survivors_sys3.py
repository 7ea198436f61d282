"""Rules of the Prometheus metrics, the simulator's engine loop, the shared host pool and
the P/D import side that survivors of the whole mutation run showed (docs/mutation-run7):
each line ran, but no test asserted its effect."""

from __future__ import annotations

import copy
import json
import math
import random
from multiprocessing import shared_memory
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest

from hisparse.blockpool import BlockPool
from hisparse.config import GIB, HiSparseConfig
from hisparse.coordinator import Admission, HiSparseCoordinator
from hisparse.executor.layout import PoolLayout
from hisparse.executor.reference import ReferenceExecutor, ReferencePools
from hisparse.metrics import HiSparseMetrics
from hisparse.pdimport import ImportRunner
from hisparse.pdimport.sim import PdOptions, PdSide
from hisparse.simulate import SimulateOptions, Simulation
from hisparse.spec.messages import (
    HiSparseConnectorMetadata,
    HiSparseWorkerMeta,
    ImportCommand,
    PageImport,
    SparseKVPageTransfer,
)
from hisparse.transport import LoopbackPrefiller, LoopbackTransport, StagingPool

# --- metrics ------------------------------------------------------------------------------

BLOCK_BYTES = 64 * 656  # the default config's host block
METRICS_CONFIG = HiSparseConfig(host_pool_gib=(4 * BLOCK_BYTES + BLOCK_BYTES // 2) / GIB)


def _reuse_gap(m: HiSparseMetrics) -> tuple[float, float]:
    """(count, sum) of the reuse-gap histogram."""
    out: dict[str, float] = {}
    for family in m.registry.collect():
        if family.name == "hisparse_host_block_reuse_gap_steps":
            for s in family.samples:
                out[s.name.rsplit("_", 1)[1]] = s.value
    return out["count"], out["sum"]


def test_a_page_published_in_host_block_0_starts_its_reuse_clock() -> None:
    # host block 0 is a block like any other: its transfer's completed ack publishes the
    # page at step 5, and the prefix hit on it at step 12 is a reuse gap of 7 (kills
    # metrics.py:127:none:2, which took block 0 for "no transfer followed" and
    # started no clock, so the hit observed nothing)
    m = HiSparseMetrics(METRICS_CONFIG)
    meta = HiSparseConnectorMetadata(transfers=(
        SparseKVPageTransfer(transfer_id=3, src_gpu_block=1, dst_host_block=0),))
    m.on_connector_meta(meta, 2)
    m.on_worker_meta(HiSparseWorkerMeta(completed=(3,)), 5)
    m.on_admission(Admission("r", (("host", 0),), 1), 12)
    assert _reuse_gap(m) == (1, 7)


def test_an_open_transfer_into_host_block_0_stays_followed_across_steps() -> None:
    # a real coordinator spills the first page into host block 0 (the lowest free one);
    # the step ends while the transfer is open, so the metrics keep following it; its
    # completed ack then publishes the page (step 4) and another request's prefix hit on
    # it (step 9) is a reuse gap of 5 (kills metrics.py:150:none:3, which took the open
    # transfer's destination 0 for "closed" and dropped it at the step's end, and
    # metrics.py:127:none:2)
    kv = BlockPool(8)
    c = HiSparseCoordinator(METRICS_CONFIG, kv, gpu_blocks=8, check=True)
    m = HiSparseMetrics(METRICS_CONFIG)
    c.add_request("a", ["k0"])
    assert c.admit("a") is not None
    tid = c.spill(("a", 1))
    assert tid is not None
    transfers, _ = c.take_commands()
    assert [t.dst_host_block for t in transfers] == [0]
    m.on_connector_meta(HiSparseConnectorMetadata(transfers=transfers), 1)
    m.on_step(c)  # open: still followed
    c.on_worker_meta(HiSparseWorkerMeta(enqueued=(tid,)))
    done = HiSparseWorkerMeta(completed=(tid,))
    c.on_worker_meta(done)
    m.on_worker_meta(done, 4)
    m.on_step(c)
    c.add_request("b", ["k0"])
    adm = c.admit("b")
    assert adm is not None and adm.table == (("host", 0),) and adm.prefix_hits == 1
    m.on_admission(adm, 9)
    assert _reuse_gap(m) == (1, 5)


class SizedRegistry(CollectorRegistry):
    """A registry that also says how many collectors it holds: falsy while empty."""

    def __len__(self) -> int:
        return sum(1 for _ in self.collect())


def test_a_registry_passed_in_is_used_as_given_whatever_its_truth_value() -> None:
    # only None (the default) means a private registry; a registry given is the one the
    # metrics expose, even an empty one that is falsy (kills metrics.py:74:none:1, which
    # replaced a falsy registry with a new one: a collector the caller registered there
    # was missing from the metrics' exposition)
    reg = SizedRegistry()
    assert not reg
    m = HiSparseMetrics(METRICS_CONFIG, registry=reg)
    assert m.registry is reg
    mine = Counter("app_requests", "The caller's own counter", registry=None)
    reg.register(mine)
    mine.inc(3)
    assert "app_requests_total 3.0" in m.text()
    assert m.text() == generate_latest(reg).decode()
    assert HiSparseMetrics(METRICS_CONFIG).registry is not reg  # None: a private one


# --- the simulator's engine loop ----------------------------------------------------------


class ZeroDrawAtImport(Simulation):
    """A run whose generator, at the first step that starts with an import in flight,
    draws exactly 0.0 (the lowest value ``random()`` returns) for every running or
    importing request: the abort draws of that step. Notes the step, the imports in
    flight and the imports aborted after it."""

    forced: tuple[int, list[str]] | None = None
    aborted_after: set[str] | None = None

    def step(self, t: int) -> None:
        s = self.coordinator.state
        inflight = sorted(r for r in self.importing if s.req.get(r) == "importing")
        force = self.forced is None and bool(inflight)
        if force:
            draws = len(self.running) + len(self.importing)
            version, words, gauss = self.rng.getstate()
            zeroed = (0,) * (2 * draws) + tuple(words[2 * draws:624]) + (0,)  # index 0
            probe = random.Random()
            probe.setstate((version, zeroed, gauss))
            assert [probe.random() for _ in range(draws)] == [0.0] * draws
            self.rng.setstate((version, zeroed, gauss))
            self.forced = (t, inflight)
        super().step(t)
        if force:
            assert self.pd is not None
            self.aborted_after = set(self.pd.aborted)


def test_an_abort_rate_of_0_aborts_no_import_even_on_a_draw_of_0() -> None:
    # every arrival brings prefill KV; at the first step with an import in flight the
    # generator draws 0.0 for it: with an abort rate of 0 no import is ever aborted
    # (a draw aborts only when it is below the rate) and every import completes (kills
    # simulate.py:552:cmp:85, which aborted the import on a draw equal to the rate)
    sim = ZeroDrawAtImport(SimulateOptions(requests=12, steps=200, seed=0, pd_share=1.0,
                                           abort_rate=0.0))
    rep = sim.run()
    assert rep.violations == 0 and rep.data_mismatches == 0, rep.notes
    assert sim.forced is not None and sim.forced[1]  # an import was in flight
    assert sim.aborted_after == set()
    assert rep.aborted == 0
    assert rep.imports["failed"] == 0 and rep.imports["failed_by_reason"] == {}
    assert rep.imports["device"] + rep.imports["host"] == rep.imports["arrived"] == 12


@pytest.mark.parametrize("seed", [0, 2])
def test_with_two_ranks_the_seeded_losses_fall_on_either_rank(seed: int, tmp_path: Path) -> None:
    # a seeded worker loss picks the lost rank among all ranks: over six losses both
    # ranks are lost, each loss naming one of them (kills simulate.py:582:int:12, which
    # drew a rank only from three ranks up and lost rank 0 every time with two)
    trace = tmp_path / "losses.jsonl"
    opts = SimulateOptions(requests=16, steps=120, seed=seed, tp=2, worker_restarts=6,
                           trace=trace)
    rep = Simulation(opts).run()
    assert rep.violations == 0 and rep.data_mismatches == 0, rep.notes
    steps = [json.loads(line) for line in trace.read_text().splitlines()]
    lost = [s["args"]["rank"] for s in steps if s.get("action") == "WorkerLoss"]
    assert len(lost) == rep.worker_restarts == 6
    assert set(lost) == {0, 1}


def test_a_shared_backing_run_frees_its_shared_allocation_when_it_ends() -> None:
    # the run closes the shared host pool: its name is gone from /dev/shm and cannot be
    # opened again, and closing again is harmless (kills simulate.py:309:call:23, which
    # left the allocation named, and its memory held, after the run)
    sim = Simulation(SimulateOptions(requests=4, steps=30, tp=2, backing="shared"))
    assert sim.shared is not None
    name = sim.shared.name
    path = Path("/dev/shm") / name.lstrip("/")
    assert path.exists()
    rep = sim.run()
    assert rep.violations == 0 and rep.data_mismatches == 0, rep.notes
    assert not path.exists()
    with pytest.raises(FileNotFoundError):
        shared_memory.SharedMemory(name=name)
    sim.close()
    assert not path.exists()


class StagingSampled(Simulation):
    """A run that notes, after each advance of the imports (every step and every round
    of the end-of-run import drain), the most staging slots rank 0 held during it."""

    peaks: list[int]

    def _advance_imports(self) -> None:
        super()._advance_imports()
        assert self.pd is not None
        self.peaks = [*getattr(self, "peaks", []), self.pd.runners[0].step_peak]


def test_staging_occupancy_is_sampled_once_per_advance_and_its_mean_reported() -> None:
    # host-target imports go through rank 0's staging slots: after every advance the run
    # samples the most slots held during it; the samples are exactly those, they peak
    # at the runner's own staging peak, and the report's occupancy is their mean over
    # the slots (kills simulate.py:573:call:35 and pdimport/sim.py:183:call:14, which
    # took no sample: the occupancy read 0.0)
    sim = StagingSampled(SimulateOptions(requests=12, steps=200, seed=1, pd_share=1.0,
                                         abort_rate=0.0))
    rep = sim.run()
    assert rep.violations == 0 and rep.data_mismatches == 0, rep.notes
    assert sim.pd is not None
    samples = sim.pd.figures.staging_in_use
    assert samples == sim.peaks and len(samples) >= rep.steps
    assert rep.imports["host"] > 0
    slots = rep.imports["staging_slots"]
    assert slots == 4 and max(samples) == rep.imports["staging_peak"] == 2
    assert rep.imports["staging_occupancy_mean"] == sum(samples) / len(samples) / slots > 0


def test_a_pd_run_ends_with_every_transport_closed() -> None:
    # when the run ends each worker's transport has forgotten its imports, its peer (the
    # prefiller) and every block registration (kills pdimport/sim.py:200:call:16, which
    # left the transport connected with the worker's pools registered)
    sim = Simulation(SimulateOptions(requests=6, steps=100, seed=2, pd_share=1.0,
                                     abort_rate=0.0))
    assert sim.pd is not None
    transports = [r.transport for r in sim.pd.runners]
    assert transports and all(isinstance(tr, LoopbackTransport) for tr in transports)
    assert all(tr.regions for tr in transports)  # registered while the run lasts
    rep = sim.run()
    assert rep.violations == 0 and rep.imports["arrived"] == 6, rep.notes
    for tr in transports:
        assert isinstance(tr, LoopbackTransport)
        assert (tr.live, tr.peers, tr.regions) == ({}, {}, {})
    assert sim.pd.transports == []


# --- the P/D side and the import runner ---------------------------------------------------


def _pd_side(share: float, seed: int) -> PdSide:
    return PdSide(PdOptions(share=share), seed, layers=1, block_tokens=4, row_bytes=16,
                  capacity_pages=8)


@pytest.mark.parametrize("seed", [0, 7])
def test_an_arrival_brings_prefill_kv_only_on_a_draw_below_the_share(seed: int) -> None:
    # the share is the chance of prefill KV: the P/D generator's draw brings it when the
    # draw is below the share, so a share exactly equal to the draw brings none and the
    # next float up brings it (kills pdimport/sim.py:111:cmp:4, which brought prefill KV
    # on a draw equal to the share)
    probe = random.Random()
    probe.setstate(_pd_side(0.5, seed)._rng.getstate())
    x = probe.random()
    assert 0.0 < x < 1.0
    assert _pd_side(x, seed).draw(3) is None
    tokens = _pd_side(math.nextafter(x, 1.0), seed).draw(3)
    assert tokens is not None and 3 * 4 - 3 <= tokens <= 3 * 4


LAYERS, BLOCK, ROW = 2, 4, 16
PAGE = LAYERS * BLOCK * ROW
RUNNER_LAYOUT = PoolLayout(gpu_blocks=8, host_blocks=8, block_tokens=BLOCK, row_bytes=ROW,
                           hot_rows=4, slots=1)


def _runner_state(runner: ImportRunner, staging: StagingPool) -> dict[str, Any]:
    """Everything the runner reports or holds (not its pools' bytes)."""
    return {
        "step_peak": runner.step_peak, "stats": copy.deepcopy(runner.stats),
        "live": dict(runner.live), "landed": copy.deepcopy(runner._landed),
        "done": list(runner._done), "failed": list(runner._failed),
        "in_use": staging.in_use, "transport_live": dict(runner.transport.live),
    }


def test_draining_a_runner_with_nothing_in_flight_changes_nothing() -> None:
    # a two-page host import lands in one advance, holding both staging slots during it
    # (step_peak 2); draining the runner, now idle, advances nothing: the step's peak,
    # the acks still to take and everything else stay as they were (kills
    # pdimport/runner.py:193:reorder:2, which advanced once more before looking and
    # reset the step's peak to 0)
    executor = ReferenceExecutor()
    pools: list[ReferencePools] = [executor.allocate(RUNNER_LAYOUT) for _ in range(LAYERS)]
    staging = StagingPool(2 * PAGE, 2, PAGE)
    peer = LoopbackPrefiller("p", np.zeros((4, PAGE), np.uint8))
    transport = LoopbackTransport(staging, 1, 2)
    transport.connect(peer)
    runner = ImportRunner(transport, executor, pools, RUNNER_LAYOUT, peer, "p")
    peer.put("a", np.full((2, PAGE), 9, np.uint8))
    runner.start(ImportCommand(
        import_id=0, request_id="a", target="host", num_tokens=2 * BLOCK, block_size=BLOCK,
        pages=tuple(PageImport(page_index=i + 1, key=f"a:{i}", host_block=i,
                               valid_rows=BLOCK) for i in range(2))))
    runner.advance()
    assert not runner.live and runner.step_peak == 2 and staging.in_use == 0
    before = _runner_state(runner, staging)
    runner.drain()
    assert _runner_state(runner, staging) == before
    landed, done, failed = runner.take_acks()
    assert [(x.import_id, x.pages) for x in landed] == [(0, (1, 2))]
    assert (done, failed) == ((0,), ())

