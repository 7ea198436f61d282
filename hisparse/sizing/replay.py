"""A Mooncake replay at a real model's geometry and budgets, HiSparse on and off.

HiSparse on runs the whole system (coordinator, connector, worker, executor) as
``hisparse simulate`` does, on the accounting executor by default: residency, hot rows,
LRU and the copy stream exactly, no bytes (``hisparse.executor.accounting``). One layer
is simulated, with the model's rows over every layer as its row (``row_bytes x
layers``): this simulator gives every indexer-owning layer the same top-K, so every
leader's hot rows and LRU evolve identically and a follower replays its leader's plan;
simulating each of them would repeat one layer's work 61 times (DeepSeek-V3.2) for the
same hits, misses and bytes. Bytes moved and blocks are whole-model figures; lookup
counts are one layer's (rates are the same in every layer).

Top-K is synthetic (the trace has none), shaped like the H200 engine benchmark's: a
request's first top-K is ``top_k`` random positions of its prompt, and each decode step
moves a fraction ``topk_drift`` of them to new random positions (``BENCHMARKS.md``,
"Step time and KV HBM"). Misses, so PCIe, scale with that drift.

HiSparse off (``baseline.DisabledRun``) replays the same arrivals on the same GPU budget
with every page resident. Both count sparse-MLA KV only: the indexer keys, which
HiSparse leaves on the GPU, are in ``hisparse plan``'s figures, not here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from hisparse.config import HiSparseConfig
from hisparse.models import ModelGeometry
from hisparse.simulate import SimulateOptions, Simulation, build_workload, report_json
from hisparse.sizing.baseline import DisabledReport, DisabledRun
from hisparse.workload import STEP_MS, Arrival

# H200 engine benchmark (BENCHMARKS.md "Step time and KV HBM", benchmarks/h200/engine.json):
# the HiSparse decode step at batch 128, 32k context, 1% drift, 5,889 us. That engine is
# a 2-layer DeepSeek-V3.2-shaped model, so a 61-layer step is longer and the GB/s that
# the misses need at its step time is lower: this default overstates the need.
DEFAULT_STEP_MS = 5.889
# Bulk pinned host-to-device copy on that H200 (BENCHMARKS.md, resolver run): 55.5 GB/s.
LINK_GBPS = 55.5
DEFAULT_DRIFT = 0.01
DEFAULT_MAX_RUNNING = 256
DEFAULT_STEPS = 100_000


@dataclass(frozen=True)
class SizingOptions:
    """A sizing replay: the model, the two budgets, the trace and how it is replayed."""

    geometry: ModelGeometry
    gpu_kv_gib: float
    host_gib: float
    workload_path: Path
    requests: int = 1000
    steps: int = DEFAULT_STEPS
    seed: int = 0
    time_compression: float = 1.0
    max_decode: int | None = None
    max_running: int = DEFAULT_MAX_RUNNING
    hot_rows: int | None = None
    topk_drift: float = DEFAULT_DRIFT
    step_ms: float = DEFAULT_STEP_MS
    executor: str = "accounting"
    check: bool = True
    trace: Path | None = None


def sizing_config(o: SizingOptions) -> HiSparseConfig:
    """The one-layer config of the replay, with the model's budgets: where its GPU and
    host block counts come from (``HiSparseConfig.gpu_blocks``, ``host_blocks``)."""
    g = o.geometry
    return HiSparseConfig(
        host_pool_gib=o.host_gib, gpu_kv_gib=o.gpu_kv_gib, hot_slots=o.max_running,
        block_tokens=g.block_tokens, row_bytes=g.kv_bytes_per_token, top_k=g.top_k,
        layers=1, hot_rows=o.hot_rows,
    )


def simulate_options(o: SizingOptions, config: HiSparseConfig) -> SimulateOptions:
    g = o.geometry
    return SimulateOptions(
        requests=o.requests, steps=o.steps, seed=o.seed, workload="mooncake",
        workload_path=o.workload_path, time_compression=o.time_compression,
        max_decode=o.max_decode, layers=1, top_k=g.top_k, block_tokens=g.block_tokens,
        row_bytes=config.row_bytes, gpu_blocks=config.gpu_blocks,
        host_blocks=config.host_blocks, abort_rate=0.0, concurrency=o.max_running,
        executor=o.executor, check=o.check, trace=o.trace,
    )


class SizingSimulation(Simulation):
    """``Simulation`` with drifting top-K (drawn with NumPy) and admission waits."""

    def __init__(self, opts: SimulateOptions, arrivals: list[Arrival], drift: float) -> None:
        super().__init__(opts, arrivals)
        self.drift = drift
        self._np = np.random.default_rng(opts.seed)
        self._current: dict[str, NDArray[np.int32]] = {}
        self.arrived_at: dict[str, int] = {}
        self.waits: list[int] = []

    def _arrive(self, a: Arrival) -> None:
        self.arrived_at[a.request_id] = a.step
        super()._arrive(a)

    def _schedule(self) -> None:
        before = set(self.running)
        super()._schedule()
        for r in self.running.keys() - before:
            self.waits.append(self._t - self.arrived_at.pop(r))
        for r in list(self._current):
            if r not in self.running:
                del self._current[r]

    def _topk_one(self, r: str) -> NDArray[np.int32]:
        n, k = len(self.pages[r]) * self.o.block_tokens, self.o.top_k
        if n <= k:
            out = np.full(k, -1, np.int32)
            out[:n] = np.arange(n, dtype=np.int32)
            return out
        g = self._np
        cur = self._current.get(r)
        if cur is None:
            cur = g.integers(n, size=k).astype(np.int32)
        else:
            m = g.binomial(k, self.drift)
            cur = cur.copy()
            cur[g.integers(k, size=m)] = g.integers(n, size=m)
        self._current[r] = cur
        return cur


@dataclass
class SizingResult:
    """Both runs' documents and the figures the side-by-side table prints."""

    options: dict[str, Any]
    hisparse: dict[str, Any]
    disabled: dict[str, Any]
    waits_on: list[int]
    waits_off: list[int]


def _percentile(xs: list[int], q: float) -> float:
    return float(np.percentile(np.array(xs), q)) if xs else 0.0


def _disabled_doc(rep: DisabledReport, gpu_blocks: int) -> dict[str, Any]:
    return {
        "steps": rep.steps, "requests": rep.requests, "finished": rep.finished,
        "still_running": rep.still_running, "never_admitted": rep.never_admitted,
        "too_large": rep.too_large, "decoded_tokens": rep.decoded_tokens,
        "gpu_blocks": gpu_blocks,
        "series": {"running": rep.running, "waiting": rep.waiting,
                   "gpu_blocks_used": rep.gpu_blocks_used},
    }


def run_sizing(o: SizingOptions, progress: bool = False) -> SizingResult:
    """Replay the trace with HiSparse on, then off, on the same budget."""
    config = sizing_config(o)
    sim_opts = simulate_options(o, config)
    arrivals = build_workload(sim_opts)
    sim = SizingSimulation(sim_opts, arrivals, o.topk_drift)
    rep = sim.run(progress)
    on = report_json(rep)
    on["evictions"] = sim.coordinator.evictions
    off_run = DisabledRun(arrivals, gpu_blocks=config.gpu_blocks_disabled,
                          max_running=o.max_running)
    off = _disabled_doc(off_run.run(o.steps), config.gpu_blocks_disabled)
    g = o.geometry
    options = {
        "model": g.name, "source": g.source, "layers": g.layers, "indexers": g.indexers,
        "row_bytes": g.row_bytes, "top_k": g.top_k, "block_tokens": g.block_tokens,
        "block_bytes": g.block_bytes, "gpu_kv_gib": o.gpu_kv_gib, "host_gib": o.host_gib,
        "gpu_blocks_on": config.gpu_blocks, "gpu_blocks_off": config.gpu_blocks_disabled,
        "host_blocks": config.host_blocks, "hot_rows": config.hot,
        "hot_bytes": config.hot_bytes, "max_running": o.max_running,
        "requests": o.requests, "seed": o.seed, "time_compression": o.time_compression,
        "max_decode": o.max_decode, "topk_drift": o.topk_drift, "step_ms": o.step_ms,
        "trace_ms_per_step": STEP_MS * o.time_compression, "link_gbps": LINK_GBPS,
        "executor": o.executor, "check": o.check,
    }
    return SizingResult(options, on, off, sim.waits, off_run.report.waits)


def summary(res: SizingResult) -> dict[str, Any]:
    """The side-by-side figures (both runs), then HiSparse's own."""
    o, on, off = res.options, res.hisparse, res.disabled
    ms = o["trace_ms_per_step"]

    def side(doc: dict[str, Any], waits: list[int]) -> dict[str, Any]:
        running = doc["series"]["running"]
        return {
            "finished": doc["finished"], "still_running": doc["still_running"],
            "never_admitted": doc["never_admitted"], "too_large": doc["too_large"],
            "steps": doc["steps"], "decoded_tokens": doc["decoded_tokens"],
            "running_mean": float(np.mean(running)) if running else 0.0,
            "running_peak": max(running, default=0),
            "wait_p50_steps": _percentile(waits, 50), "wait_p99_steps": _percentile(waits, 99),
            "wait_p50_s": _percentile(waits, 50) * ms / 1000,
            "wait_p99_s": _percentile(waits, 99) * ms / 1000,
        }

    h2d = [b for b, n in zip(on["series"]["h2d_bytes"], on["series"]["running"], strict=True)
           if n]
    per_s = 1000.0 / o["step_ms"]
    host = on["series"]["host_blocks_used"]
    return {
        "hisparse": side(on, res.waits_on),
        "disabled": side(off, res.waits_off),
        "resident_hit_rate": on["rates"]["resident_hit_rate"],
        "hot_hit_rate": on["rates"]["hot_hit_rate"],
        "host_hit_rate": on["rates"]["host_hit_rate"],
        "prefix_hit_rate": on["rates"]["prefix_hit_rate"], "prefix_hits": on["prefix_hits"],
        "h2d_bytes_per_step_mean": float(np.mean(h2d)) if h2d else 0.0,
        "h2d_bytes_per_step_p99": _percentile(h2d, 99),
        "h2d_gbps_mean": (float(np.mean(h2d)) if h2d else 0.0) * per_s / 1e9,
        "h2d_gbps_p99": _percentile(h2d, 99) * per_s / 1e9,
        "d2h_bytes_per_step_mean": on["d2h_bytes"] / max(1, on["steps"]),
        "host_blocks_peak": max(host, default=0), "host_blocks": on["host_blocks"],
        "host_occupancy_peak": on["rates"]["host_occupancy_peak"],
        "evictions": on["evictions"], "spills": on["spills"],
        "violations": on["violations"], "data_mismatches": on["data_mismatches"],
    }
