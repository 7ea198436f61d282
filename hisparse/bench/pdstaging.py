"""``hisparse bench pd-staging``: a host import's staging path against a bulk copy (GPU).

A host-target import lands each page in a staging slot in VRAM and copies it, one block
per layer, into that layer's pinned host pool (``CudaExecutor.write_host_block``). Timed
here, page by page as the import runner does it: lease a slot of a
``DeviceStagingPool`` (zeroed on the stream), the page's bytes land in it (a device to
device copy from a source buffer standing in for the prefiller's VRAM: the READ), one
``write_host_block`` per layer, release the slot. Measured in the same run: one bulk
device -> pinned host copy of the same bytes from the same source (the ceiling).

Two figures per shape, both from CUDA events on the executor's stream: *device* (a spin
kernel ahead of the work, sized from the measured host enqueue time, so the GPU times
its own copies, not Python queuing them) and *end to end* (no spin: the events also see
the host enqueueing page by page, which is what an import pays when the host is the
bottleneck). The bytes in every host pool are checked against the source afterwards.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hisparse.bench.gpu import GpuTimer, environment
from hisparse.bench.spill import SLACK, host_us
from hisparse.executor.cuda import CudaExecutor
from hisparse.executor.cuda.backend import load_cupy
from hisparse.executor.cuda.hostmem import PinnedHostBuffer
from hisparse.executor.layout import PoolLayout


def run_shape(
    pages: int, layers: int, block_tokens: int, row_bytes: int, slots: int, reps: int,
    timer: GpuTimer,
) -> dict[str, Any]:
    """One geometry: staged path vs bulk copy, device and end-to-end, bytes checked."""
    cupy = load_cupy()
    ex = CudaExecutor(top_k=1, max_positions=1)
    layout = PoolLayout(gpu_blocks=1, host_blocks=pages, block_tokens=block_tokens,
                        row_bytes=row_bytes, hot_rows=1, slots=1)
    pools = [ex.allocate(layout, lru=False) for _ in range(layers)]
    block_bytes = block_tokens * row_bytes
    page_bytes = layers * block_bytes
    total = pages * page_bytes
    staging = ex.staging_pool(slots * page_bytes, slots, page_bytes)
    stream = ex.stream
    rng = np.random.default_rng(pages * 31 + row_bytes)
    with stream:
        src = cupy.asarray(rng.integers(0, 256, (pages, page_bytes), dtype=np.uint8))
    bulk = PinnedHostBuffer(total)
    bulk_dev = bulk.device_view(pages, page_bytes)

    def staged(i: int) -> None:
        for p in range(pages):
            (lease,) = staging.lease("bench", 1)
            slot = staging.view(lease.slot)
            slot.data.copy_from_device_async(src[p].data, page_bytes, stream)  # the READ
            blocks = slot.reshape(layers, block_tokens, row_bytes)
            for layer in range(layers):
                ex.write_host_block(pools[layer], p, blocks[layer])
            staging.release([lease])

    def copy_bulk(i: int) -> None:
        bulk_dev.data.copy_from_device_async(src.data, total, stream)

    stream.synchronize()
    enqueue = host_us(staged, lambda i: stream.synchronize(), reps=3)
    stream.synchronize()
    device = timer.time(staged, reps=reps, stream=stream,
                        spin_us=max(200.0, SLACK * enqueue))
    end_to_end = timer.time(staged, reps=reps, stream=stream, spin_us=0.0)
    ceiling = timer.time(copy_bulk, reps=reps, stream=stream)
    stream.synchronize()
    want = cupy.asnumpy(src).reshape(pages, layers, block_tokens, row_bytes)
    equal = bool(np.array_equal(np.asarray(bulk).reshape(want.shape), want)) and all(
        np.array_equal(ex.read_host_rows(pools[layer], np.arange(layout.host_rows)),
                       want[:, layer].reshape(layout.host_rows, row_bytes))
        for layer in range(layers))

    def gbps(us: float) -> float:
        return total / us / 1e3

    return {
        "pages": pages, "layers": layers, "block_tokens": block_tokens,
        "row_bytes": row_bytes, "copy_bytes": block_bytes, "bytes": total,
        "staging_slots": slots,
        "staged_device_us": device["median_us"], "staged_device_GBps": gbps(device["median_us"]),
        "staged_end_to_end_us": end_to_end["median_us"],
        "staged_end_to_end_GBps": gbps(end_to_end["median_us"]),
        "bulk_d2h_us": ceiling["median_us"], "bulk_d2h_GBps": gbps(ceiling["median_us"]),
        "device_vs_bulk": ceiling["median_us"] / device["median_us"],
        "end_to_end_vs_bulk": ceiling["median_us"] / end_to_end["median_us"],
        "enqueue_host_us": enqueue, "enqueue_host_us_per_page": enqueue / pages,
        "bytes_equal": equal,
    }


def run(
    pages: int = 128, layers: int = 4, block_tokens: int = 64,
    row_bytes: tuple[int, ...] = (656, 8192), slots: int = 8, reps: int = 5,
) -> dict[str, Any]:
    """Every row size in ``row_bytes`` at the same pages, layers and slots."""
    timer = GpuTimer()
    shapes = [run_shape(pages, layers, block_tokens, rb, slots, reps, timer)
              for rb in row_bytes]
    return {"environment": environment(), "shapes": shapes,
            "bytes_equal": all(s["bytes_equal"] for s in shapes)}
