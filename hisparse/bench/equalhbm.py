"""``hisparse bench equal-hbm``: decode tokens/s at equal HBM, by allocation, V3.2 geometry.

For each index sharing (DeepSeek-V3.2: every layer owns its indexer; GLM-5.2: followers
replay a leader's plan) and context length, in one HBM budget:

1. The model's weights are built and both engines are warmed up (kernels compiled,
   library workspaces made); then a ballast tensor takes all free device memory but the
   budget, so the budget is everything an engine allocates beyond the weights: KV rows,
   pools, hot rows, tail pages, LRU state, indexer keys, page tables, resolver buffers,
   the captured step's workspace and a prefill chunk's temporaries.
2. Each engine's largest batch is searched (``allocsearch.largest_fit``, from the
   capacity arithmetic's guess): a probe builds the engine at that batch (every device
   allocation, graph captured), runs one prefill chunk's projections and one step, and
   counts as fitting when nothing ran out of memory. A HiSparse probe's pinned host pool
   is 16 blocks (pinned host memory takes no HBM); the measured run allocates it whole.
   HiSparse's batch is also bounded by the host memory it may pin (``host_gib``: the
   pool holds every spilled page of every request), by arithmetic: the smaller of the
   two bounds is its largest batch, and the report names which one bound it.
3. At a few batches up to each engine's largest, the engine is built again, every
   request admitted and prefilled (token-local projections of random prompts: synthetic
   KV; HiSparse spills every complete page to pinned host memory as the engine loop
   does), and the captured step is timed (CUDA events, median) at a top-K drift
   (``bench engine``'s synthetic top-K; the indexer still runs). tokens/s = batch / step.

The ballast stays in place for every measured run, so each ran inside the budget.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

from hisparse.bench.allocsearch import largest_fit
from hisparse.bench.engine import (
    GIB,
    TAIL_PAGES,
    _fill,
    _time_steps,
    _TopK,
    capacity,
)
from hisparse.bench.gpu import environment
from hisparse.engine.backend import load_torch
from hisparse.engine.config import ROW_BYTES, EngineShape, ModelShape
from hisparse.engine.geometry import v32_model
from hisparse.engine.tiling import SCAN_TILES, FusedTiling
from hisparse.engine.workload import pages_needed, synthetic_requests

PREFILL_CHUNK = 2048
"""Prompt positions per prefill launch here by default (its temporaries count against
the budget; a larger chunk costs fewer launches: the fill of a 128k request at 2048 is
about 1 s of Python launching small kernels, and the budget pays the chunk's temporaries
in both engines alike)."""
PROBE_HOST_BLOCKS = 16
HOST_EXTRA_BLOCKS = 16
"""Host blocks beyond every request's pages in a measured run's pool."""
CURVES = ("full", "largest")


def max_context_for(context: int, max_new: int) -> int:
    return -(-(context + max_new + 64) // 1024) * 1024


def guess(model: ModelShape, shape: EngineShape, context: int, budget_gib: float,
          kind: str) -> int:
    """The capacity arithmetic's batch (KV structures only: the search corrects it)."""
    cap = capacity(model, shape, context, budget_gib)
    return max(1, int(cap["resident_max_batch" if kind == "resident" else
                          "hisparse_max_batch"]))


def host_blocks_for(batch: int, pages: int) -> int:
    """A measured HiSparse run's host pool: every page of every request, and a margin."""
    return batch * pages + HOST_EXTRA_BLOCKS


def host_pool_bytes(model: ModelShape, shape: EngineShape, blocks: int) -> int:
    """Pinned bytes of a host pool of ``blocks`` (a block holds its rows of every layer)."""
    return blocks * shape.block_tokens * ROW_BYTES * model.layers


def host_largest(model: ModelShape, shape: EngineShape, context: int, max_new: int,
                 host_gib: float) -> int:
    """The largest batch whose measured run's host pool fits in ``host_gib`` (0: none)."""
    pages = pages_needed(context, max_new, shape)
    per = host_pool_bytes(model, shape, pages)
    extra = host_pool_bytes(model, shape, HOST_EXTRA_BLOCKS)
    return max(0, (int(host_gib * GIB) - extra) // per)


def measure_attempts(batch: int) -> list[int]:
    """Batches a measured run tries, largest first: the probe's answer, one below, then
    2% and 4% below (a fill's temporaries can need a little more than a probe's)."""
    out = [batch, batch - 1, batch - max(2, batch // 50), batch - max(3, batch // 25)]
    return sorted({b for b in out if b >= 1}, reverse=True)


def curve_batches(kind: str, largest: int, resident_largest: int, curve: str = "full"
                  ) -> list[int]:
    """Batches to time: 1 and the largest; all-resident also half its largest, HiSparse
    also all-resident's largest (the same batch in both engines). ``curve="largest"``:
    the largest alone (large budgets, where each fill costs minutes)."""
    if curve not in CURVES:
        raise ValueError(f"curve must be one of {CURVES}, got {curve!r}")
    if curve == "largest":
        return [largest] if largest >= 1 else []
    want = {1, largest}
    want.add(max(1, largest // 2) if kind == "resident" else min(resident_largest, largest))
    return sorted(b for b in want if b >= 1)


class _Bench:
    def __init__(self, torch: Any, cupy: Any, model: Any, context: int, steps: int,
                 warmup: int, drift: float, top_k: int,
                 prefill_chunk: int = PREFILL_CHUNK) -> None:
        self.torch, self.cupy, self.model = torch, cupy, model
        self.prefill_chunk = prefill_chunk
        self.context, self.steps, self.warmup, self.drift = context, steps, warmup, drift
        self.max_new = warmup + steps + 16
        self.max_context = max_context_for(context, self.max_new)
        self.top_k = top_k
        self.stream = torch.cuda.Stream(device=model.device)  # one for every engine here

    def shape(self, batch: int) -> EngineShape:
        return EngineShape(slots=batch, max_context=self.max_context, top_k=self.top_k)

    def build(self, kind: str, batch: int, host_blocks: int | None) -> tuple[Any, Any]:
        from hisparse.engine.lockstep import hisparse_engine, resident_engine

        shape = self.shape(batch)
        if kind == "resident":
            eng = resident_engine(self.model, shape, graph=True, topk="given",
                                  stream=self.stream)
            sched = None
        else:
            pages = pages_needed(self.context, self.max_new, shape)
            eng, sched = hisparse_engine(
                self.model, shape, gpu_blocks=pages + batch * (TAIL_PAGES + 1),
                host_blocks=(host_blocks if host_blocks is not None
                             else host_blocks_for(batch, pages)),
                graph=True, topk="given", stream=self.stream)
        eng.prefill_chunk = self.prefill_chunk
        return eng, sched

    def release(self) -> None:
        gc.collect()
        self.torch.cuda.synchronize()
        self.torch.cuda.empty_cache()
        self.cupy.get_default_memory_pool().free_all_blocks()

    def is_oom(self, exc: BaseException) -> bool:
        oom = (self.torch.cuda.OutOfMemoryError, self.cupy.cuda.memory.OutOfMemoryError)
        return isinstance(exc, oom) or "out of memory" in str(exc).lower()

    def probe(self, kind: str) -> Callable[[int], bool]:
        def fits(batch: int) -> bool:
            ok = False
            try:
                ok = self._probe_once(kind, batch)
            except Exception as exc:  # only memory exhaustion is a "no"
                if not self.is_oom(exc):
                    raise
            self.release()  # after the except: its traceback held the engine
            return ok

        return fits

    def _probe_once(self, kind: str, batch: int) -> bool:
        """Build at ``batch`` (graph captured), run a prefill chunk's projections and one
        step; True unless something ran out of memory (which raises)."""
        torch, m = self.torch, self.model
        eng, sched = self.build(kind, batch, PROBE_HOST_BLOCKS)
        with torch.cuda.stream(eng.stream):
            p = torch.arange(self.prefill_chunk, device=m.device)
            m.prefill_rows(0, p % m.shape.vocab, p)
            m.prefill_keys(0, p % m.shape.vocab, p)
        eng.launch()
        eng.stream.synchronize()
        del eng, sched
        return True

    def measure(self, kind: str, batch: int) -> dict[str, Any]:
        torch = self.torch
        t0 = time.perf_counter()
        eng, sched = self.build(kind, batch, None)
        reqs = synthetic_requests(self.shape(batch), vocab=self.model.shape.vocab,
                                  count=batch, context=self.context, max_new=self.max_new)
        _fill(eng, sched, reqs)
        with torch.cuda.stream(eng.stream):
            topk = _TopK(torch, eng, [r.prefill_len for r in reqs], seed=batch)
        setup = time.perf_counter() - t0
        row = _time_steps(torch, eng, topk, reqs, self.drift, self.steps, self.warmup)
        row.update(engine=kind, batch=batch, context=self.context, setup_s=setup,
                   kv_hbm_bytes=eng.kv_nbytes, tokens_per_s=batch * 1e6 / row["step_us"],
                   spills=sched.coordinator.spills if sched else 0,
                   host_pool_bytes=(host_pool_bytes(self.model.shape, self.shape(batch),
                                                    sched.config.host_pool_blocks)
                                    if sched else 0))
        row["profile"] = self._profile(eng)
        del eng, sched, topk
        self.release()
        return row

    def try_measure(self, kind: str, batch: int) -> dict[str, Any] | None:
        """``measure``, or None when it ran out of memory; the failed run's memory is
        freed only once its exception (whose traceback holds the engine) is gone."""
        failed = False
        try:
            return self.measure(kind, batch)
        except Exception as exc:
            if not self.is_oom(exc):
                raise
            failed = True
        finally:
            if failed:
                self.release()
        return None

    def _profile(self, eng: Any, top: int = 12) -> list[dict[str, Any]]:
        """Device time per kernel name over 3 replays of the captured step."""
        torch = self.torch
        from torch.profiler import ProfilerActivity, profile

        eng.stream.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                eng.launch()
            eng.stream.synchronize()
        torch.cuda.synchronize()
        rows = []
        for ev in prof.key_averages():
            us = getattr(ev, "device_time_total", None)
            if us is None:
                us = getattr(ev, "cuda_time_total", 0.0)
            if us:
                rows.append({"kernel": ev.key[:120], "us_per_step": us / 3.0,
                             "calls_per_step": ev.count / 3.0})
        rows.sort(key=lambda r: -r["us_per_step"])
        return rows[:top]


def run(
    budget_gib: float = 6.0, contexts: tuple[int, ...] = (131072, 32768),
    sharings: tuple[str, ...] = ("v3.2", "glm-5.2"), layers: int = 8, drift: float = 0.008,
    steps: int = 20, warmup: int = 8, top_k: int = 2048, same_batch: bool = True,
    on_config: Callable[[dict[str, Any]], None] | None = None, attention: str = "fused",
    tiling: FusedTiling | None = None, scan_tiles: int | None = None,
    host_gib: float | None = None, prefill_chunk: int = PREFILL_CHUNK, curve: str = "full",
) -> dict[str, Any]:
    from hisparse.executor.cuda.backend import load_cupy

    cupy = load_cupy()
    torch = load_torch()
    from hisparse.engine.model import Model

    doc: dict[str, Any] = {
        "environment": {**environment(), "torch": torch.__version__},
        "budget_gib": budget_gib, "layers": layers, "drift": drift, "steps": steps,
        "warmup": warmup, "top_k": top_k, "configs": [], "attention": attention,
        "tiling": tiling.__dict__ if tiling is not None else "pick_tiling by the batch",
        "scan_tiles": scan_tiles if scan_tiles is not None else SCAN_TILES,
        "host_gib": host_gib, "prefill_chunk": prefill_chunk, "curve": curve,
    }
    if curve not in CURVES:
        raise ValueError(f"curve must be one of {CURVES}, got {curve!r}")
    dev = torch.device("cuda:0")
    model: Any = None
    for context, sharing in [(c, sh) for c in contexts for sh in sharings]:
        ms = v32_model(layers, sharing)
        if model is None or model.shape != ms:  # one model's weights at a time
            model = None
            gc.collect()
            torch.cuda.empty_cache()
            model = Model(ms, dev, attention=attention, tiling=tiling,
                          scan_tiles=scan_tiles)
        b = _Bench(torch, cupy, model, context, steps, warmup, drift, top_k, prefill_chunk)
        cfg: dict[str, Any] = {
            "sharing": sharing, "context": context, "index_leaders": ms.index_leaders,
            "weight_bytes": ms.weight_bytes(), "max_context": b.max_context,
            "runs": [], "search": {}, "measure_oom": [],
        }
        doc["configs"].append(cfg)
        t0 = time.perf_counter()
        for kind in ("resident", "hisparse"):  # warm-up: compile, library workspaces
            b.probe(kind)(1)
        free = torch.cuda.mem_get_info()[0]
        budget = int(budget_gib * GIB)
        if budget > free:
            raise RuntimeError(f"budget {budget_gib} GiB is over the {free / GIB:.1f} "
                               "GiB free after the weights")
        ballast = torch.empty(free - budget, dtype=torch.uint8, device=dev)
        cfg["free_after_weights_bytes"] = free
        cfg["ballast_bytes"] = ballast.numel()
        cfg["free_under_ballast_bytes"] = torch.cuda.mem_get_info()[0]
        largest: dict[str, int] = {}
        for kind in ("resident", "hisparse"):
            g = guess(ms, b.shape(1), context, budget_gib, kind)
            found = largest_fit(b.probe(kind), guess=g, limit=max(4 * g, g + 64))
            largest[kind] = found.batch
            cfg["search"][kind] = {"guess": g, "largest": found.batch, "hbm_largest":
                                   found.batch, "bound": "hbm", "probes": found.probes}
            if kind == "hisparse" and host_gib is not None:
                by_host = host_largest(ms, b.shape(1), context, b.max_new, host_gib)
                cfg["search"][kind]["host_largest"] = by_host
                if by_host < found.batch:
                    largest[kind] = by_host
                    cfg["search"][kind].update(largest=by_host, bound="host")
            print(f"{sharing} ctx={context} {kind}: guess {g}, largest {largest[kind]} "
                  f"(bound by {cfg['search'][kind]['bound']}; HBM alone {found.batch}, "
                  f"{len(found.probes)} probes)", flush=True)

        def record(row: dict[str, Any], note: str = "", cfg: dict[str, Any] = cfg,
                   largest: dict[str, int] = largest, ms: ModelShape = ms) -> None:
            cfg["runs"].append(row)
            print(f"  {row['engine']:8} B={row['batch']:<4} step {row['step_us']:9.1f} µs"
                  f"  {row['tokens_per_s']:9.1f} tok/s  miss {row['miss_rate']:.3%}  KV "
                  f"{row['kv_hbm_bytes'] / GIB:5.2f} GiB (setup {row['setup_s']:.0f} s)"
                  f"{note}", flush=True)
            cfg["summary"] = summarize(cfg, largest, len(ms.leaders))
            if on_config is not None:  # after every run: a cut-off bench keeps what ran
                on_config(doc)

        for kind in ("resident", "hisparse"):
            for batch in curve_batches(kind, largest[kind], largest["resident"], curve):
                was_largest = batch == largest[kind]
                for attempt in measure_attempts(batch):
                    row = b.try_measure(kind, attempt)
                    if row is not None:
                        if was_largest:  # the largest batch a measured run held
                            largest[kind] = attempt
                        record(row)
                        break
                    cfg["measure_oom"].append({"engine": kind, "batch": attempt})
                    print(f"  {kind} B={attempt}: out of memory in the measured run",
                          flush=True)
                else:
                    if was_largest:
                        largest[kind] = 0  # none measured: no ratio is claimed
        del ballast
        b.release()
        if same_batch:  # all-resident at HiSparse's largest batch, budget lifted
            have = {(r["engine"], r["batch"]) for r in cfg["runs"]}
            if ("resident", largest["hisparse"]) not in have:
                row = b.measure("resident", largest["hisparse"])
                row["outside_budget"] = True
                record(row, " (outside the budget)")
        cfg["summary"] = summarize(cfg, largest, len(ms.leaders))
        cfg["seconds"] = time.perf_counter() - t0
        print(f"  => {cfg['summary']['headline']}", flush=True)
        if on_config is not None:
            on_config(doc)
        same_batch = False  # the resolver figures once (first config)
    return doc


def summarize(cfg: dict[str, Any], largest: dict[str, int], leaders: int) -> dict[str, Any]:
    """Each engine at its own largest batch, the ratio, and the resolver per leader."""
    runs = {(r["engine"], r["batch"]): r for r in cfg["runs"]}
    res = runs.get(("resident", largest["resident"]))
    hs = runs.get(("hisparse", largest["hisparse"]))
    out: dict[str, Any] = {"resident_largest": largest["resident"],
                           "hisparse_largest": largest["hisparse"],
                           "hisparse_bound": cfg["search"].get("hisparse", {}).get("bound")}
    if res and hs:
        out.update(resident_tokens_per_s=res["tokens_per_s"],
                   hisparse_tokens_per_s=hs["tokens_per_s"],
                   ratio=hs["tokens_per_s"] / res["tokens_per_s"],
                   hisparse_miss_rate=hs["miss_rate"])
        out["headline"] = (f"resident B={largest['resident']} {res['tokens_per_s']:.0f} tok/s,"
                           f" HiSparse B={largest['hisparse']} {hs['tokens_per_s']:.0f} "
                           f"tok/s: {out['ratio']:.2f}x"
                           + (" (HiSparse bound by host memory)"
                              if out["hisparse_bound"] == "host" else ""))
    else:
        out["headline"] = "no largest-batch pair measured"
    marginal = []
    for (kind, batch), r in sorted(runs.items()):
        other = runs.get(("resident", batch))
        if kind == "hisparse" and other is not None:
            marginal.append({"batch": batch, "resident_us": other["step_us"],
                             "hisparse_us": r["step_us"],
                             "per_leader_us": (r["step_us"] - other["step_us"]) / leaders,
                             "share_of_step": r["step_us"] / other["step_us"] - 1.0,
                             "miss_rate": r["miss_rate"]})
    out["resolver_marginal"] = marginal
    return out


def plot(doc: dict[str, Any], path: str) -> None:
    """tokens/s against batch, both engines, one panel per (sharing, context)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cfgs = doc["configs"]
    fig, axes = plt.subplots(1, len(cfgs), figsize=(4.2 * len(cfgs), 3.8), squeeze=False)
    for ax, cfg in zip(axes[0], cfgs, strict=True):
        for kind, style in (("resident", "--s"), ("hisparse", "-o")):
            rows = sorted((r for r in cfg["runs"] if r["engine"] == kind
                           and not r.get("outside_budget")), key=lambda r: r["batch"])
            ax.plot([r["batch"] for r in rows], [r["tokens_per_s"] for r in rows], style,
                    label=f"{kind} (largest {cfg.get('summary', {}).get(kind + '_largest')})")
        ratio = cfg.get("summary", {}).get("ratio")
        ax.set(xlabel="batch (requests)", ylabel="decode tokens/s",
               title=f"{cfg['sharing']} {cfg['context'] // 1024}k"
                     + (f": {ratio:.2f}x" if ratio else ""))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"equal HBM: {doc['budget_gib']:g} GiB beyond the weights, "
                 f"{doc['layers']} layers, V3.2 geometry", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
