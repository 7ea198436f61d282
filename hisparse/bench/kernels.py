"""``hisparse bench engine-kernels``: the decode step's per-request kernels, A/B on the GPU.

Two kernels carry a step's cost per request at DeepSeek-V3.2 geometry: sparse MLA
attention over the 2048 selected rows and the FP8 indexer scan over every position.
This times each variant on the same inputs in one run (CUDA events, median of
``reps``): attention by the torch path (gather, dequantize, two batched products) and the
fused kernel at several tilings, with its error against the torch path; the scan at
several tiles per program and warps, with bf16 and FP8 queries, against the same run's
device copy of the same bytes (the HBM ceiling a scan that reads each key once can
approach). Times are device time per call in a CUDA graph, as the step replays them.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from functools import partial
from typing import Any

from hisparse.bench.gpu import environment
from hisparse.engine.backend import load_torch
from hisparse.engine.tiling import FusedTiling

TILINGS = (
    FusedTiling(), FusedTiling(rows=64), FusedTiling(rows=16), FusedTiling(heads=32),
    FusedTiling(heads=32, warps=8), FusedTiling(heads=32, rows=64, warps=8),
    FusedTiling(heads=64, rows=16, warps=8), FusedTiling(heads=64, rows=32, warps=8),
    FusedTiling(stages=3), FusedTiling(stages=1), FusedTiling(max_split=32),
    FusedTiling(heads=32, max_split=32),
)
GRAPH_CALLS = 10
SCAN_VARIANTS = ((1, 4), (2, 4), (4, 4), (1, 8), (4, 8))
"""(tiles per program, warps) of the FP8 scan."""


def _time(torch: Any, fn: Callable[[], Any], reps: int) -> float:
    """Median device µs of one ``fn``, captured in a CUDA graph of ``GRAPH_CALLS`` calls
    and replayed (as the decode step replays it: no host launch cost in the figure)."""
    fn()  # compile and warm up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(GRAPH_CALLS):
            fn()
    graph.replay()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / GRAPH_CALLS)
    del graph
    return float(statistics.median(times))


def attention(torch: Any, batches: tuple[int, ...], reps: int) -> list[dict[str, Any]]:
    from hisparse.engine.attention import latent_fused, latent_torch
    from hisparse.engine.kvrow import as_words, gather_rows, pack_rows

    dev = torch.device("cuda:0")
    gen = torch.Generator(device=dev).manual_seed(5)
    h, k, scale = 128, 2048, 192 ** -0.5
    out = []
    for e in batches:
        r = 2 * e * k
        words = as_words(pack_rows(torch.randn(r, 512, generator=gen, device=dev),
                                   torch.randn(r, 64, generator=gen, device=dev)))
        rows = torch.randint(0, r, (e, k), generator=gen, device=dev, dtype=torch.int32)
        rows[:, :16] = -1
        q = (torch.randn(e, h, 576, generator=gen, device=dev) * 0.2).to(torch.bfloat16)
        ref = latent_torch(q, words, rows, scale).float()
        row: dict[str, Any] = {
            "entries": e, "heads": h, "top_k": k, "row_bytes": 656,
            "gather_us": _time(torch, partial(gather_rows, words, rows), reps),
            "torch_us": _time(torch, partial(latent_torch, q, words, rows, scale), reps),
            "fused": [],
        }
        for t in TILINGS:
            try:
                us = _time(torch, partial(latent_fused, q, words, rows, scale, t), reps)
                got = latent_fused(q, words, rows, scale, t).float()
                err = float((got - ref).abs().max() / ref.abs().max())
            except Exception as exc:  # a tiling the compiler refuses is a result, not a crash
                row["fused"].append({"tiling": t.__dict__, "error": str(exc)[:200]})
                continue
            row["fused"].append({"tiling": t.__dict__, "us": us, "us_per_entry": us / e,
                                 "max_rel_err": err, "vs_torch": row["torch_us"] / us})
        ok = [f for f in row["fused"] if "us" in f]
        row["best"] = min(ok, key=lambda f: f["us"]) if ok else None
        out.append(row)
        best = row["best"]
        print(f"attention E={e}: gather {row['gather_us']:.1f} µs, torch {row['torch_us']:.1f}"
              f" µs, fused best {best['us'] if best else float('nan'):.1f} µs "
              f"({best['tiling'] if best else '-'})", flush=True)
    return out


def scan(torch: Any, batches: tuple[int, ...], t: int, reps: int) -> list[dict[str, Any]]:
    from hisparse.engine.indexer import quantize_keys, quantize_queries, scores_fused

    dev = torch.device("cuda:0")
    gen = torch.Generator(device=dev).manual_seed(6)
    out = []
    for e in batches:
        q = torch.randn(e, 64, 128, generator=gen, device=dev).to(torch.bfloat16)
        w = torch.randn(e, 64, generator=gen, device=dev)
        bits, sc = quantize_keys(torch.randn(e * t, 128, generator=gen, device=dev)
                                 .to(torch.bfloat16))
        bits, sc = bits.view(e, t, 128), sc.view(e, t)
        pos = torch.full((e,), t - 1, device=dev, dtype=torch.int64)
        nbytes = e * t * 132
        src = torch.empty(nbytes, dtype=torch.uint8, device=dev)
        dst = torch.empty_like(src)
        copy_us = _time(torch, partial(dst.copy_, src), reps)
        q8, w8 = quantize_queries(q, w)
        ref = scores_fused(q, w, bits, sc, pos, 1, tiles=1)
        row: dict[str, Any] = {"entries": e, "positions": t, "key_bytes": nbytes,
                               "copy_us": copy_us,
                               "copy_GBps": 2 * nbytes / copy_us / 1e3, "variants": []}
        for tiles, warps in SCAN_VARIANTS:
            us = _time(torch, partial(scores_fused, q, w, bits, sc, pos, 1, tiles=tiles,
                                      warps=warps), reps)
            same = bool(torch.equal(scores_fused(q, w, bits, sc, pos, 1, tiles=tiles,
                                                 warps=warps), ref))
            row["variants"].append({"tiles": tiles, "warps": warps, "us": us,
                                    "key_GBps": nbytes / us / 1e3,
                                    "us_per_entry": us / e, "equal_to_tiles_1": same})
            us8 = _time(torch, partial(scores_fused, q8, w8, bits, sc, pos, 1, tiles=tiles,
                                       warps=warps), reps)
            row["variants"].append({"tiles": tiles, "warps": warps, "fp8_queries": True,
                                    "us": us8, "key_GBps": nbytes / us8 / 1e3,
                                    "us_per_entry": us8 / e})
        row["best"] = min((v for v in row["variants"] if not v.get("fp8_queries")),
                          key=lambda v: v["us"])
        out.append(row)
        for b in (row["best"], min((v for v in row["variants"] if v.get("fp8_queries")),
                                   key=lambda v: v["us"])):
            print(f"scan E={e} T={t}: copy {row['copy_GBps']:.0f} GB/s (read+write); best "
                  f"tiles={b['tiles']} warps={b['warps']} fp8 q={b.get('fp8_queries', False)}"
                  f" {b['us']:.1f} µs, {b['key_GBps']:.0f} GB/s of keys", flush=True)
    return out


def run(batches: tuple[int, ...] = (1, 8, 32), scan_batches: tuple[int, ...] = (1, 8, 32),
        positions: int = 132096, reps: int = 20) -> dict[str, Any]:
    torch = load_torch()
    with torch.cuda.stream(torch.cuda.Stream()):
        doc = {"environment": {**environment(), "torch": torch.__version__},
               "attention": attention(torch, batches, reps),
               "scan": scan(torch, scan_batches, positions, reps)}
    return doc
