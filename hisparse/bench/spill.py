"""``hisparse bench spill``: batched device-to-host spills against bulk bandwidth.

A step's spills of whole 64-token blocks go out as one ``hisparse_spill`` launch
(``CudaExecutor.enqueue_spills``) into the mapped pinned host pool. Measured in the same
run: one bulk device-to-host copy of the same bytes (the ceiling), and one
``cudaMemcpyAsync`` per block (what a copy-engine-per-block design costs).

Device time and host time are reported apart. The host side of a batch (checking the
spills, building and uploading the pairs, one Python call per ``cudaMemcpyAsync``)
grows with the batch; the GPU timer's spin is sized from it (``SLACK`` times the
measured host time), so the device figures never include the host building the work.
The host time is its own figure (``enqueue_host_us``): the scheduler step pays it.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from hisparse.bench.gpu import GpuTimer, environment
from hisparse.executor.cuda import CudaExecutor
from hisparse.executor.cuda.backend import load_cupy
from hisparse.executor.layout import PoolLayout

SLACK = 3.0
"""The GPU timer's spin, in multiples of the measured host time of the timed work."""


def host_us(work: Callable[[int], None], before: Callable[[int], None], reps: int = 5) -> float:
    """Median host (wall) time of ``work(i)`` in µs, each after an untimed ``before(i)``."""
    times = []
    for i in range(reps):
        before(i)
        t0 = time.perf_counter()
        work(i)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def run(
    counts: tuple[int, ...] = (16, 64, 256, 1024), block_tokens: int = 64,
    row_bytes: int = 656, reps: int = 50,
) -> dict[str, Any]:
    cupy = load_cupy()
    rng = np.random.default_rng(0)
    n = max(counts)
    spec = PoolLayout(gpu_blocks=2 * n, host_blocks=4 * n, block_tokens=block_tokens,
                    row_bytes=row_bytes, hot_rows=1, slots=1)
    ex = CudaExecutor(top_k=1, max_positions=1)
    pools = ex.allocate(spec, lru=False)
    block_bytes = block_tokens * row_bytes
    timer = GpuTimer()
    out: dict[str, Any] = {"environment": environment(), "block_bytes": block_bytes,
                           "shapes": []}
    tid = 0
    dev = pools.device.reshape(-1)
    host = pools.host_device.reshape(-1)
    for count in counts:
        nbytes = count * block_bytes
        # (src, dst) block pairs as plain ints, four sets cycled (as a worker holds them)
        pairs = [list(zip(rng.choice(spec.gpu_blocks, size=count, replace=False).tolist(),
                          rng.choice(spec.host_blocks, size=count, replace=False).tolist(),
                          strict=True)) for _ in range(4)]
        batch: list[list[tuple[int, int, int]]] = [[]]

        def spill(i: int, batch: list[list[tuple[int, int, int]]] = batch) -> None:
            ex.enqueue_spills(pools, batch[0])

        def prepare(i: int, count: int = count, pairs: Any = pairs,
                    batch: list[list[tuple[int, int, int]]] = batch) -> None:
            """Untimed: land the previous batch, then build this one (fresh transfer IDs)."""
            nonlocal tid
            ex.release()
            ex.completed()
            batch[0] = [(tid + c, s, d) for c, (s, d) in enumerate(pairs[i % 4])]
            tid += count

        enqueue_host = host_us(spill, prepare)
        prepare(0)
        ex.spill_stream.synchronize()
        batched = timer.time(spill, reps=reps, before=prepare, stream=ex.spill_stream,
                             spin_us=max(200.0, SLACK * enqueue_host))
        prepare(0)

        def bulk(i: int, nbytes: int = nbytes) -> None:
            host.data.copy_from_device_async(dev.data, nbytes, cupy.cuda.get_current_stream())

        ceiling = timer.time(bulk, reps=reps)

        def per_block(i: int, pairs: Any = pairs) -> None:
            stream = cupy.cuda.get_current_stream()
            for s, d in pairs[i % 4]:
                (host[d * block_bytes:]).data.copy_from_device_async(
                    (dev[s * block_bytes:]).data, block_bytes, stream)

        memcpy_host = host_us(per_block, lambda i: None, reps=3)
        cupy.cuda.get_current_stream().synchronize()
        memcpys = timer.time(per_block, reps=max(5, reps // 5),
                             spin_us=max(200.0, SLACK * memcpy_host))
        out["shapes"].append({
            "blocks": count, "bytes": nbytes,
            "spill_us": batched["median_us"], "spill_GBps": nbytes / batched["median_us"] / 1e3,
            "bulk_d2h_us": ceiling["median_us"],
            "bulk_d2h_GBps": nbytes / ceiling["median_us"] / 1e3,
            "fraction_of_bulk": ceiling["median_us"] / batched["median_us"],
            "memcpy_per_block_us": memcpys["median_us"],
            "enqueue_host_us": enqueue_host,
            "enqueue_host_us_per_block": enqueue_host / count,
            "memcpy_per_block_host_us": memcpy_host,
        })
    return out
