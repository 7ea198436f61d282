"""``hisparse bench resolver``: the fused resolver against its ceilings and a baseline.

For each batch size and miss rate, from the same primed hot state and the same inputs:

- ``fused``: one ``hisparse_resolve`` launch (``CudaExecutor.launch_resolve``);
- ``gather``: a plain zero-copy gather of the same missing rows (the same host rows into
  the same hot rows), one 16-byte vector per thread: the ceiling for the copy part;
- ``torch``: the same resolver semantics written as unfused torch operations (sort,
  searchsorted, unique, argsort, index copies), checked to produce the same rows, plan
  and tags as the fused kernel;
- ``gather_sorted``: the same gather with the step's rows in host-address order (every
  entry's copies sorted together): the ceiling of address locality;
- ``fused_unsorted``: the fused kernel built never to sort (each entry's misses copied in
  plan order instead of host-row order), at the miss-heavy shapes where it would sort;
- ``bulk_h2d``: one large pinned host-to-device copy, the PCIe ceiling.

Host rows are placed per ``placements``: ``random`` (anywhere in a pool of at least 2M
rows), ``request`` (each request's context in its own contiguous run of host blocks, as
the coordinator's lowest-free-block allocator leaves a request whose pages spill
together into a fresh pool) or ``interleaved`` (page j of request b in block j * B + b,
as when every running request spills one page per round). Misses are random positions
of a ``context``-token context.

Shape: every slot's H hot rows hold positions; each entry's top-K has ``miss_rate * K``
positions that are not hot (read from random host rows, different in every repetition)
and the rest hot; nothing resident, so every position takes the lookup path.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np

from hisparse.bench.gpu import GpuTimer, environment
from hisparse.executor.cuda import CudaExecutor, ResolveBuffers
from hisparse.executor.cuda.backend import load_cupy
from hisparse.executor.cuda.kernels import RESOLVE_THREADS, SORT_MIN_BATCH, compile_kernels
from hisparse.executor.layout import PoolLayout

VARIANTS = 8  # distinct host-row sets cycled through the repetitions
PLACEMENTS = ("random", "request", "interleaved")
BLOCK = 64  # tokens per host block
PHASES = ("classify and look up", "rank misses", "pick victims", "assign",
          "repeats and counters", "commit LRU order", "copy misses")


def phases(cupy: Any, ex: CudaExecutor, pools: Any, buffers: ResolveBuffers,
           restore: Any, timer: GpuTimer) -> dict[str, float]:
    """Microseconds per resolver phase of the block deciding entry 0, in a
    ``-DHISPARSE_PROFILE`` build, launched like the timed runs (after an L2 flush)."""
    shape = pools.shape
    assert shape is not None
    prof = compile_kernels(
        ex.device_id, (*ex.defines(pools.layout.hot_rows), "-DHISPARSE_PROFILE")
    )
    prof.resolve.max_dynamic_shared_size_bytes = shape.smem
    plain, ex.resolvers[shape] = ex.resolvers[shape], prof.resolve
    try:
        restore(0)
        if timer.flush.size:
            timer.flush.fill(0)
        ex.launch_resolve(pools, buffers)
        cupy.cuda.get_current_stream().synchronize()
    finally:
        ex.resolvers[shape] = plain
    ptr = prof.module.get_global("hisparse_prof")
    stamps = cupy.ndarray((16,), dtype=cupy.int64, memptr=ptr).get()
    khz = cupy.cuda.runtime.deviceGetAttribute(cupy.cuda.runtime.cudaDevAttrClockRate, 0)
    return {name: float(stamps[i + 1] - stamps[i]) / khz * 1000.0
            for i, name in enumerate(PHASES)}


def floors(cupy: Any, ex: CudaExecutor, pools: Any, buffers: ResolveBuffers,
           restore: Any, timer: GpuTimer, reps: int) -> dict[str, float]:
    """What a launch costs before it decides anything, timed like the fused launch:
    ``launch``, a kernel that does nothing with the resolver's grid, block and shared
    memory; ``claim``, the resolver built with ``-DHS_FLOOR_CLAIM`` (each block claims
    the pools, draws its ticket and releases them: the launch-safety protocol alone)."""
    shape = pools.shape
    assert shape is not None
    n = buffers.topk.shape[0]
    grid = n + max(0, ex.sms - n)  # as CudaExecutor._launch
    timer.idle.max_dynamic_shared_size_bytes = shape.smem
    launch = timer.time(
        lambda i: timer.idle((grid,), (RESOLVE_THREADS,), (), shared_mem=shape.smem), reps=reps)
    floor = compile_kernels(
        ex.device_id, (*ex.defines(pools.layout.hot_rows), "-DHS_FLOOR_CLAIM"))
    floor.resolve.max_dynamic_shared_size_bytes = shape.smem
    plain, ex.resolvers[shape] = ex.resolvers[shape], floor.resolve

    def launch_floor(i: int) -> None:
        ex.launch_resolve(pools, buffers)

    try:
        claim = timer.time(launch_floor, reps=reps, before=restore)
    finally:
        ex.resolvers[shape] = plain
    return {"launch_us": launch["median_us"], "claim_us": claim["median_us"]}


def _prime(cupy: Any, pools: Any, slots: int, rng: np.random.Generator) -> dict[str, Any]:
    """Every hot row full (positions 0..H-1), distinct older stamps; returns device copies."""
    h = pools.layout.hot_rows
    tag = np.tile(np.arange(h, dtype=np.int64), (slots, 1))
    stamp = np.stack([rng.permutation(h).astype(np.int64) + 1 for _ in range(slots)])
    order = np.argsort(stamp, axis=1, kind="stable").astype(np.int32)
    where = cupy.full(pools.where[:slots].shape, 0x7FFFFFFF, dtype=cupy.int32)
    where[:, :h] = cupy.arange(h, dtype=cupy.int32)  # position p sits in hot row p
    return {"hot_tag": cupy.asarray(tag), "hot_stamp": cupy.asarray(stamp),
            "lru_order": cupy.asarray(order), "where": where}


def _inputs(
    layout: PoolLayout, batch: int, k: int, misses: int, rng: np.random.Generator
) -> np.ndarray:
    """topk [B, K]: ``misses`` positions that are not hot, the rest hot."""
    h = layout.hot_rows
    topk = np.empty((batch, k), np.int32)
    for b in range(batch):
        hits = rng.choice(h, size=k - misses, replace=False)
        miss = h + rng.choice(10 * h, size=misses, replace=False)
        row = np.concatenate([hits, miss])
        rng.shuffle(row)
        topk[b] = row
    return topk


def host_rows(
    placement: str, host_pool_rows: int, batch: int, k: int, context: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """One variant of host rows [B, K] under ``placement`` (see the module docstring):
    distinct rows, each entry's at random token offsets of its own context."""
    if placement == "random":
        rows = rng.choice(host_pool_rows, size=batch * k, replace=False).reshape(batch, k)
        return rows.astype(np.int32)
    tokens = np.stack([rng.choice(context, size=k, replace=False) for _ in range(batch)])
    b = np.arange(batch)[:, None]
    if placement == "request":
        rows = b * context + tokens
    elif placement == "interleaved":
        rows = ((tokens // BLOCK) * batch + b) * BLOCK + tokens % BLOCK
    else:
        raise ValueError(f"placement must be one of {PLACEMENTS}, got {placement!r}")
    assert rows.max() < host_pool_rows
    return rows.astype(np.int32)


def torch_resolve(
    torch: Any, tag: Any, stamp: Any, slots: Any, topk: Any, host_row: Any, host: Any,
    device: Any, step: int, resident_rows: int,
) -> tuple[Any, Any]:
    """The resolver rules for one entry per slot and no resident rows, in torch ops.

    Returns (rows [B, K], plan [m, 2]); updates ``tag``, ``stamp`` and ``device``.
    """
    b, k = topk.shape
    h = tag.shape[1]
    dev = topk.device
    t, st = tag[slots], stamp[slots]
    pos = topk.long()
    sorted_tag, perm = torch.sort(t, dim=1)
    idx = torch.searchsorted(sorted_tag, pos).clamp_(max=h - 1)
    found = (sorted_tag.gather(1, idx) == pos) & (pos >= 0)
    hot_j = perm.gather(1, idx)
    base = resident_rows + slots.long() * h
    rows = torch.where(found, base[:, None] + hot_j, torch.full_like(hot_j, -1))
    ent = torch.arange(b, device=dev)[:, None].expand(b, k)
    st[ent[found], hot_j[found]] = step
    occ = torch.nonzero((pos >= 0) & ~found)  # row-major: entry, then occurrence order
    key = occ[:, 0] * (1 << 32) + pos[occ[:, 0], occ[:, 1]]
    uniq, inv = torch.unique(key, return_inverse=True)
    first = torch.full((uniq.numel(),), k, device=dev, dtype=torch.long)
    first.scatter_reduce_(0, inv, occ[:, 1], reduce="amin")
    ub = uniq >> 32
    order = torch.argsort(ub * k + first)
    ub, first, upos = ub[order], first[order], (uniq & 0xFFFFFFFF)[order]
    counts = torch.bincount(ub, minlength=b)
    rank = torch.arange(ub.numel(), device=dev) - (torch.cumsum(counts, 0) - counts)[ub]
    big = torch.iinfo(torch.long).max
    keyed = torch.where(st == step, big, st * h + torch.arange(h, device=dev))
    victims = torch.argsort(keyed, dim=1)
    j = victims[ub, rank]
    t[ub, j] = upos
    st[ub, j] = step
    dst = base[ub] + j
    src = host_row[ub, first].long()
    device[dst] = host[src]
    where = torch.empty_like(order)
    where[order] = torch.arange(order.numel(), device=dev)
    rows[occ[:, 0], occ[:, 1]] = base[occ[:, 0]] + j[where[inv]]
    tag[slots], stamp[slots] = t, st
    return rows, torch.stack([dst, src], dim=1)


def run(
    batches: tuple[int, ...] = (1, 10, 100, 256),
    miss_rates: tuple[float, ...] = (0.001, 0.2),
    reps: int = 100,
    top_k: int = 2048,
    hot_rows: int = 4096,
    row_bytes: int = 656,
    with_torch: bool = True,
    flush_l2: bool = True,
    placements: tuple[str, ...] = ("random",),
    context: int = 32768,
) -> dict[str, Any]:
    cupy = load_cupy()
    for placement in placements:
        if placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {PLACEMENTS}, got {placement!r}")
    torch: Any = None
    if with_torch:
        torch = importlib.import_module("torch")
    rng = np.random.default_rng(0)
    max_b = max(batches)
    pool_rows = max(1 << 21, 2 * max_b * top_k)
    if set(placements) - {"random"}:
        pool_rows = max(pool_rows, max_b * context)
    layout = PoolLayout(gpu_blocks=1, host_blocks=-(-pool_rows // BLOCK), block_tokens=BLOCK,
                    row_bytes=row_bytes, hot_rows=hot_rows, slots=max_b)
    ex = CudaExecutor(top_k=top_k, max_positions=11 * hot_rows)
    pools = ex.allocate(layout)
    filled = min(layout.host_rows, 1 << 21)  # random bytes where the bench reads most
    pools.host[:filled] = rng.integers(0, 256, (filled, row_bytes), dtype=np.uint8)
    shape_ = pools.shape
    assert shape_ is not None
    plain_kernel = ex.resolvers[shape_]
    unsorted = compile_kernels(
        ex.device_id, (*ex.defines(hot_rows), f"-DSORT_MIN_BATCH={1 << 30}")).resolve
    unsorted.max_dynamic_shared_size_bytes = shape_.smem
    timer = GpuTimer(flush=flush_l2)
    rv = row_bytes // 16
    steps = [1_000_000]

    bulk_bytes = 512 << 20
    bulk_dst = cupy.empty(bulk_bytes, dtype=cupy.uint8)
    bulk_src = pools.host_device.reshape(-1)[:bulk_bytes]
    bulk = timer.time(lambda i: bulk_dst.data.copy_from_device_async(
        bulk_src.data, bulk_bytes, cupy.cuda.get_current_stream()), reps=20)
    bulk_gbps = bulk_bytes / bulk["median_us"] / 1e3
    out: dict[str, Any] = {"environment": environment(), "bulk_h2d": {
        "bytes": bulk_bytes, "median_us": bulk["median_us"], "GBps": bulk_gbps}, "shapes": []}

    for b in batches:
        primed = _prime(cupy, pools, b, rng)
        for rate, placement in [(r, p) for r in miss_rates for p in placements]:
            misses = max(1, round(rate * top_k))
            topk = _inputs(layout, b, top_k, misses, rng)
            variants = [host_rows(placement, layout.host_rows, b, top_k, context, rng)
                        for _ in range(VARIANTS)]
            buffers = ResolveBuffers.allocate(b, top_k)
            buffers.slots[...] = cupy.arange(b, dtype=cupy.int32)
            buffers.topk[...] = cupy.asarray(topk)
            dev_variants = [cupy.asarray(v) for v in variants]

            def restore(i: int, b: int = b, primed: dict[str, Any] = primed,
                        buffers: ResolveBuffers = buffers, dv: list[Any] = dev_variants) -> None:
                pools.hot_tag[:b] = primed["hot_tag"]
                pools.hot_stamp[:b] = primed["hot_stamp"]
                pools.lru_order[:b] = primed["lru_order"]
                pools.where[:b] = primed["where"]
                buffers.host_row[...] = dv[i % VARIANTS]
                steps[0] += 1  # steps only increase on one pools, whatever the repetition
                buffers.step.fill(steps[0])

            def fused_launch(i: int, buffers: ResolveBuffers = buffers) -> None:
                ex.launch_resolve(pools, buffers)

            fused = timer.time(fused_launch, reps=reps, before=restore)
            restore(0)
            ex.launch_resolve(pools, buffers)
            ours = buffers.result.to_host()
            assert ours.misses == b * misses and ours.hot_hits == b * (top_k - misses), (
                "the benchmark's hit/miss mix is not what it claims")
            plans = []
            for v in range(VARIANTS):  # the same copies the fused kernel made, per variant
                restore(v)
                ex.launch_resolve(pools, buffers)
                plans.append(cupy.asarray(buffers.result.plan.to_host()))
            total = ours.misses * rv

            def gather(i: int, plans: list[Any] = plans, total: int = total) -> None:
                timer.gather(((total + 255) // 256,), (256,),
                             (plans[i % VARIANTS], cupy.int64(total), cupy.int32(rv),
                              pools.host_device, pools.device))

            ceiling = timer.time(gather, reps=reps)
            by_address = [p[cupy.argsort(p[:, 1])] for p in plans]

            def gather_sorted(i: int, plans: list[Any] = by_address, total: int = total) -> None:
                gather(i, plans, total)

            ordered = timer.time(gather_sorted, reps=reps)
            miss_bytes = ours.misses * row_bytes
            shape: dict[str, Any] = {
                "batch": b, "top_k": top_k, "hot_rows": hot_rows, "row_bytes": row_bytes,
                "miss_rate": rate, "placement": placement, "context": context,
                "misses": ours.misses, "miss_bytes": miss_bytes,
                "fused_us": fused["median_us"], "fused_min_us": fused["min_us"],
                "fused_GBps": miss_bytes / fused["median_us"] / 1e3,
                "gather_us": ceiling["median_us"],
                "gather_GBps": miss_bytes / ceiling["median_us"] / 1e3,
                "fraction_of_gather": ceiling["median_us"] / fused["median_us"],
                "fraction_of_bulk_h2d": miss_bytes / fused["median_us"] / 1e3 / bulk_gbps,
                "gather_sorted_us": ordered["median_us"],
                "gather_sorted_GBps": miss_bytes / ordered["median_us"] / 1e3,
            }
            if b >= SORT_MIN_BATCH and misses * (row_bytes // 16) > 4 * 1024:  # sorted
                ex.resolvers[shape_] = unsorted
                try:
                    plain = timer.time(fused_launch, reps=reps, before=restore)
                finally:
                    ex.resolvers[shape_] = plain_kernel
                shape["fused_unsorted_us"] = plain["median_us"]
                shape["fused_unsorted_GBps"] = miss_bytes / plain["median_us"] / 1e3
            shape["phases_us"] = phases(cupy, ex, pools, buffers, restore, timer)
            shape["floors_us"] = floors(cupy, ex, pools, buffers, restore, timer, reps)
            if torch is not None and placement == placements[0]:
                shape.update(_torch_baseline(torch, cupy, timer, pools, buffers, restore,
                                             ours, steps, reps=max(10, reps // 5)))
                shape["speedup_vs_torch"] = shape["torch_us"] / fused["median_us"]
            out["shapes"].append(shape)
    return out


def _torch_baseline(
    torch: Any, cupy: Any, timer: GpuTimer, pools: Any, buffers: ResolveBuffers,
    restore: Any, ours: Any, steps: list[int], reps: int,
) -> dict[str, Any]:
    tag = torch.as_tensor(pools.hot_tag, device="cuda")
    stamp = torch.as_tensor(pools.hot_stamp, device="cuda")
    host = torch.as_tensor(pools.host_device, device="cuda")
    device = torch.as_tensor(pools.device, device="cuda")
    slots = torch.as_tensor(buffers.slots, device="cuda").long()
    topk = torch.as_tensor(buffers.topk, device="cuda")
    host_row = torch.as_tensor(buffers.host_row, device="cuda")
    r = pools.layout.resident_rows

    def work(i: int) -> None:
        torch_resolve(torch, tag, stamp, slots, topk, host_row, host, device,
                      steps[0], r)

    restore(0)
    cupy.cuda.get_current_stream().synchronize()
    rows, plan = torch_resolve(torch, tag, stamp, slots, topk, host_row, host, device,
                               steps[0], r)
    torch.cuda.synchronize()
    agrees = bool(np.array_equal(rows.cpu().numpy(), ours.rows)) and bool(
        np.array_equal(plan.cpu().numpy(), ours.plan))
    timed = timer.time(work, reps=reps, before=restore, warmup=2)
    return {"torch_us": timed["median_us"], "torch_agrees": agrees}
