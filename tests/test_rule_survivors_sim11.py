"""Rules of the simulator's synthetic requests, its per-step series, and the order of a
worker loss within a step that survivors of the whole mutation run showed
(docs/mutation-run7): each line ran, but no test asserted its effect."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pytest
from numpy.typing import NDArray

from hisparse.coordinator import Loc
from hisparse.metrics import HiSparseMetrics
from hisparse.simulate import SimulateOptions, Simulation
from hisparse.spec.messages import CONNECTOR_METADATA, HiSparseConnectorMetadata
from hisparse.workerport import DecodeRows, WorkerPort
from hisparse.workload import Arrival

# --- synthetic requests drawn one by one ---------------------------------------------------


def test_a_request_drawn_with_a_shared_prefix_shares_exactly_its_first_prefix_pages() -> None:
    # a request drawn one by one (as the stateful tests draw them) with a shared prefix
    # starts with that prefix's first `prefix_pages` pages, and every page after is its
    # own; one drawn without starts with its own (kills simulate.py:398:cmp:89, which
    # shared one page more)
    o = SimulateOptions(prefixes=3, prefix_pages=3, min_pages=4, max_pages=8)
    sim = Simulation(o, arrivals=[])
    for i in range(40):
        sim._new_request(i)
    names = {v: k for k, v in sim.keys.items()}
    shared = own = 0
    for i in range(40):
        r = f"req{i}"
        keys = [names[int(k)] for k in sim.pages[r]]
        assert o.min_pages <= len(keys) <= o.max_pages
        first = keys[0].split(":")[0]
        if first == r:
            own += 1
            assert keys == [f"{r}:{j}" for j in range(len(keys))]
        else:
            shared += 1
            assert first in {"pre0", "pre1", "pre2"}
            assert keys == ([f"{first}:{j}" for j in range(3)]
                            + [f"{r}:{j}" for j in range(3, len(keys))])
    assert shared and own  # (not vacuous: both kinds were drawn)
    assert sim.pending == [f"req{i}" for i in range(40)]


# --- the per-step series ----------------------------------------------------------------------


class FreeAfterStep(Simulation):
    """A run that notes the GPU pool's free blocks after each step."""

    def __init__(self, opts: SimulateOptions) -> None:
        super().__init__(opts)
        self.free: list[int] = []

    def step(self, t: int) -> None:
        super().step(t)
        self.free.append(self.kv.num_free)


def test_the_gpu_blocks_used_series_is_the_pool_less_its_free_blocks_after_each_step() -> None:
    # one value per step: the GPU blocks in use when the step ends, never above the pool
    # (kills simulate.py:618:arith:31, which added the free blocks to the pool)
    sim = FreeAfterStep(SimulateOptions(requests=8, steps=40, seed=0))
    rep = sim.run()
    assert rep.violations == 0 and rep.data_mismatches == 0, rep.notes
    used = rep.series["gpu_blocks_used"]
    assert len(used) == rep.steps == len(sim.free) > 0
    assert used == [rep.gpu_blocks - f for f in sim.free]
    assert all(0 <= u <= rep.gpu_blocks for u in used)
    assert max(used) > 0  # (not vacuous: blocks were in use)


# --- a worker lost within a step ----------------------------------------------------------


class BindLog:
    """A rank's port that notes, in order, each connector metadata it binds and each
    restart; everything else goes to the port it wraps."""

    def __init__(self, port: WorkerPort) -> None:
        self.port = port
        self.rank = port.rank
        self.events: list[tuple[str, bytes]] = []

    def bind(self, raw: bytes) -> None:
        self.events.append(("bind", raw))
        self.port.bind(raw)

    def restart(self) -> tuple[int, ...]:
        self.events.append(("restart", b""))
        return self.port.restart()

    def admit(self, request_id: str, table: Sequence[Loc]) -> None:
        self.port.admit(request_id, table)

    def release(self, request_id: str) -> None:
        self.port.release(request_id)

    def write_rows(self, rows: NDArray[np.int64], data: NDArray[np.uint8]) -> None:
        self.port.write_rows(rows, data)

    def decode(self, topk: Mapping[str, NDArray[np.int32]], step: int) -> DecodeRows:
        return self.port.decode(topk, step)

    def queued(self) -> tuple[int, ...]:
        return self.port.queued()

    def land(self, count: int | None) -> None:
        self.port.land(count)

    def take_meta(self) -> bytes | None:
        return self.port.take_meta()

    def d2h_bytes(self) -> int:
        return self.port.d2h_bytes()

    def close(self) -> None:
        self.port.close()


class SentMetas(HiSparseMetrics):
    """Metrics that note each connector metadata the scheduler sends: (step, its bytes)."""

    def __init__(self, sim: Simulation) -> None:
        super().__init__(sim.config)
        self.sent: list[tuple[int, bytes]] = []

    def on_connector_meta(self, meta: HiSparseConnectorMetadata, step: int) -> None:
        self.sent.append((step, CONNECTOR_METADATA.dump_json(meta)))
        super().on_connector_meta(meta, step)


@pytest.mark.parametrize(("seed", "lost_at"), [(2, 35), (5, 9), (7, 47)])
def test_a_steps_metadata_lost_with_the_worker_is_the_one_metadata_it_never_binds(
        seed: int, lost_at: int) -> None:
    # three worker losses; at one of them the step's connector metadata is lost with the
    # worker (the other losses' steps lose none, or had nothing to send). The worker
    # binds every metadata the scheduler sent but that one, and the loss's recovery
    # re-sends what it needs (kills simulate.py:587:reorder:6, which bound the step's
    # metadata before drawing whether it was lost, so it always reached the worker)
    opts = SimulateOptions(seed=seed, requests=12, steps=60, worker_restarts=3,
                           gpu_blocks=24, concurrency=4)
    sim = Simulation(opts)
    port = BindLog(sim.ports[0])
    sim.ports[0] = port
    rec = SentMetas(sim)
    sim.metrics = rec
    rep = sim.run()
    assert rep.violations == 0 and rep.data_mismatches == 0, rep.notes
    assert (rep.worker_restarts, rep.metas_lost) == (3, 1)
    assert lost_at in sim._losses
    bound = [raw for kind, raw in port.events if kind == "bind"]
    assert len({raw for _, raw in rec.sent}) == len(rec.sent)  # (each one distinct)
    assert [t for t, raw in rec.sent if raw not in bound] == [lost_at]
    assert bound == [raw for _, raw in rec.sent if raw in bound]  # in the order sent
    assert len(bound) == len(rec.sent) - 1
    # at the loss that lost it, the restart comes first, then the recovery's metadata
    restarts = [i for i, (kind, _) in enumerate(port.events) if kind == "restart"]
    assert len(restarts) == 3
    sent_at_loss = [raw for t, raw in rec.sent if t == lost_at]
    assert len(sent_at_loss) == 2  # the lost one, then the recovery's
    i = port.events.index(("bind", sent_at_loss[1]))
    assert i - 1 in restarts


@pytest.mark.parametrize(("seed", "pages"), [(0, 2), (0, 4), (3, 2), (3, 8)])
def test_a_worker_lost_in_the_step_its_import_is_sent_fails_it_before_a_byte_moves(
        seed: int, pages: int) -> None:
    # "a" arrives with prefill KV at step 1, is admitted to import and its command reaches
    # the worker (these seeds lose no metadata); the worker is lost in that very step.
    # The loss is recovered before the step's imports advance: the import fails for the
    # loss, having moved nothing, and the prefiller gives its pages back (kills
    # simulate.py:590:reorder:7, which advanced the import first: bytes moved, and with
    # two pages the import even finished on the worker before the loss)
    arrivals = [Arrival(1, "a", tuple(f"a{i}" for i in range(pages)), 3)]
    opts = SimulateOptions(seed=seed, pd_share=1.0, worker_restarts=1, gpu_blocks=16,
                           host_blocks=16, steps=20, abort_rate=0.0)
    sim = Simulation(opts, arrivals)
    rep = sim.run()
    assert rep.violations == 0 and rep.data_mismatches == 0, rep.notes
    assert sim._losses == {1}
    assert (rep.worker_restarts, rep.metas_lost) == (1, 0)
    assert (rep.requests, rep.finished, rep.aborted) == (1, 0, 0)
    assert rep.imports == {
        "arrived": 1, "device": 0, "host": 0, "failed": 1,
        "failed_by_reason": {"worker_lost": 1}, "unaligned_final_block": 0,
        "staged_bytes": 0, "direct_bytes": 0, "staging_slots": 4, "staging_peak": 0,
        "staging_occupancy_mean": 0.0,
    }
    assert sim.pd is not None and sim.pd.held == set() and sim.importing == {}
    arena = sim.pd.prefiller.arena
    assert arena.num_free == arena.num_pages
    assert "a" not in sim.coordinator.state.req
