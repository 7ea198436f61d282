"""``hisparse bench spill``: batched device-to-host spills against bulk bandwidth.

A step's spills of whole 64-token blocks go out as one ``hisparse_spill`` launch
(``CudaExecutor.enqueue_spills``) into the mapped pinned host pool. Measured in the same
run: one bulk device-to-host copy of the same bytes (the ceiling), and one
``cudaMemcpyAsync`` per block (what a copy-engine-per-block design costs).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hisparse.bench.gpu import GpuTimer, environment
from hisparse.executor.cuda import CudaExecutor
from hisparse.executor.cuda.backend import load_cupy
from hisparse.executor.layout import PoolLayout


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
        src_blocks = [rng.choice(spec.gpu_blocks, size=count, replace=False)
                      for _ in range(4)]
        dst_blocks = [rng.choice(spec.host_blocks, size=count, replace=False)
                      for _ in range(4)]

        def spill(i: int, count: int = count, s: Any = src_blocks, d: Any = dst_blocks) -> None:
            nonlocal tid
            spills = [(tid + c, int(s[i % 4][c]), int(d[i % 4][c])) for c in range(count)]
            tid += count
            ex.enqueue_spills(pools, spills)

        def drain(i: int) -> None:
            ex.release()
            ex.completed()

        batched = timer.time(spill, reps=reps, before=drain, stream=ex.spill_stream)
        drain(0)

        def bulk(i: int, nbytes: int = nbytes) -> None:
            host.data.copy_from_device_async(dev.data, nbytes, cupy.cuda.get_current_stream())

        ceiling = timer.time(bulk, reps=reps)

        def per_block(i: int, count: int = count, s: Any = src_blocks,
                      d: Any = dst_blocks) -> None:
            stream = cupy.cuda.get_current_stream()
            for c in range(count):
                (host[int(d[i % 4][c]) * block_bytes:]).data.copy_from_device_async(
                    (dev[int(s[i % 4][c]) * block_bytes:]).data, block_bytes, stream)

        memcpys = timer.time(per_block, reps=max(5, reps // 5))
        out["shapes"].append({
            "blocks": count, "bytes": nbytes,
            "spill_us": batched["median_us"], "spill_GBps": nbytes / batched["median_us"] / 1e3,
            "bulk_d2h_us": ceiling["median_us"],
            "bulk_d2h_GBps": nbytes / ceiling["median_us"] / 1e3,
            "fraction_of_bulk": ceiling["median_us"] / batched["median_us"],
            "memcpy_per_block_us": memcpys["median_us"],
        })
    return out
