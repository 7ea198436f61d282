"""``hisparse bench pd-staging``: a host import's staging path against a bulk copy (GPU).

A host-target import lands each page in a staging slot in VRAM (``DeviceStagingPool``)
and copies it, one block per cache, into each cache's pinned host pool. Timed here, for
``pages`` pages cycling through the pool's slots, against one bulk device -> pinned host
copy of the same bytes in the same run (the ceiling):

- ``batched``: what the import runner does with the CUDA executor: each cache's staged
  blocks of a pool-full of pages in one ``write_host_blocks`` launch;
- ``per_block``: one ``write_host_block`` (one ``cudaMemcpyAsync``) per block, the
  protocol's call and the runner's path when slots are not whole blocks;
- ``import_path``: the runner's whole loop around ``batched``: lease the slots (zeroed
  on the stream), the pages land in them (a device to device copy from a source buffer
  standing in for the prefiller's VRAM: the READ), copy out, release.

Device time from CUDA events on the executor's stream, behind a spin kernel sized from
the measured host enqueue time (``SLACK`` times it), so the GPU times its own copies, not
Python queuing them; the host enqueue time per page is its own figure. The bytes of every
host pool are checked against the staged bytes afterwards.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from hisparse.bench.gpu import GpuTimer, environment
from hisparse.bench.spill import SLACK, host_us
from hisparse.executor.cuda import CudaExecutor
from hisparse.executor.cuda.backend import load_cupy
from hisparse.executor.cuda.hostmem import PinnedHostBuffer
from hisparse.executor.layout import PoolLayout

PATHS = ("batched", "per_block", "import_path")


def run_shape(
    pages: int, layers: int, block_tokens: int, row_bytes: int, slots: int, reps: int,
    timer: GpuTimer,
) -> dict[str, Any]:
    """One geometry: every path against the bulk copy, bytes checked after each."""
    cupy = load_cupy()
    ex = CudaExecutor(top_k=1, max_positions=1)
    layout = PoolLayout(gpu_blocks=1, host_blocks=pages, block_tokens=block_tokens,
                        row_bytes=row_bytes, hot_rows=1, slots=1)
    pools = [ex.allocate(layout, lru=False) for _ in range(layers)]
    block_bytes = block_tokens * row_bytes
    page_bytes = layers * block_bytes
    total = pages * page_bytes
    slots = min(slots, pages)
    staging = ex.staging_pool(slots * page_bytes, slots, page_bytes)
    stream = ex.stream
    rng = np.random.default_rng(pages * 31 + row_bytes)
    with stream:  # the prefiller's pages, in VRAM
        src = cupy.asarray(rng.integers(0, 256, (pages, page_bytes), dtype=np.uint8))
    bulk = PinnedHostBuffer(total)
    bulk_dev = bulk.device_view(pages, page_bytes)
    batches = [list(range(b, min(b + slots, pages))) for b in range(0, pages, slots)]

    def copy_out(batch: list[int], slot_of: list[int]) -> None:
        """Page ``batch[j]`` from slot ``slot_of[j]``: one launch per cache."""
        for layer in range(layers):
            ex.write_host_blocks(pools[layer], staging.buffer,
                                 [(p, s * layers + layer) for p, s in zip(batch, slot_of,
                                                                          strict=True)])

    def batched(i: int) -> None:
        for batch in batches:
            copy_out(batch, list(range(len(batch))))

    def per_block(i: int) -> None:
        for batch in batches:
            for j, p in enumerate(batch):
                blocks = staging.view(j).reshape(layers, block_tokens, row_bytes)
                for layer in range(layers):
                    ex.write_host_block(pools[layer], p, blocks[layer])

    def import_path(i: int) -> None:
        for batch in batches:
            leases = staging.lease("bench", len(batch))
            slot_of = [ls.slot for ls in leases]
            for p, s in zip(batch, slot_of, strict=True):  # the READ lands in the slot
                staging.view(s).data.copy_from_device_async(src[p].data, page_bytes, stream)
            copy_out(batch, slot_of)
            staging.release(leases)

    def copy_bulk(i: int) -> None:
        bulk_dev.data.copy_from_device_async(src.data, total, stream)

    pages_held = cupy.asnumpy(src).reshape(pages, layers, block_tokens, row_bytes)
    # batched and per_block copy out of slots filled once: page p from slot p % slots
    cycled = pages_held[np.arange(pages) % slots]

    def landed(want: np.ndarray) -> bool:
        """Every host pool holds ``want``'s blocks; then it is cleared for the next path."""
        ok = True
        for layer in range(layers):
            got = ex.read_host_rows(pools[layer], np.arange(layout.host_rows))
            ok &= bool(np.array_equal(got, want[:, layer].reshape(layout.host_rows, -1)))
            pools[layer].host[...] = 0
        return ok

    def gbps(us: float) -> float:
        return total / us / 1e3

    ceiling = timer.time(copy_bulk, reps=reps, stream=stream)
    out: dict[str, Any] = {
        "pages": pages, "layers": layers, "block_tokens": block_tokens,
        "row_bytes": row_bytes, "block_bytes": block_bytes, "bytes": total,
        "staging_slots": slots, "bulk_d2h_us": ceiling["median_us"],
        "bulk_d2h_GBps": gbps(ceiling["median_us"]),
    }
    stream.synchronize()
    out["bulk_bytes_equal"] = bool(
        np.array_equal(np.asarray(bulk).reshape(pages_held.shape), pages_held))
    for j in range(slots):  # the slots batched and per_block copy out of
        staging.view(j).data.copy_from_device_async(src[j].data, page_bytes, stream)
    work: dict[str, tuple[Callable[[int], None], np.ndarray]] = {
        "batched": (batched, cycled), "per_block": (per_block, cycled),
        "import_path": (import_path, pages_held)}
    for name in PATHS:
        fn, want = work[name]
        stream.synchronize()
        enqueue = host_us(fn, lambda i: stream.synchronize(), reps=3)
        stream.synchronize()
        device = timer.time(fn, reps=reps, stream=stream, spin_us=max(200.0, SLACK * enqueue))
        stream.synchronize()
        out[name] = {
            "device_us": device["median_us"], "GBps": gbps(device["median_us"]),
            "vs_bulk": ceiling["median_us"] / device["median_us"],
            "enqueue_host_us": enqueue, "enqueue_host_us_per_page": enqueue / pages,
            "bytes_equal": landed(want),
        }
    out["bytes_equal"] = out["bulk_bytes_equal"] and all(out[n]["bytes_equal"] for n in PATHS)
    return out


def run(
    pages: int = 128, layers: int = 4, block_tokens: int = 64,
    row_bytes: tuple[int, ...] = (656, 8192), slots: int = 64, reps: int = 5,
) -> dict[str, Any]:
    """Every row size in ``row_bytes`` at the same pages, caches and slots."""
    timer = GpuTimer()
    shapes = [run_shape(pages, layers, block_tokens, rb, slots, reps, timer)
              for rb in row_bytes]
    return {"environment": environment(), "shapes": shapes,
            "bytes_equal": all(s["bytes_equal"] for s in shapes)}
