"""``hisparse simulate``: a synthetic DeepSeek-V3.2-like decode workload, end to end.

Requests (some sharing prefixes) arrive, prefill, decode with top-K drawn with
locality, get spilled under GPU pool pressure, finish or abort at any moment.
Every step runs coordinator → connector → worker → executor and back, with the
worker's acks delayed and batched at random. Every row the resolver returns is
compared with the bytes the simulator wrote for that (page content, layer,
position): ``data_mismatches`` must be 0.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from hisparse.blockpool import BlockPool
from hisparse.config import GIB, HiSparseConfig
from hisparse.connector import HiSparseConnector, KVConnectorRole
from hisparse.coordinator import HiSparseCoordinator
from hisparse.executor.base import Executor
from hisparse.executor.reference import ReferenceExecutor
from hisparse.spec.errors import InvariantViolation
from hisparse.spec.messages import CONNECTOR_METADATA, WORKER_META
from hisparse.worker import DecodeResult, HiSparseWorker


@dataclass(frozen=True)
class SimulateOptions:
    """The workload's shape; defaults finish in well under a minute on 2 cores."""

    requests: int = 64
    steps: int = 400
    seed: int = 0
    layers: int = 3  # layer 1 follows layer 0's indexer
    top_k: int = 128
    block_tokens: int = 32
    row_bytes: int = 64
    gpu_blocks: int = 56
    host_blocks: int = 160
    min_pages: int = 4
    max_pages: int = 16
    prefixes: int = 3
    prefix_pages: int = 3
    abort_rate: float = 0.03
    concurrency: int = 12
    speculative: int = 0  # extra verification steps resolved per request per decode
    check: bool = True
    trace: Path | None = None
    executor: str = "reference"  # or "cuda"


EXECUTORS = ("reference", "cuda")


def make_executor(
    name: str, top_k: int, entries_per_slot: int, max_positions: int
) -> Executor[Any]:
    """The executor ``name`` (``reference`` runs anywhere; ``cuda`` needs CuPy and a GPU)."""
    if name == "reference":
        return ReferenceExecutor()
    if name == "cuda":
        from hisparse.executor.cuda import CudaExecutor

        return CudaExecutor(
            top_k=top_k, entries_per_slot=entries_per_slot, max_positions=max_positions
        )
    raise ValueError(f"unknown executor {name!r}; choose one of {', '.join(EXECUTORS)}")


@dataclass
class SimulateReport:
    """The figures ``hisparse simulate --json`` writes."""

    steps: int = 0
    requests: int = 0
    spills: int = 0
    prefix_hits: int = 0
    resident_hits: int = 0
    hot_hits: int = 0
    misses: int = 0
    h2d_bytes: int = 0
    d2h_bytes: int = 0
    invariant_checks: int = 0
    violations: int = 0
    data_mismatches: int = 0
    finished: int = 0
    aborted: int = 0
    trace_steps: int = 0
    notes: list[str] = field(default_factory=list)


def row_bytes_of(key_id: int, layer: int, offset: int, width: int) -> NDArray[np.uint8]:
    """The bytes of one KV row: an identifying header, then a derived pattern."""
    head = np.array([key_id, layer, offset], dtype=np.uint32).view(np.uint8)
    tail = (np.arange(width - head.size, dtype=np.uint32) * 31 + key_id * 7 + layer * 13 + offset)
    return np.concatenate([head, (tail % 251).astype(np.uint8)])


class Simulation:
    """One seeded run; ``run()`` returns the report."""

    def __init__(self, opts: SimulateOptions) -> None:
        self.o = opts
        self.rng = random.Random(opts.seed)
        block_bytes = opts.block_tokens * opts.row_bytes * opts.layers
        leaders = tuple(0 if i == 1 else i for i in range(opts.layers))
        self.config = HiSparseConfig(
            host_pool_gib=(opts.host_blocks * block_bytes + block_bytes // 2) / GIB,
            block_tokens=opts.block_tokens,
            row_bytes=opts.row_bytes,
            top_k=opts.top_k,
            num_speculative_tokens=opts.speculative,
            layers=opts.layers,
            index_leaders=leaders,
        )
        self.kv = BlockPool(opts.gpu_blocks)
        self.coordinator = HiSparseCoordinator(
            self.config, self.kv, gpu_blocks=opts.gpu_blocks,
            check=opts.check, record=opts.trace is not None,
        )
        self.executor = make_executor(
            opts.executor, opts.top_k, opts.speculative + 1, opts.max_pages * opts.block_tokens
        )
        self.worker = HiSparseWorker(
            self.config, self.executor, gpu_blocks=opts.gpu_blocks, slots=opts.concurrency
        )
        self.sched = HiSparseConnector(KVConnectorRole.SCHEDULER, coordinator=self.coordinator)
        self.wconn = HiSparseConnector(KVConnectorRole.WORKER, worker=self.worker)
        self.keys: dict[str, int] = {}
        self.pending: list[str] = []
        self.running: dict[str, int] = {}  # request -> decode steps left
        self.report = SimulateReport()

    # -- workload -------------------------------------------------------------

    def _key_id(self, key: str) -> int:
        return self.keys.setdefault(key, len(self.keys))

    def _new_request(self, i: int) -> None:
        o, r = self.o, f"req{i}"
        pages = self.rng.randint(o.min_pages, o.max_pages)
        shared = self.rng.randrange(o.prefixes + 1)  # o.prefixes = no shared prefix
        keys = [
            f"pre{shared}:{j}" if shared < o.prefixes and j < o.prefix_pages else f"{r}:{j}"
            for j in range(pages)
        ]
        self.coordinator.add_request(r, keys)
        self.pending.append(r)
        self.report.requests += 1

    def _topk(self, r: str) -> NDArray[np.int32]:
        """[S, K] for S = speculative + 1 verification steps (or [K] without speculation)."""
        steps = [self._topk_one(r) for _ in range(self.o.speculative + 1)]
        return steps[0] if len(steps) == 1 else np.stack(steps)

    def _topk_one(self, r: str) -> NDArray[np.int32]:
        """Locality: the recent tail, a cluster around a drifting centre, a few random."""
        n = len(self.coordinator.state.page_keys[r]) * self.o.block_tokens
        k = self.o.top_k
        if n <= k:
            out = np.full(k, -1, np.int32)
            out[:n] = np.arange(n, dtype=np.int32)
            return out
        rng = self.rng
        tail = list(range(n - k // 4, n))
        centre = rng.randrange(n)
        cluster = [min(n - 1, max(0, centre + rng.randint(-k, k))) for _ in range(k // 2)]
        rand = [rng.randrange(n) for _ in range(k - len(tail) - len(cluster))]
        return np.array(tail + cluster + rand, dtype=np.int32)  # duplicates allowed

    def _prefill(self, r: str) -> None:
        """Write the request's GPU-resident pages into every layer's resident rows."""
        s, b = self.coordinator.state, self.o.block_tokens
        for i, where in enumerate(self.worker.tables.tables[r]):
            if where[0] != "gpu":
                continue
            key = self._key_id(s.page_keys[r][i])
            rows = np.array([self.worker.spec.resident_row(where[1], o) for o in range(b)])
            for h in self.worker.handles:
                data = np.stack([row_bytes_of(key, h.layer, o, self.o.row_bytes) for o in range(b)])
                self.executor.write_device_rows(h.runtime.pools, rows, data)

    def _verify(self, result: DecodeResult, topk: dict[str, NDArray[np.int32]]) -> None:
        """Every resolved row holds the bytes written for its position (reads back)."""
        s, b = self.coordinator.state, self.o.block_tokens
        entries = [(r, t) for r, ts in topk.items() for t in np.atleast_2d(ts)]
        on_host = result.host
        for layer in result.rows:
            got = on_host[self.config.leaders[layer]].rows
            pools = self.worker.handles[layer].runtime.pools
            flat = np.asarray(got).reshape(-1).astype(np.int64)
            seen = self.executor.read_device_rows(pools, np.where(flat >= 0, flat, 0))
            seen = seen.reshape(len(entries), -1, self.o.row_bytes)
            for e, (r, t) in enumerate(entries):
                for k, pos in enumerate(t.tolist()):
                    if pos < 0:
                        continue
                    key = self._key_id(s.page_keys[r][pos // b])
                    want = row_bytes_of(key, layer, pos % b, self.o.row_bytes)
                    if not np.array_equal(seen[e, k], want):
                        self.report.data_mismatches += 1

    # -- one engine step -------------------------------------------------------

    def _schedule(self) -> None:
        c, o = self.coordinator, self.o
        for r in list(self.running):
            if self.rng.random() < o.abort_rate:
                c.abort(r)
                self.worker.release(r)
                del self.running[r]
                self.report.aborted += 1
            elif self.running[r] <= 0:
                c.finish(r)
                self.worker.release(r)
                del self.running[r]
                self.report.finished += 1
        for r in list(self.pending):
            if len(self.running) >= o.concurrency:
                break
            adm = c.admit(r)
            if adm is None:  # GPU pool pressure: spill, retry next step
                need = c.gpu_blocks_needed(r) - self.kv.num_free
                c.reclaim(need)
                break
            self.pending.remove(r)
            self.worker.admit(r, adm.table)
            self._prefill(r)
            self.running[r] = self.rng.randint(5, 40)

    def step(self, t: int) -> None:
        self._schedule()
        meta = self.sched.build_connector_meta()
        if meta is not None:  # over the process boundary as bytes, validated once
            self.wconn.bind_connector_metadata(CONNECTOR_METADATA.dump_json(meta))
        topk = {r: self._topk(r) for r in self.running}
        if topk:
            leaders = {lead: topk for lead in set(self.config.leaders)}
            result = self.worker.decode(leaders, step=t + 1)
            self.report.resident_hits += result.resident_hits
            self.report.hot_hits += result.hot_hits
            self.report.misses += result.misses
            self.report.h2d_bytes += result.h2d_bytes
            self._verify(result, topk)
            for r in topk:
                self.running[r] -= 1
        if self.executor.queued():  # the stream completes copies late and in batches
            self.executor.release(self.rng.randint(0, len(self.executor.queued())))
        if self.rng.random() < 0.7:  # acks are sometimes held back a step or more
            wmeta = self.wconn.get_worker_meta()
            if wmeta is not None:
                self.sched.update_connector_output(WORKER_META.dump_json(wmeta))

    def drain(self) -> None:
        """End of run: finish everything and let every copy and ack arrive."""
        for r in list(self.running):
            self.coordinator.finish(r)
            self.worker.release(r)
            del self.running[r]
            self.report.finished += 1
        for r in self.pending:
            self.coordinator.abort(r)
            self.report.aborted += 1
        self.pending.clear()
        for _ in range(3):  # send what is left, land every copy, deliver every ack
            meta = self.sched.build_connector_meta()
            if meta is not None:
                self.wconn.bind_connector_metadata(meta)
            self.executor.release()
            wmeta = self.wconn.get_worker_meta()
            if wmeta is not None:
                self.sched.update_connector_output(wmeta)

    def run(self, progress: bool = False) -> SimulateReport:
        window = max(1, self.o.steps * 2 // 3)  # arrivals spread over two thirds of the run
        arrivals = sorted(self.rng.randrange(window) for _ in range(self.o.requests))
        steps: Any = range(self.o.steps)
        if progress:
            from tqdm import tqdm

            steps = tqdm(steps, desc="simulate", unit="step")
        nxt = 0
        try:
            for t in steps:
                while nxt < len(arrivals) and arrivals[nxt] <= t:
                    self._new_request(nxt)
                    nxt += 1
                self.step(t)
                self.report.steps += 1
            self.drain()
        except InvariantViolation as exc:
            self.report.violations += 1
            self.report.notes.append(str(exc))
        rep = self.report
        rep.spills = self.coordinator.spills
        rep.prefix_hits = self.coordinator.prefix_hits
        rep.d2h_bytes = self.worker.d2h_bytes
        rep.invariant_checks = self.coordinator.machine.invariant_checks
        if self.o.trace is not None:
            from hisparse.spec.record import machine_trace
            from hisparse.spec.trace import write_trace

            trace = machine_trace(self.coordinator.machine)
            write_trace(self.o.trace, trace)
            rep.trace_steps = len(trace.steps)
        return rep


def simulate(opts: SimulateOptions, progress: bool = False) -> SimulateReport:
    return Simulation(opts).run(progress)


def report_json(rep: SimulateReport) -> dict[str, Any]:
    return asdict(rep)
