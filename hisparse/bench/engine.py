"""``hisparse bench engine``: decode step time and KV HBM, HiSparse against all-resident.

For each context length and batch: ``batch`` requests of one prompt length (no shared
content) are admitted and prefilled into the engine under test; HiSparse's GPU pool
holds one whole request plus every request's tail pages, so admissions spill complete
pages to pinned host memory exactly as the engine loop does, until almost all of the
context lives on the host. Then the captured step (indexer → top-K → resolve →
attention → sampling, one CUDA graph) is timed with CUDA events around each replay.

Top-K stays synthetic (``topk="given"``; the indexer still runs, so the step costs the
same): each request starts from ``top_k`` random positions of its context, and every
step a fraction ``drift`` of them moves to new random positions, so about ``drift`` of
the positions are new to the hot rows. The miss rate reported is the resolver's own
count (misses / positions) over the timed steps. Both engines see the same top-K.

Capacity: the KV HBM one request needs in steady state at a context length, and the
largest batch a fixed KV budget holds. All-resident: every row of every layer plus the
indexer's keys. HiSparse: its hot rows, two tail pages per layer, its LRU state and the
indexer's keys (the indexer stays on the GPU), after reserving one whole request's pages
(an admission lands every page on the GPU before spills move it).
"""

from __future__ import annotations

import gc
import statistics
import time
from typing import Any

import numpy as np

from hisparse.bench.gpu import environment
from hisparse.engine.backend import load_torch
from hisparse.engine.config import ROW_BYTES, EngineShape, ModelShape
from hisparse.engine.workload import EngineRequest, pages_needed, synthetic_requests
from hisparse.executor.layout import default_hot_rows

GIB = 1 << 30
TAIL_PAGES = 2
"""Resident pages per request in steady state: the page decode is filling and the next."""


def bench_model() -> ModelShape:
    """Two layers (an indexer owner and a follower) keep 128 requests x 128k in memory."""
    return ModelShape(layers=2, index_leaders=(0, 0))


def per_request_bytes(model: ModelShape, shape: EngineShape, context: int) -> dict[str, int]:
    """Steady-state KV HBM of one request at ``context`` tokens, in each engine."""
    index = len(model.leaders) * model.index_key_bytes * context
    resident = model.layers * ROW_BYTES * context + index
    hot = default_hot_rows(shape.top_k, shape.num_speculative_tokens)
    lru = len(model.leaders) * (4 * shape.max_context + 20 * hot + 8)
    hisparse = (model.layers * ROW_BYTES * (hot + TAIL_PAGES * shape.block_tokens)
                + lru + index)
    return {"resident": resident, "hisparse": hisparse}


def capacity(model: ModelShape, shape: EngineShape, context: int, budget_gib: float
             ) -> dict[str, Any]:
    per = per_request_bytes(model, shape, context)
    budget = int(budget_gib * GIB)
    admission = pages_needed(context, 0, shape) * shape.block_tokens * ROW_BYTES * model.layers
    res = budget // per["resident"]
    hs = (budget - admission) // per["hisparse"]
    return {"context": context, "budget_gib": budget_gib,
            "resident_bytes_per_request": per["resident"],
            "hisparse_bytes_per_request": per["hisparse"],
            "hisparse_admission_reserve_bytes": admission,
            "resident_max_batch": int(res), "hisparse_max_batch": int(hs),
            "ratio": hs / res if res else float("inf")}


class _TopK:
    """The synthetic top-K of every entry, drifting on the device."""

    def __init__(self, torch: Any, engine: Any, lengths: list[int], seed: int) -> None:
        self.torch = torch
        self.engine = engine
        dev = engine.model.device
        e, k = engine.shape.entries, engine.shape.top_k
        self.gen = torch.Generator(device=dev).manual_seed(seed)
        self.limit = torch.tensor(lengths, device=dev, dtype=torch.float32).repeat_interleave(
            engine.shape.per_slot).unsqueeze(1)
        self.cur = self._random((e, k))
        self.publish()

    def _random(self, size: tuple[int, int]) -> Any:
        u = self.torch.rand(size, generator=self.gen, device=self.limit.device)
        return (u * self.limit).long()

    def drift(self, fraction: float) -> None:
        moved = self.torch.rand(self.cur.shape, generator=self.gen,
                                device=self.cur.device) < fraction
        self.cur = self.torch.where(moved, self._random(tuple(self.cur.shape)), self.cur)
        self.publish()

    def publish(self) -> None:
        self.engine.given_topk.copy_(self.cur.sort(dim=-1).values)


def _fill(engine: Any, scheduler: Any, requests: list[EngineRequest]) -> dict[str, int]:
    """Admit and prefill every request (spilling complete pages when the pool is full)."""
    final: dict[str, int] = {}
    for r in requests:
        if scheduler is None:
            slot = len(final)
        else:
            scheduler.add(r)
            for _ in range(6):
                got = scheduler.admit(r)
                if got is not None:
                    break
                scheduler.reclaim(scheduler.blocks_short(r), final)
                scheduler.send_commands()
                scheduler.deliver_acks()
            if got is None:
                raise RuntimeError(f"{r.request_id} does not fit the GPU pool")
            slot = got[0]
        engine.prefill(slot, r.prompt, r.prefill_len)
        final[r.request_id] = r.prefill_len
    if scheduler is not None:  # steady state: every complete page on the host
        scheduler.reclaim(scheduler.gpu_blocks, final)
        scheduler.send_commands()
        scheduler.worker.executor.release()
        scheduler.deliver_acks()
        scheduler.send_commands()  # the tables now point at the host blocks
    return final


def _time_steps(torch: Any, engine: Any, topk: _TopK, requests: list[EngineRequest],
                drift: float, steps: int, warmup: int) -> dict[str, Any]:
    s = engine.shape
    tokens = np.zeros(s.entries, np.int64)
    pos = np.zeros(s.entries, np.int64)
    active = np.zeros(s.entries, bool)
    for slot, r in enumerate(requests):
        base = slot * s.per_slot
        tokens[base : base + s.per_slot] = r.prompt[-1]
        pos[base : base + s.per_slot] = np.arange(r.prefill_len, r.prefill_len + s.per_slot)
        active[base : base + s.per_slot] = True
    for _ in range(warmup):  # the hot rows settle on this drift
        with torch.cuda.stream(engine.stream):
            topk.drift(drift)
        engine.run(tokens, pos, active)
    counts = np.zeros(3, np.int64)
    times = []
    for _ in range(steps):
        with torch.cuda.stream(engine.stream):
            topk.drift(drift)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(
                enable_timing=True)
            start.record()
            engine.launch()
            end.record()
        engine.stream.synchronize()
        times.append(start.elapsed_time(end) * 1000.0)
        counts += engine.packed[-3:].cpu().numpy()
    total = int(counts.sum())
    return {"drift": drift, "step_us": statistics.median(times), "step_us_min": min(times),
            "resident_hits": int(counts[0]), "hot_hits": int(counts[1]),
            "misses": int(counts[2]), "miss_rate": float(counts[2] / total) if total else 0.0}


def run(
    batches: tuple[int, ...] = (1, 32, 128), contexts: tuple[int, ...] = (32768, 131072),
    drifts: tuple[float, ...] = (0.001, 0.01, 0.05), steps: int = 30, warmup: int = 10,
    budget_gib: float = 40.0, top_k: int = 2048, progress: bool = True,
) -> dict[str, Any]:
    from hisparse.executor.cuda.backend import load_cupy

    load_cupy()  # no GPU: CudaUnavailable before anything is built
    torch = load_torch()

    from hisparse.engine.lockstep import hisparse_engine, resident_engine
    from hisparse.engine.model import Model

    ms = bench_model()
    model = Model(ms, torch.device("cuda:0"))
    doc: dict[str, Any] = {
        "environment": {**environment(), "torch": torch.__version__},
        "model": {k: getattr(ms, k) for k in ("layers", "index_leaders", "hidden", "heads",
                                              "vocab", "index_heads", "index_dim")},
        "top_k": top_k, "steps": steps, "warmup": warmup, "runs": [], "capacity": [],
    }
    for context in contexts:
        max_new = warmup * len(drifts) + 64
        max_context = -(-(context + max_new + 64) // 1024) * 1024
        for batch in batches:
            shape = EngineShape(slots=batch, max_context=max_context, top_k=top_k)
            reqs = synthetic_requests(shape, vocab=ms.vocab, count=batch, context=context,
                                      max_new=max_new)
            pages = pages_needed(context, max_new, shape)
            for kind in ("resident", "hisparse"):
                t0 = time.perf_counter()
                sched = None
                if kind == "resident":
                    engine = resident_engine(model, shape, graph=True, topk="given")
                else:
                    gpu_blocks = pages + batch * (TAIL_PAGES + 1)
                    engine, sched = hisparse_engine(
                        model, shape, gpu_blocks=gpu_blocks, host_blocks=batch * pages + 16,
                        graph=True, topk="given")
                _fill(engine, sched, reqs)
                with torch.cuda.stream(engine.stream):
                    topk = _TopK(torch, engine, [r.prefill_len for r in reqs], seed=batch)
                setup = time.perf_counter() - t0
                for drift in drifts:
                    row = _time_steps(torch, engine, topk, reqs, drift, steps, warmup)
                    row.update(engine=kind, batch=batch, context=context,
                               kv_hbm_bytes=engine.kv_nbytes, setup_s=setup,
                               spills=sched.coordinator.spills if sched else 0)
                    doc["runs"].append(row)
                    if progress:
                        print(f"{kind:8} B={batch:<4} ctx={context:<7} drift={drift:<6} "
                              f"step {row['step_us']:9.1f} µs  miss {row['miss_rate']:.4%}  "
                              f"KV {engine.kv_nbytes / GIB:6.2f} GiB  (setup {setup:.0f} s)",
                              flush=True)
                del engine, sched, topk
                _release(torch)
        doc["capacity"].append(capacity(ms, EngineShape(
            slots=1, max_context=max_context, top_k=top_k), context, budget_gib))
    doc["summary"] = summarize(doc["runs"])
    return doc


def _release(torch: Any) -> None:
    from hisparse.executor.cuda.backend import load_cupy

    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    load_cupy().get_default_memory_pool().free_all_blocks()


def summarize(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """HiSparse against all-resident for each (batch, context, drift)."""
    by = {(r["engine"], r["batch"], r["context"], r["drift"]): r for r in runs}
    out = []
    for (kind, b, c, d), hs in by.items():
        if kind != "hisparse" or ("resident", b, c, d) not in by:
            continue
        res = by[("resident", b, c, d)]
        out.append({"batch": b, "context": c, "drift": d, "miss_rate": hs["miss_rate"],
                    "resident_us": res["step_us"], "hisparse_us": hs["step_us"],
                    "overhead": hs["step_us"] / res["step_us"] - 1.0,
                    "resident_kv_gib": res["kv_hbm_bytes"] / GIB,
                    "hisparse_kv_gib": hs["kv_hbm_bytes"] / GIB})
    return out


def plot(doc: dict[str, Any], path: str) -> None:
    """Step time and KV HBM against context length, both engines, one line per batch."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    drift = 0.01 if any(r["drift"] == 0.01 for r in doc["runs"]) else doc["runs"][0]["drift"]
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 4.2))
    for kind, style in (("resident", "--"), ("hisparse", "-")):
        for b in sorted({r["batch"] for r in doc["runs"]}):
            rows = sorted((r for r in doc["runs"] if r["engine"] == kind and r["batch"] == b
                           and r["drift"] == drift), key=lambda r: r["context"])
            xs = [r["context"] / 1024 for r in rows]
            ax_t.plot(xs, [r["step_us"] / 1000 for r in rows], style, marker="o",
                      label=f"{kind} B={b}")
            ax_m.plot(xs, [r["kv_hbm_bytes"] / GIB for r in rows], style, marker="o",
                      label=f"{kind} B={b}")
    ax_t.set(xlabel="context (k tokens)", ylabel="decode step (ms)",
             title=f"step time (top-K drift {drift:.0%})")
    ax_m.set(xlabel="context (k tokens)", ylabel="KV HBM (GiB)", title="HBM used by KV",
             yscale="log")
    for ax in (ax_t, ax_m):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
