"""The tensor-parallel run: one worker process per rank (GPU) against one coordinator.

Rank 0 also runs the scheduler side (coordinator and connector). Every step, in
lockstep: rank 0 decides (finish, abort, admit, spill) and sends the step's plan, with
the connector metadata as its JSON bytes, to every rank; each rank admits and prefills,
takes the commands (with shared backing the writer first, then the readers once the
writer's copy events are announced to them), decodes, and checks every resolved row bit
for bit against its own NumPy reference executor (the oracle, fed the same commands)
and against the bytes written for that position; then every rank's worker meta goes to
rank 0 as bytes and the coordinator consumes each as that rank's (the W-rank rule of
``docs/tensor-parallel.md``: a source goes back once every rank enqueued, a page is
published once no rank owes an ack), with its invariants checked after every action and
again after every step.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import random
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from hisparse.blockpool import BlockPool
from hisparse.config import HiSparseConfig
from hisparse.connector import HiSparseConnector, KVConnectorRole
from hisparse.coordinator import HiSparseCoordinator
from hisparse.executor.base import Executor
from hisparse.executor.cuda.tp import SharedReaderExecutor, SharedWriterExecutor
from hisparse.executor.reference import ReferenceExecutor
from hisparse.rows import locality_topk, rows_of
from hisparse.spec.invariants import check_invariants
from hisparse.spec.messages import CONNECTOR_METADATA, WORKER_META
from hisparse.tp.group import Group
from hisparse.worker import DecodeResult, HiSparseWorker
from hisparse.workload import Arrival, SyntheticShape, synthetic

EXECUTORS = ("cuda", "reference")
SPIN_US = 2000.0
"""Device time a timed region's spin kernel holds its stream: longer than the host's
queueing of a decode step or a step's spills."""


@dataclass(frozen=True)
class TpOptions:
    """The run's shape; defaults finish in seconds (the GPU test's workload)."""

    ranks: int = 2
    backing: str = "private"  # or "shared" (CUDA only: one registered /dev/shm file)
    executor: str = "cuda"  # or "reference" (CPU, private backing)
    requests: int = 24
    steps: int = 120  # most workload steps before the drain
    seed: int = 0
    layers: int = 2  # layer 1 follows layer 0's indexer
    top_k: int = 64
    block_tokens: int = 16
    row_bytes: int = 64
    gpu_blocks: int = 24
    host_blocks: int = 40
    min_pages: int = 3
    max_pages: int = 8
    prefixes: int = 2
    prefix_pages: int = 2
    arrival_rate: float = 0.5
    concurrency: int = 4
    spill_rate: float = 0.5  # chance per step of spilling a running request's oldest page
    abort_rate: float = 0.02
    shm_path: str = ""  # shared backing: the /dev/shm file (launch picks one)
    gpus: int = 0  # GPUs the ranks are spread over (rank r on GPU r % gpus); 0: one each
    trace: str = ""  # rank 0 records the protocol trace here (for hisparse check --trace)

    def device(self, rank: int) -> int:
        """The GPU of ``rank``."""
        return rank % self.gpus if self.gpus else rank

    def config(self) -> HiSparseConfig:
        return HiSparseConfig(
            host_pool_blocks=self.host_blocks, block_tokens=self.block_tokens,
            row_bytes=self.row_bytes, top_k=self.top_k, layers=self.layers,
            index_leaders=tuple(0 if i == 1 else i for i in range(self.layers)),
            tp_ranks=self.ranks, backing=self.backing,  # type: ignore[arg-type]
        )

    @property
    def host_pool_bytes(self) -> int:
        """One rank's view of the host cache: every cache's host pool."""
        return self.layers * self.host_blocks * self.block_tokens * self.row_bytes


def workload(o: TpOptions) -> list[Arrival]:
    """The run's arrivals (every rank can compute them: the seed fixes them)."""
    shape = SyntheticShape(o.requests, o.arrival_rate, o.min_pages, o.max_pages,
                           o.prefixes, o.prefix_pages, 4, 16)
    return synthetic(shape, o.seed)


def plan_limit(o: TpOptions, arrivals: list[Arrival]) -> int:
    """The most plans a run of ``arrivals`` takes before a rank calls it stuck: every
    arrival is in by step ``o.steps``; then, even one request at a time, a request
    needs its decode steps, its admission and release, and at most one refused
    admission per page it must free (each refusal reclaims the shortfall), plus the
    drain. A fixed multiple of ``o.steps`` is not enough for a long serial workload."""
    per = sum(a.decode_steps + len(a.page_keys) + 4 for a in arrivals)
    return o.steps + per + 64


class TpRunFailed(Exception):
    """A rank failed (a broken invariant, a refused command, a rule not enforced): the
    message carries its traceback. Wrong bytes are counted in the reports instead."""


# -- rank 0: the scheduler side ------------------------------------------------------------


class Scheduler:
    """Coordinator, scheduler-role connector and the workload's decisions (rank 0)."""

    def __init__(self, o: TpOptions, config: HiSparseConfig) -> None:
        self.o = o
        self.rng = random.Random(f"tp-{o.seed}")
        self.kv = BlockPool(o.gpu_blocks)
        self.coordinator = HiSparseCoordinator(config, self.kv, gpu_blocks=o.gpu_blocks,
                                               check=True, record=bool(o.trace))
        self.sched = HiSparseConnector(KVConnectorRole.SCHEDULER, coordinator=self.coordinator)
        self.arrivals: list[Arrival] = workload(o)
        self.keys: dict[str, int] = {}
        self.pages: dict[str, list[int]] = {}
        self.pending: list[str] = []
        self.running: dict[str, None] = {}  # admitted, in admission order
        self.left: dict[str, int] = {}
        self._next = 0
        self.steps_checked = 0

    def plan(self, t: int) -> dict[str, Any]:
        """The step's plan for every rank (JSON-able)."""
        c, o = self.coordinator, self.o
        while self._next < len(self.arrivals) and (
            self.arrivals[self._next].step <= t or t >= o.steps
        ):
            a = self.arrivals[self._next]
            self._next += 1
            c.add_request(a.request_id, a.page_keys)
            self.pages[a.request_id] = [self.keys.setdefault(k, len(self.keys))
                                        for k in a.page_keys]
            self.left[a.request_id] = a.decode_steps
            self.pending.append(a.request_id)
        released: list[str] = []
        for r in list(self.running):
            if self.left[r] <= 0 or self.rng.random() < o.abort_rate:
                (c.finish if self.left[r] <= 0 else c.abort)(r)
                del self.running[r]
                released.append(r)
        admitted: list[list[Any]] = []
        for r in list(self.pending):
            if len(self.running) >= o.concurrency:
                break
            adm = c.admit(r)
            if adm is None:
                c.reclaim(c.gpu_blocks_needed(r) - self.kv.num_free)
                break
            self.pending.remove(r)
            self.running[r] = None
            admitted.append([r, [list(w) for w in adm.table], self.pages[r]])
        if self.running and self.rng.random() < o.spill_rate:
            c.reclaim(1)
        meta = self.sched.build_connector_meta()
        topk = {r: self._topk(r).tolist() for r in self.running}
        for r in topk:
            self.left[r] -= 1
        idle = not self.running and not self.pending and self._next >= len(self.arrivals)
        return {
            "step": t + 1, "released": released, "admitted": admitted,
            "meta": None if meta is None else CONNECTOR_METADATA.dump_json(meta).decode(),
            "topk": topk, "drain": idle,
            "done": idle and not c.state.open_spills and meta is None,
        }

    def _topk(self, r: str) -> NDArray[np.int32]:
        return locality_topk(self.rng, len(self.pages[r]) * self.o.block_tokens, self.o.top_k)

    def consume(self, metas: list[bytes]) -> None:
        """Every rank's acks, each consumed as that rank's worker meta in rank order (the
        writer, rank 0, first); invariants checked after the step."""
        for raw in metas:
            if raw:
                self.sched.update_connector_output(raw)
        check_invariants(self.coordinator.state)
        self.steps_checked += 1


# -- every rank: the worker side and its oracle ----------------------------------------------


@dataclass
class RankReport:
    rank: int
    backing: str
    role: str
    steps: int = 0
    decodes: int = 0
    rows_checked: int = 0
    mismatches: int = 0
    resident_hits: int = 0
    hot_hits: int = 0
    misses: int = 0
    spills_taken: int = 0
    copied_bytes: int = 0  # device -> host spill bytes this rank copied
    refusals_checked: int = 0  # a shared reader's probes of the announce-first rule
    resolve_us: list[float] = field(default_factory=list)
    spill_us: list[float] = field(default_factory=list)
    memory: dict[str, int] = field(default_factory=dict)
    coordinator: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        out = asdict(self)
        for name in ("resolve_us", "spill_us"):
            xs = out.pop(name)
            out[f"{name}_median"] = statistics.median(xs) if xs else None
            out[f"{name}_n"] = len(xs)
        return out


class RankSide:
    """One rank's worker (CUDA or reference) and its reference oracle, fed the same."""

    def __init__(self, o: TpOptions, config: HiSparseConfig, executor: Executor[Any],
                 report: RankReport) -> None:
        self.o = o
        self.executor = executor
        self.worker = HiSparseWorker(config, executor, gpu_blocks=o.gpu_blocks,
                                     slots=o.concurrency, rank=report.rank)
        self.oracle = HiSparseWorker(config, ReferenceExecutor(), gpu_blocks=o.gpu_blocks,
                                     slots=o.concurrency, rank=report.rank)
        self.wconn = HiSparseConnector(KVConnectorRole.WORKER, worker=self.worker)
        self.pages: dict[str, NDArray[np.int64]] = {}
        self.report = report
        self.rng = random.Random(f"tp-acks-{o.seed}-{report.rank}")
        self.cuda = o.executor == "cuda"
        self._spin: Any = None

    def front(self, plan: dict[str, Any]) -> None:
        """Releases, then admissions with their prefill, on the worker and the oracle."""
        for r in plan["released"]:
            self.worker.release(r)
            self.oracle.release(r)
            self.pages.pop(r, None)
        for r, table, keys in plan["admitted"]:
            locs = [(str(w[0]), int(w[1])) for w in table]
            self.pages[r] = np.array(keys, np.int64)
            for w in (self.worker, self.oracle):
                w.admit(r, locs)  # type: ignore[arg-type]
                self._prefill(w, r)

    def _prefill(self, w: HiSparseWorker, r: str) -> None:
        b = self.o.block_tokens
        gpu = [(i, g) for i, (kind, g) in enumerate(w.tables.tables[r]) if kind == "gpu"]
        if not gpu:
            return
        rows = np.array([w.layout.resident_row(int(g), off) for _, g in gpu for off in range(b)])
        keys = np.repeat(self.pages[r][[i for i, _ in gpu]], b)
        offs = np.tile(np.arange(b, dtype=np.int64), len(gpu))
        for h in w.handles:
            w.executor.write_device_rows(h.runtime.pools, rows,
                                         rows_of(keys, h.layer, offs, self.o.row_bytes))

    def apply(self, meta: str | None) -> None:
        """The step's commands: the worker gets the bytes, the oracle the same commands."""
        if meta is None:
            return
        raw = meta.encode()
        parsed = CONNECTOR_METADATA.validate_json(raw)
        timer = self._timer(self._spill_stream()) if parsed.transfers else None
        self.wconn.bind_connector_metadata(raw)
        if timer is not None:
            self.report.spill_us.append(timer())
        self.report.spills_taken += len(parsed.transfers)
        self.oracle.apply(parsed)
        self.oracle.executor.release()

    def decode(self, topk: dict[str, list[int]], step: int) -> str:
        """Resolve on both, compare every row; the digest of the resolved bytes."""
        if not topk:
            return ""
        tk = {r: np.array(v, np.int32) for r, v in topk.items()}
        leaders = {lead: tk for lead in set(self.worker.config.leaders)}
        timer = self._timer(getattr(self.executor, "stream", None))
        got = self.worker.decode(leaders, step)
        if timer is not None:
            self.report.resolve_us.append(timer())
        want = self.oracle.decode(leaders, step)
        self.report.decodes += 1
        return self._compare(got, want, tk)

    def _compare(self, got: DecodeResult, want: DecodeResult,
                 topk: dict[str, NDArray[np.int32]]) -> str:
        b, width, rep = self.o.block_tokens, self.o.row_bytes, self.report
        pos = np.stack(list(topk.values())).astype(np.int64)
        valid = (pos >= 0).reshape(-1)
        page = np.where(pos >= 0, pos // b, 0)
        keys = np.stack([self.pages[r][page[e]] for e, r in enumerate(topk)]).reshape(-1)
        offs = np.where(pos >= 0, pos % b, 0).reshape(-1)
        g_host, w_host = got.results_on_host, want.results_on_host
        digest = hashlib.sha256()
        for lead, g in g_host.items():
            w = w_host[lead]
            same = (np.array_equal(g.rows, w.rows) and np.array_equal(g.plan, w.plan)
                    and (g.resident_hits, g.hot_hits, g.misses)
                    == (w.resident_hits, w.hot_hits, w.misses))
            rep.mismatches += 0 if same else int(valid.sum())
            rep.resident_hits += g.resident_hits
            rep.hot_hits += g.hot_hits
            rep.misses += g.misses
        for h, oh in zip(self.worker.handles, self.oracle.handles, strict=True):
            rows = np.asarray(g_host[h.runtime.leader].rows).reshape(-1).astype(np.int64)
            rows = np.where(rows >= 0, rows, 0)
            seen = self.executor.read_device_rows(h.runtime.pools, rows)
            ref = self.oracle.executor.read_device_rows(oh.runtime.pools, rows)
            expect = rows_of(keys, h.layer, offs, width)
            bad = ~(np.all(seen == expect, axis=1) & np.all(seen == ref, axis=1)) & valid
            rep.mismatches += int(bad.sum())
            rep.rows_checked += int(valid.sum())
            digest.update(np.ascontiguousarray(seen[valid]).tobytes())
        return digest.hexdigest()

    def acks(self, drain: bool) -> bytes:
        """This rank's worker meta as bytes (b"" for none); a drain lands every copy."""
        if drain or not self.cuda:  # the reference stream lands copies late, in batches
            queued = self.executor.queued()
            self.executor.release(None if drain else self.rng.randint(0, len(queued)))
        meta = self.wconn.get_worker_meta()
        return b"" if meta is None else WORKER_META.dump_json(meta)

    def _spill_stream(self) -> Any:
        """Where a rank's spill work goes: the copy stream, or for a shared-backing reader
        the compute stream, which waits there for the writer's copy event."""
        if not self.cuda:
            return None
        if self.report.role == "reader":
            return getattr(self.executor, "stream", None)
        return getattr(self.executor, "spill_stream", None)

    def _timer(self, stream: Any) -> Any:
        """Device time of what is queued on ``stream`` until the returned call (µs).

        A spin kernel first holds the stream, so the host has queued the start event,
        the work and the end event before the device reaches them: the figure is the
        work's device time, not Python's launch gaps (``hisparse.bench.gpu``)."""
        if stream is None or not self.cuda:
            return None
        from hisparse.bench.gpu import GpuTimer
        from hisparse.executor.cuda.backend import load_cupy

        cupy = load_cupy()
        if self._spin is None:
            self._spin = GpuTimer(spin_us=SPIN_US, flush=False)
        spin = self._spin
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        with stream:
            spin.spin((1,), (1,), (cupy.int64(spin.spin_cycles),))
        start.record(stream)

        def stop() -> float:
            end.record(stream)
            end.synchronize()
            return float(cupy.cuda.get_elapsed_time(start, end)) * 1000.0

        return stop


# -- building the executors (handles exchanged once) -----------------------------------------


def _memory(arena_bytes: int) -> dict[str, int]:
    """This process's pool memory: bytes it page-locked for host pools, its resident set
    by kind, and the machine's shared memory (``Shmem``: /dev/shm files among it)."""
    out = {"pinned_bytes": arena_bytes}
    for path, names in (("/proc/self/status", ("VmRSS", "RssAnon", "RssShmem", "RssFile")),
                        ("/proc/meminfo", ("Shmem", "MemAvailable"))):
        try:
            for line in Path(path).read_text().splitlines():
                name, _, value = line.partition(":")
                if name in names:
                    out[name.lower() + "_bytes"] = int(value.split()[0]) * 1024
        except OSError:
            pass
    return out


def build_executor(o: TpOptions, group: Group) -> tuple[Executor[Any], str]:
    """This rank's executor and its role; with shared backing the file is mapped by every
    rank and the event handles cross once."""
    if o.executor == "reference":
        if o.backing != "private":
            raise ValueError("the reference executor has no shared host memory: use private")
        return ReferenceExecutor(), "private"
    if o.executor != "cuda":
        raise ValueError(f"unknown executor {o.executor!r}; choose one of {', '.join(EXECUTORS)}")
    from hisparse.executor.cuda import CudaExecutor
    from hisparse.executor.cuda.backend import load_cupy

    device = o.device(group.rank)
    load_cupy().cuda.Device(device).use()
    max_positions = o.max_pages * o.block_tokens
    shape: dict[str, Any] = {"top_k": o.top_k, "max_positions": max_positions,
                             "device": device}
    if o.backing == "private":
        return CudaExecutor(**shape), "private"
    from hisparse.executor.cuda.hostmem import SharedHost, SharedHostFile
    path = Path(o.shm_path)
    if group.rank == 0:
        file = SharedHostFile(path, o.host_pool_bytes, create=True)
    group.barrier()
    if group.rank != 0:
        file = SharedHostFile(path, o.host_pool_bytes, create=False)
    group.barrier()
    if group.rank == 0:
        file.unlink()  # every rank has it mapped; the name is no longer needed
    arena = SharedHost(file)
    if group.rank == 0:
        writer = SharedWriterExecutor(host_arena=arena, **shape)
        group.broadcast(json.dumps([h.hex() for h in writer.events.handles()]).encode())
        for rank, raw in enumerate(group.gather(b"")):
            if rank:
                writer.add_reader(rank, [bytes.fromhex(h) for h in json.loads(raw)])
        return writer, "writer"
    handles = [bytes.fromhex(h) for h in json.loads(group.broadcast(None))]
    reader = SharedReaderExecutor(host_arena=arena, writer_handles=handles, **shape)
    group.gather(json.dumps([h.hex() for h in reader.events.handles()]).encode())
    return reader, "reader"


# -- the lockstep loop ----------------------------------------------------------------------


def _take_commands(side: RankSide, group: Group, meta: str | None) -> None:
    """The step's commands. Private: every rank takes them. Shared: the writer first; its
    announcement (which record covers each copy) crosses to the readers, who take them
    only then."""
    executor = side.executor
    if isinstance(executor, SharedWriterExecutor):
        side.apply(meta)
        group.broadcast(json.dumps(executor.take_announcement()).encode())
    elif isinstance(executor, SharedReaderExecutor):
        announced = json.loads(group.broadcast(None))
        if not side.report.refusals_checked and _has_transfers(meta):
            assert meta is not None
            _probe_unannounced(side, executor, meta)
        executor.learn({int(k): v for k, v in announced.items()})
        side.apply(meta)
    else:
        side.apply(meta)


def _has_transfers(meta: str | None) -> bool:
    return meta is not None and bool(CONNECTOR_METADATA.validate_json(meta).transfers)


def _probe_unannounced(side: RankSide, executor: SharedReaderExecutor, meta: str) -> None:
    """On the real reader, once: commands whose writer events are not announced yet are
    refused whole (nothing taken, nothing queued), and so is a wait on an unannounced
    record (it would bind to the ring slot's older record)."""
    from hisparse.executor.cuda.ipc import EventNotRecorded
    from hisparse.executor.cuda.tp import WriterEventMissing

    before = (executor.queued(), dict(executor._writer_record), side.worker._enqueued[:])
    try:
        side.wconn.bind_connector_metadata(meta.encode())
    except WriterEventMissing:
        side.report.refusals_checked += 1
    else:
        raise TpRunFailed("a reader took commands before the writer's events were announced")
    try:
        executor.writer.wait(executor.stream, executor.writer.ring.announced + 1)
    except EventNotRecorded:
        side.report.refusals_checked += 1
    else:
        raise TpRunFailed("a reader waited on an unannounced record")
    after = (executor.queued(), dict(executor._writer_record), side.worker._enqueued[:])
    if after != before:
        raise TpRunFailed(f"a refusal changed the reader: {before} -> {after}")



def run_rank(o: TpOptions, group: Group) -> dict[str, Any]:
    """One rank's whole run; rank 0 also schedules. Returns this rank's report."""
    config = o.config()
    sched = Scheduler(o, config) if group.rank == 0 else None
    before = _memory(0)
    executor, role = build_executor(o, group)
    arena = getattr(executor, "host_arena", None)
    rep = RankReport(group.rank, o.backing, role)
    side = RankSide(o, config, executor, rep)
    wall = time.perf_counter()
    for t in range(plan_limit(o, sched.arrivals if sched else workload(o))):
        raw = group.broadcast(json.dumps(sched.plan(t)).encode() if sched else None)
        plan = json.loads(raw)
        if plan["done"]:
            break
        side.front(plan)
        _take_commands(side, group, plan["meta"])
        digest = side.decode(plan["topk"], plan["step"])
        reads = executor.mark_reads() if isinstance(executor, SharedReaderExecutor) else 0
        acks = side.acks(plan["drain"])
        out = group.gather(json.dumps({"acks": acks.decode(), "reads": reads,
                                       "digest": digest}).encode())
        rep.steps += 1
        if sched is not None:
            parts = [json.loads(x) for x in out]
            if len({p["digest"] for p in parts}) != 1:
                rep.mismatches += 1  # the ranks resolved different bytes
            if isinstance(executor, SharedWriterExecutor):
                for rank, p in enumerate(parts):
                    if rank and p["reads"]:
                        executor.reads_done(rank, p["reads"])
            sched.consume([p["acks"].encode() for p in parts])
    else:
        raise TpRunFailed("the run did not drain")
    rep.copied_bytes = side.worker.d2h_bytes  # (a reader's executor copies nothing: 0)
    rep.memory = _memory(int(getattr(arena, "pinned_bytes", 0)))
    rep.memory.update({f"start_{k}": v for k, v in before.items() if k != "pinned_bytes"})
    rep.memory["wall_ms"] = int((time.perf_counter() - wall) * 1000)
    if sched is not None:
        c = sched.coordinator
        rep.coordinator = {
            "spills": c.spills, "prefix_hits": c.prefix_hits, "retired": c.retired,
            "invariant_checks": c.machine.invariant_checks, "steps_checked": sched.steps_checked,
            "open_spills": len(c.state.open_spills), "requests": len(sched.arrivals),
        }
        if o.trace:
            from hisparse.spec.record import machine_trace
            from hisparse.spec.trace import write_trace

            trace = machine_trace(c.machine)
            write_trace(o.trace, trace)
            rep.coordinator["trace_steps"] = len(trace.steps)
    group.barrier()  # no rank unmaps or destroys events while another still uses them
    close = getattr(executor, "close", None)
    if close is not None:
        del side
        close()
    if arena is not None and hasattr(arena, "close"):
        gc.collect()  # the pools (views of the mapping) go before the unmap
        arena.close()
    return rep.summary()


def os_shm_path() -> str:
    """A fresh /dev/shm name for one run's shared host pool."""
    return f"/dev/shm/hisparse-tp-{os.getpid()}-{time.time_ns()}"
