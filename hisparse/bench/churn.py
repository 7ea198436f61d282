"""Request churn through the scheduler side (``hisparse bench churn``).

N request lifecycles one after another, as an engine drives them through the
connector: ``add_request`` → ``admit`` → ``spill`` one page → build metadata →
enqueued ack → completed ack → ``finish`` once ``live`` newer requests run.

Two shapes of acks (``acks``). An engine calls ``get_worker_meta`` once per
scheduler step, so the meta of step i carries the enqueued acks of step i's
transfers and the completed acks of the copies that finished since, step i-1's:
``pipelined`` sends one meta per lifecycle, (enqueued tid_i, completed tid_{i-1}),
and the drain completes the last. ``split`` sends two metas per lifecycle, the
enqueued ack and then the completed ack of the same transfer (unpipelined). Each
request has ``pages`` pages; a share of them start with one of a few repeated
prefixes (a prefix hit once published). The host pool fills, then every spill
evicts. Invariant checks are off (production). Figures: µs per lifecycle by
decile of the run, requests/s, peak RSS and RSS growth after the first 10%, and
the cost of a spill that evicts at two host-pool sizes. Times are CPU time of
this process (one core; what a shared machine's other load cannot inflate),
with the wall-clock rate alongside.
"""

from __future__ import annotations

import gc
import importlib
import resource
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hisparse.blockpool import BlockPool
from hisparse.config import HiSparseConfig
from hisparse.connector import HiSparseConnector, KVConnectorRole
from hisparse.coordinator import HiSparseCoordinator
from hisparse.spec.messages import trusted_worker_meta
from hisparse.spec.native import COMPILED

BLOCK_TOKENS, ROW_BYTES = 64, 656  # DeepSeek-V3.2 FP8 sparse MLA rows
# the shapes of acks a lifecycle's worker metas can take (module docstring)
ACK_SHAPES = ("pipelined", "split")


def build() -> str:
    """Which build of the scheduler core runs: "python", or "mypyc" with the compiled
    modules (tools/build_compiled.py)."""
    mods = [importlib.import_module(name) for name in COMPILED]
    compiled = [m.__name__ for m in mods if not str(m.__file__).endswith(".py")]
    return f"mypyc: {', '.join(compiled)}" if compiled else "python"


def _rss_bytes() -> int:
    """Resident set size now (Linux /proc; 0 where unavailable)."""
    try:
        statm = Path("/proc/self/statm").read_text()
        return int(statm.split()[1]) * resource.getpagesize()
    except OSError:
        return 0


@dataclass
class Churn:
    """One coordinator and its scheduler-side connector, driven one lifecycle at a time."""

    host_blocks: int
    live: int = 64
    pages: int = 4
    prefixes: int = 16
    repeat_every: int = 4  # every 4th request starts with a repeated prefix
    # time each spill that evicts (two CPU-clock reads per lifecycle, each a system
    # call): only the eviction-cost runs do; the churn run times whole deciles
    time_spills: bool = False
    acks: str = "pipelined"  # one of ACK_SHAPES
    check: bool = False  # every invariant after every action (tests; the bench runs without)

    def __post_init__(self) -> None:
        if self.acks not in ACK_SHAPES:
            raise ValueError(f"acks must be one of {ACK_SHAPES}, not {self.acks!r}")
        self._pipelined = self.acks == "pipelined"
        # pipelined: the transfer whose completed ack rides on the next lifecycle's meta
        self.pending: int | None = None
        cfg = HiSparseConfig(
            host_pool_blocks=self.host_blocks,
            block_tokens=BLOCK_TOKENS,
            row_bytes=ROW_BYTES,
        )
        gpu = self.live * self.pages + self.pages
        self.kv = BlockPool(gpu)
        self.coordinator = HiSparseCoordinator(cfg, self.kv, gpu_blocks=gpu, check=self.check)
        self.conn = HiSparseConnector(KVConnectorRole.SCHEDULER, coordinator=self.coordinator)
        self.capacity = self.coordinator.state.config.host_capacity  # (a constant: read once)
        self.running: list[str] = []
        self.head = 0  # oldest running request still to finish
        self.evicting_spill_s = 0.0
        self.evicting_spills = 0

    def lifecycle(self, i: int) -> None:
        c, conn, pages = self.coordinator, self.conn, self.pages
        r = f"r{i}"
        keys = [f"{r}:{j}" for j in range(pages)]
        repeated = i % self.repeat_every == 0
        if repeated:
            keys[0] = f"prefix{i // self.repeat_every % self.prefixes}"
        c.add_request(r, keys)
        if c.admit(r) is None:
            raise RuntimeError(f"{r} not admitted: the GPU pool should fit {self.live} requests")
        s = c.machine.state
        full = s.host_used >= self.capacity
        # a repeated prefix not yet published spills its first page (later ones hit it);
        # otherwise the last page, whose key is unique, so the host pool fills
        first = s.loc[(r, 1)]
        page = (r, 1) if repeated and first and first[0] == "gpu" else (r, pages)
        if full:
            self.evicting_spills += 1
        if full and self.time_spills:
            t0 = time.process_time()
            tid = c.spill(page)
            self.evicting_spill_s += time.process_time() - t0
        else:
            tid = c.spill(page)
        if tid is None:
            raise RuntimeError("spill found no host block: nothing evictable")
        conn.build_connector_meta()
        # what the worker role's get_worker_meta hands back (one rank: rank 0)
        if self._pipelined:  # this step's enqueued ack, the previous step's completed ack
            prev = self.pending
            conn.update_connector_output(
                trusted_worker_meta((tid,), () if prev is None else (prev,), 0)
            )
            self.pending = tid
        else:
            conn.update_connector_output(trusted_worker_meta((tid,), (), 0))
            conn.update_connector_output(trusted_worker_meta((), (tid,), 0))
        self.running.append(r)
        if len(self.running) - self.head > self.live:
            c.finish(self.running[self.head])
            self.head += 1
            if self.head > 4096:  # keep the driver's own list bounded too
                del self.running[: self.head]
                self.head = 0

    def drain(self) -> None:
        """Complete the last copy, finish every running request, drop the published pages."""
        if self.pending is not None:
            self.conn.update_connector_output(trusted_worker_meta((), (self.pending,), 0))
            self.pending = None
        for r in self.running[self.head :]:
            self.coordinator.finish(r)
        self.running, self.head = [], 0
        self.conn.build_connector_meta()
        self.coordinator.evict_published()


def drained_problems(ch: Churn) -> list[str]:
    """What is left after ``drain``: every table, both pools (empty = none)."""
    c = ch.coordinator
    out = [f"{name} holds {n}" for name, n in c.table_sizes().items() if n]
    if c.state.host_used:
        out.append(f"{c.state.host_used} host blocks in use")
    if ch.kv.num_free != ch.kv.num_blocks:
        out.append(f"{ch.kv.num_blocks - ch.kv.num_free} GPU blocks in use")
    return out


def eviction_cost(
    host_blocks: int, samples: int = 20_000, acks: str = "pipelined"
) -> dict[str, Any]:
    """µs per spill that evicts, once a pool of ``host_blocks`` is full."""
    ch = Churn(host_blocks, time_spills=True, acks=acks)
    for i in range(host_blocks + samples):
        ch.lifecycle(i)
    return {
        "host_blocks": host_blocks,
        "evicting_spills": ch.evicting_spills,
        "evicting_spill_cpu_us": ch.evicting_spill_s / max(ch.evicting_spills, 1) * 1e6,
    }


def churn(requests: int, host_blocks: int, acks: str) -> dict[str, Any]:
    """One churn run of ``requests`` lifecycles in one shape of acks: its figures, then
    the tables while live and what is left after the drain."""
    ch = Churn(host_blocks, acks=acks)
    tenth = max(requests // 10, 1)
    deciles: list[float] = []
    rss_warm = warm_after = 0
    gc.collect()
    wall = time.perf_counter()
    start = time.process_time()
    t0 = start
    for i in range(requests):
        ch.lifecycle(i)
        if (i + 1) % tenth == 0 and len(deciles) < 10:
            t1 = time.process_time()
            deciles.append((t1 - t0) / tenth * 1e6)
            t0 = t1
            if len(deciles) == 1:
                rss_warm, warm_after = _rss_bytes(), i + 1
    total = time.process_time() - start
    wall = time.perf_counter() - wall
    rss_end = _rss_bytes()
    tables_live = ch.coordinator.table_sizes()
    ch.drain()
    return {
        "acks": acks,
        "per_request_cpu_us_by_decile": [round(d, 2) for d in deciles],
        "last_over_first_decile": round(deciles[-1] / deciles[0], 3) if deciles else None,
        "requests_per_cpu_s": round(requests / total, 1),
        "cpu_seconds": round(total, 2),
        "requests_per_wall_s": round(requests / wall, 1),
        "wall_seconds": round(wall, 2),
        "rss_growth_after_first_decile_mib": round((rss_end - rss_warm) / 2**20, 2),
        "rss_warm_after_requests": warm_after,  # where the growth is measured from
        "prefix_hits": ch.coordinator.prefix_hits,
        "retired": ch.coordinator.retired,
        "tables_at_end": tables_live,
        "left_after_drain": drained_problems(ch),
    }


def run(
    requests: int,
    host_blocks: int = 8192,
    eviction_pools: tuple[int, ...] = (8192, 262_144),
    acks: tuple[str, ...] = ACK_SHAPES,
) -> dict[str, Any]:
    """Churn ``requests`` lifecycles in each shape of ``acks`` (the first is the headline:
    its figures at the top, the eviction runs in its shape), one after another in this
    process; then the eviction cost at each pool size."""
    if not acks or any(a not in ACK_SHAPES for a in acks):
        raise ValueError(f"acks must name one or more of {ACK_SHAPES}, not {acks!r}")
    runs = [churn(requests, host_blocks, a) for a in acks]
    head = runs[0]
    doc: dict[str, Any] = {
        "build": build(),
        "requests": requests,
        "host_blocks": host_blocks,
        "live_requests": Churn.live,
        "pages_per_request": Churn.pages,
        **head,
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "by_acks": {
            r["acks"]: {k: r[k] for k in _SHAPE_FIGURES} for r in runs
        },
        "left_after_drain": [f"{r['acks']}: {x}" for r in runs for x in r["left_after_drain"]],
        "eviction": [eviction_cost(n, acks=acks[0]) for n in eviction_pools],
    }
    return doc


# the figures each shape's run reports side by side (``by_acks``)
_SHAPE_FIGURES = (
    "requests_per_cpu_s",
    "per_request_cpu_us_by_decile",
    "last_over_first_decile",
    "cpu_seconds",
    "rss_growth_after_first_decile_mib",
    "retired",
)
