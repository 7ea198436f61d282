"""``hisparse bench nixl``: NIXL host-to-host READ GB/s between two processes vs memcpy.

A prefiller process registers ``total`` bytes of random pages; the decoder's
``NixlTransport`` READs them into a staging pool of the same size (chunks of
``chunk_pages`` pages, all posted at once). The ceiling, in the same run: one NumPy copy
of the same bytes inside the decoder process. Times are medians over ``reps``; only the
posting and completion are timed (descriptor preparation is not: it is per request, not
per byte). The landed bytes are compared with the source after the last repetition.
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


def run(total_mib: int, page_kib: int, chunk_pages: int, reps: int) -> dict[str, Any]:
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
    dst = np.empty_like(pages)
    copy_s = []
    for _ in range(reps + 1):
        t0 = time.perf_counter()
        np.copyto(dst, pages)
        copy_s.append(time.perf_counter() - t0)
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
    }
