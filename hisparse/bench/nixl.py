"""``hisparse bench nixl``: NIXL host-to-host READ GB/s between two processes vs memcpy.

A prefiller process registers ``total`` bytes of random pages; the decoder's
``NixlTransport`` READs them into a staging pool of the same size (chunks of
``chunk_pages`` pages, all posted at once). The ceiling, in the same run: one NumPy copy
of the same bytes inside the decoder process. Times are medians over ``reps``; only the
posting and completion are timed (descriptor preparation is not: it is per request, not
per byte). The landed bytes are compared with the source after the last repetition.

The staged import (``staging_slots`` > 0): the same pages imported as one host-target
request through the worker's ``ImportRunner`` over a bounded staging pool of that many
slots: READ into staging, copy into host blocks, release, chunk after chunk (what a P/D
host import does), timed from ``start`` to done; the host blocks are compared with the
source.
"""

from __future__ import annotations

import platform
import statistics
import time
from typing import Any

import numpy as np

from hisparse.bench.cli import BenchFailed
from hisparse.transport.geometry import ImportRequest
from hisparse.transport.nixl import NixlTransport
from hisparse.transport.nixlpeer import NixlPrefiller
from hisparse.transport.staging import StagingPool


def run(total_mib: int, page_kib: int, chunk_pages: int, reps: int,
        staging_slots: int = 0) -> dict[str, Any]:
    page_bytes = page_kib * 1024
    num_pages = max(1, total_mib * 1024 * 1024 // page_bytes)
    rng = np.random.default_rng(0)
    pages = rng.integers(0, 256, (num_pages, page_bytes), dtype=np.uint8)
    nbytes = pages.nbytes
    req = ImportRequest("bench", num_pages, page_bytes, 1, "bench-prefiller")
    pool = StagingPool(nbytes, num_pages, page_bytes)
    nixl_s: list[float] = []
    with NixlPrefiller(req.prefiller, pages) as peer:
        chunks = -(-num_pages // chunk_pages)
        tr = NixlTransport(pool, "bench-decoder", chunk_pages=chunk_pages, window=chunks)
        try:
            tr.connect(peer.metadata, peer.name)
            ann = peer.announce(req.req_id, req.num_tokens, req.row_bytes, req.block_size)
            for _ in range(reps + 1):  # the first READ (connection set-up) is not counted
                leases = pool.lease(req.req_id, num_pages)
                handle = tr.begin(req, ann, leases)
                t0 = time.perf_counter()
                tr.wait(handle)
                dt = time.perf_counter() - t0
                if handle.error is not None:
                    raise BenchFailed(str(handle.error))
                nixl_s.append(dt)
                landed = np.stack([pool.view(ls.slot) for ls in leases])
                equal = bool(np.array_equal(landed, pages))
                tr.finish(handle)
                pool.release(leases)
                if not equal:
                    raise BenchFailed("NIXL landed bytes that differ from the prefiller's")
        finally:
            tr.close()
        staged = (_staged(peer, pages, chunk_pages, staging_slots, reps)
                  if staging_slots else {})
    dst = np.empty_like(pages)
    copy_s = []
    for _ in range(reps + 1):
        t0 = time.perf_counter()
        np.copyto(dst, pages)
        copy_s.append(time.perf_counter() - t0)
    if not np.array_equal(dst, pages):  # the ceiling compared against copied the bytes
        raise BenchFailed("the memcpy baseline left bytes that differ")
    nixl_med = statistics.median(nixl_s[1:])
    copy_med = statistics.median(copy_s[1:])
    return {
        "environment": f"{platform.processor() or platform.machine()}, "
                       f"python {platform.python_version()}, nixl-cu12 1.5.1 UCX",
        "bytes": nbytes, "pages": num_pages, "page_bytes": page_bytes,
        "chunk_pages": chunk_pages, "reps": reps,
        "nixl_read_s": nixl_med, "nixl_GBps": nbytes / nixl_med / 1e9,
        "memcpy_s": copy_med, "memcpy_GBps": nbytes / copy_med / 1e9,
        "nixl_vs_memcpy": copy_med / nixl_med,
        **({"staged_import_s": staged["s"], "staged_import_GBps": nbytes / staged["s"] / 1e9,
            "staging_slots": staging_slots, "staging_peak": staged["peak"],
            "staged_vs_memcpy": copy_med / staged["s"]} if staged else {}),
    }


def _staged(peer: NixlPrefiller, pages: np.ndarray, chunk_pages: int, slots: int,
            reps: int) -> dict[str, Any]:
    """Median seconds of a host-target import of ``pages`` through the import runner."""
    from hisparse.executor.layout import PoolLayout
    from hisparse.executor.reference import ReferenceExecutor
    from hisparse.pdimport.runner import ImportRunner
    from hisparse.spec.messages import ImportCommand, PageImport

    n, page_bytes = pages.shape
    chunk = min(chunk_pages, slots)
    layout = PoolLayout(gpu_blocks=1, host_blocks=n, block_tokens=1, row_bytes=page_bytes,
                        hot_rows=1, slots=1)
    executor = ReferenceExecutor()
    pools = executor.allocate(layout)
    pool = StagingPool(slots * page_bytes, slots, page_bytes)
    tr = NixlTransport(pool, "bench-staged-decoder", chunk_pages=chunk,
                       window=max(1, slots // chunk))
    times: list[float] = []
    peak = 0
    try:
        tr.connect(peer.metadata, peer.name)
        runner = ImportRunner(tr, executor, [pools], layout, peer, peer.name)
        cmd_pages = tuple(PageImport(page_index=i + 1, key=f"k{i}", host_block=i,
                                     valid_rows=1) for i in range(n))
        for rep in range(reps + 1):
            pools.host[:] = 0
            cmd = ImportCommand(import_id=rep, request_id="bench", target="host",
                                num_tokens=n, block_size=1, pages=cmd_pages)
            t0 = time.perf_counter()
            runner.start(cmd)
            while runner.live:
                runner.advance()
            times.append(time.perf_counter() - t0)
            _, done, failed = runner.take_acks()
            if failed or done != (rep,):
                raise BenchFailed(f"the staged import failed: {failed}")
            if not np.array_equal(pools.host, pages):
                raise BenchFailed("the staged import landed bytes that differ")
        peak = runner.stats.staging_peak
    finally:
        tr.close()
    return {"s": statistics.median(times[1:]), "peak": peak}
