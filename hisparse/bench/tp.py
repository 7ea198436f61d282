"""``hisparse bench tp``: tensor-parallel ranks on GPUs, private vs shared host backing.

One invocation runs three configurations of the same workload (DeepSeek-V3.2 row
shape), each a full verified run (every resolved row bit for bit, invariants every
step): one rank on one GPU (the baseline), two ranks with private pinned pools, two
ranks on one shared registered allocation. Per rank it reports the device time of a
decode step (resolver launch on the leader cache, replay on its follower), of a step's
spill work (a copy launch; for a shared-backing reader, its ordering after the writer's
copy event), and the pool's host memory: bytes page-locked per process, the physical
bytes in total (private: one pool per rank; shared: one), and the machine's ``Shmem``
before and after (pinned and /dev/shm pages both count there).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hisparse.tp import TpOptions, launch

BENCH_SHAPE = TpOptions(
    requests=48, steps=200, layers=2, top_k=2048, block_tokens=64, row_bytes=656,
    gpu_blocks=384, host_blocks=2048, min_pages=16, max_pages=64, prefixes=3, prefix_pages=8,
    arrival_rate=0.5, concurrency=8, spill_rate=0.7,
)
"""DeepSeek-V3.2's row (656 B) and top-K (2048), contexts of 1-4k tokens; per rank the
host pool is 2 caches x 2048 blocks x 64 tokens x 656 B = 172 MB."""


def run(ranks: int = 2, transport: str = "torch") -> dict[str, Any]:
    runs: dict[str, Any] = {}
    configs = [("single_gpu", replace(BENCH_SHAPE, ranks=1, backing="private")),
               ("private", replace(BENCH_SHAPE, ranks=ranks, backing="private")),
               ("shared", replace(BENCH_SHAPE, ranks=ranks, backing="shared"))]
    for name, o in configs:
        reports = launch(o, transport=transport, timeout_s=500)
        bad = sum(r["mismatches"] for r in reports)
        pinned = [r["memory"]["pinned_bytes"] for r in reports]
        runs[name] = {
            "ranks": o.ranks,
            "backing": o.backing,
            "mismatches": bad,
            "pool_bytes_per_rank_view": o.host_pool_bytes,
            "pinned_bytes_per_process": pinned,
            "host_pool_physical_bytes": o.host_pool_bytes if o.backing == "shared"
            else sum(pinned),
            "machine_shmem_delta_bytes": reports[0]["memory"].get("shmem_bytes", 0)
            - reports[0]["memory"].get("start_shmem_bytes", 0),
            "reports": reports,
        }
    from hisparse.bench.gpu import environment

    return {"environment": environment(), "shape": BENCH_SHAPE.__dict__, "runs": runs}


def lines(doc: dict[str, Any]) -> list[str]:
    """The figures as printed (and pasted into BENCHMARKS.md)."""
    out = []
    for name, r in doc["runs"].items():
        out.append(f"{name}: {r['ranks']} rank(s), {r['backing']} backing, host pool physical "
                   f"{r['host_pool_physical_bytes'] / 1e6:.1f} MB, pinned per process "
                   f"{[round(b / 1e6, 1) for b in r['pinned_bytes_per_process']]} MB, "
                   f"machine Shmem +{r['machine_shmem_delta_bytes'] / 1e6:.1f} MB, "
                   f"mismatches {r['mismatches']}")
        for rep in r["reports"]:
            m = rep["memory"]
            out.append(
                f"  rank {rep['rank']} ({rep['role']}): decode {rep['resolve_us_median']:.1f} µs"
                f" median of {rep['resolve_us_n']}, spill {rep['spill_us_median'] or 0:.1f} µs "
                f"median of {rep['spill_us_n']} ({rep['copied_bytes'] / 1e6:.1f} MB copied), "
                f"misses {rep['misses']}, rows checked "
                f"{rep['rows_checked']}, RSS {m.get('vmrss_bytes', 0) / 1e6:.0f} MB "
                f"(shmem {m.get('rssshmem_bytes', 0) / 1e6:.0f} MB), wall {m['wall_ms']} ms")
        coord = r["reports"][0]["coordinator"]
        out.append(f"  coordinator: {coord}")
    return out
