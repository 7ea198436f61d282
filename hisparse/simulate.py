"""``hisparse simulate``: a decode workload through the whole system, end to end.

Requests (synthetic ones sharing a few prefixes, or the Mooncake trace's real arrivals,
lengths and shared prefixes) arrive, prefill, decode with top-K drawn with locality,
get spilled under GPU pool pressure, finish or abort at any moment. Every step runs
coordinator → connector → worker → executor and back, with the worker's acks delayed
and batched at random. Every row the resolver returns is compared with the bytes the
simulator wrote for that (page content, layer, position): ``data_mismatches`` must be 0.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from hisparse.blockpool import BlockPool
from hisparse.config import HiSparseConfig
from hisparse.connector import HiSparseConnector, KVConnectorRole
from hisparse.coordinator import Admission, HiSparseCoordinator, ImportNeverFits, RequestNeverFits
from hisparse.executor.base import Executor
from hisparse.executors import make_executor
from hisparse.msgfaults import MessageFaults
from hisparse.pdimport.sim import PdOptions, PdSide
from hisparse.rows import locality_topk, rows_of
from hisparse.sharedpool import SharedHostExecutor, SharedHostPool
from hisparse.spec.errors import InvariantViolation, MessageGap
from hisparse.spec.messages import CONNECTOR_METADATA, WORKER_META, HiSparseConnectorMetadata
from hisparse.spec.state import Loc, RequestId
from hisparse.worker import HiSparseWorker
from hisparse.workerport import DecodeRows, LocalWorker, WorkerPort
from hisparse.workload import (
    Arrival,
    MooncakeShape,
    SyntheticShape,
    WorkloadError,
    mooncake,
    synthetic,
)

if TYPE_CHECKING:
    from hisparse.metrics import HiSparseMetrics

DEFAULT_MOONCAKE = Path("../shared/workloads/mooncake/conversation_trace.jsonl")


@dataclass(frozen=True)
class SimulateOptions:
    """The workload's shape and the system's sizes; defaults finish in seconds on 2 cores."""

    requests: int = 64  # synthetic: how many; mooncake: the first N of the trace
    steps: int = 400  # at most this many decode steps (the run ends early when all is done)
    seed: int = 0
    workload: str = "synthetic"  # or "mooncake"
    workload_path: Path | None = None  # the Mooncake trace (JSON Lines)
    arrival_rate: float = 0.24  # synthetic: mean arrivals per step
    time_compression: float = 1.0  # mooncake: trace time runs this many times faster
    max_decode: int | None = None  # mooncake: cap on decode steps per request
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
    concurrency: int = 12  # most requests running (decoding) at once
    num_speculative_tokens: int = 0  # extra verification steps resolved per request per decode
    # worker losses (restarts), at seeded steps before the last arrival; each maybe
    # also loses that step's connector metadata. 0: none (the run is as without it)
    worker_restarts: int = 0
    # chance per message of each channel fault (duplicate, delay, drop; seeded): 0 none
    message_faults: float = 0.0
    check: bool = True
    trace: Path | None = None
    executor: str = "reference"  # or "cuda"
    # run each worker in its own process (connector metadata, acks and decode results
    # cross as bytes); the report and trace are the same as in-process
    worker_processes: bool = False
    # tensor-parallel ranks: one worker each, the same commands to every rank, every
    # rank's acks to the coordinator, every rank's rows checked; "shared" backing: one
    # host allocation that only rank 0 (the writer) copies into
    tp: int = 1
    backing: str = "private"  # or "shared"
    # the indexer group through an OffloadingConnector under a MultiConnector with
    # HiSparse (hisparse/indexer_sim.py): its GPU blocks (None: gpu_blocks) and the
    # offload store's blocks
    indexer_offload: bool = False
    indexer_gpu_blocks: int | None = None
    offload_blocks: int = 48
    # P/D import (hisparse/pdimport/sim.py): the share of requests that arrive with
    # prefill KV (0: none, the run is as without it), how it moves, each worker's
    # staging slots
    pd_share: float = 0.0
    transport: str = "loopback"
    staging_slots: int = 4

    @property
    def host_block_bytes(self) -> int:
        return self.block_tokens * self.row_bytes * self.layers


BACKINGS = ("private", "shared")
PD_EXECUTORS = ("reference", "cuda")
"""The executors that implement the import calls (``executor.importing``)."""
WRITER = 0  # with the shared backing, the rank that copies


def build_workload(o: SimulateOptions) -> list[Arrival]:
    """The run's arrivals, before anything runs (a bad trace fails here)."""
    if o.workload == "synthetic":
        return synthetic(
            SyntheticShape(
                requests=o.requests, arrival_rate=o.arrival_rate, min_pages=o.min_pages,
                max_pages=o.max_pages, prefixes=o.prefixes, prefix_pages=o.prefix_pages,
            ),
            o.seed,
        )
    if o.workload == "mooncake":
        if o.workload_path is None:
            raise WorkloadError("the mooncake workload needs the trace's path")
        shape = MooncakeShape(o.requests, o.time_compression, o.block_tokens, o.max_decode)
        return mooncake(o.workload_path, shape)
    raise WorkloadError(f"unknown workload {o.workload!r}; choose synthetic or mooncake")


# Per-step series in the JSON report (one value per step, in this order of columns).
SERIES = (
    "running", "waiting", "gpu_blocks_used", "host_blocks_used", "spills", "resident_hits",
    "hot_hits", "misses", "h2d_bytes", "d2h_bytes", "decoded_tokens",
)


@dataclass
class SimulateReport:
    """The figures ``hisparse simulate --json`` writes (counts; rates are derived)."""

    workload: str = "synthetic"
    steps: int = 0
    requests: int = 0  # arrived
    finished: int = 0  # ran to their last decode step
    aborted: int = 0  # aborted while running (random aborts)
    never_admitted: int = 0  # still waiting at the end of the run
    too_large: int = 0  # of those: more pages than the whole GPU pool
    still_running: int = 0  # cut off by the end of the run
    not_arrived: int = 0  # due after the last step (--steps too small for the workload)
    admissions_refused: int = 0  # admit() refused: GPU pool short, reclaim started
    pages_admitted: int = 0
    prefix_hits: int = 0  # pages served from published host pages at admission
    spills: int = 0
    resident_hits: int = 0  # top-K lookups, summed over leader layers
    hot_hits: int = 0
    misses: int = 0  # served from the host tier (a host-to-device copy each)
    decoded_tokens: int = 0  # one per running request per step
    h2d_bytes: int = 0
    d2h_bytes: int = 0
    gpu_blocks: int = 0
    host_blocks: int = 0
    invariant_checks: int = 0  # protocol actions after which every invariant was checked
    violations: int = 0
    data_mismatches: int = 0
    worker_restarts: int = 0  # worker losses recovered (--worker-restarts)
    metas_lost: int = 0  # of those: the step's connector metadata never reached the worker
    open_at_loss: int = 0  # transfers open when the worker was lost (summed over losses)
    # --message-faults: each fault by direction and kind, and the gaps that took the
    # worker-loss path (also counted in worker_restarts)
    message_faults: dict[str, int] = field(default_factory=dict)
    trace_steps: int | None = None  # only with --trace
    indexer: dict[str, Any] = field(default_factory=dict)  # only with --indexer-offload
    imports: dict[str, Any] = field(default_factory=dict)  # only with --pd-share
    sizes: dict[str, Any] = field(default_factory=dict)
    series: dict[str, list[int]] = field(default_factory=lambda: {k: [] for k in SERIES})
    notes: list[str] = field(default_factory=list)


class Simulation:
    """One seeded run; ``run()`` returns the report."""

    def __init__(
        self,
        opts: SimulateOptions,
        arrivals: list[Arrival] | None = None,
        metrics: HiSparseMetrics | None = None,
    ) -> None:
        self.o = opts
        self.arrivals = build_workload(opts) if arrivals is None else arrivals
        self.rng = random.Random(opts.seed)
        leaders = tuple(0 if i == 1 else i for i in range(opts.layers))
        self.config = HiSparseConfig(
            host_pool_blocks=opts.host_blocks,
            block_tokens=opts.block_tokens,
            row_bytes=opts.row_bytes,
            top_k=opts.top_k,
            num_speculative_tokens=opts.num_speculative_tokens,
            layers=opts.layers,
            index_leaders=leaders,
            **self._tp_fields(),
        )
        self.kv = BlockPool(opts.gpu_blocks)
        self.coordinator = HiSparseCoordinator(
            self.config, self.kv, gpu_blocks=opts.gpu_blocks,
            check=opts.check, record=opts.trace is not None,
        )
        self.layout = self.config.pool_layout(opts.gpu_blocks, opts.concurrency)
        self.sched = HiSparseConnector(KVConnectorRole.SCHEDULER, coordinator=self.coordinator)
        self.shared: SharedHostPool | None = None
        self.ports: list[WorkerPort] = []
        self.pd: PdSide | None = None
        self.importing: dict[str, int] = {}  # imported request -> decode steps once running
        try:
            self._start_workers()
            if opts.pd_share > 0:
                self._start_pd()
        except BaseException:
            self.close()
            raise
        # rank 0 draws from the run's generator (one rank draws as before), others their own
        self._rank_rng = [self.rng] + [
            random.Random(f"rank-{r}-{opts.seed}") for r in range(1, opts.tp)
        ]
        self.metrics = metrics
        self.keys: dict[str, int] = {}
        self.pages: dict[str, NDArray[np.int64]] = {}  # request -> key id of each page
        self.decode_steps: dict[str, int] = {}
        self.pending: list[str] = []
        self.running: dict[str, int] = {}  # request -> decode steps left
        self.report = SimulateReport(
            workload=opts.workload, gpu_blocks=opts.gpu_blocks,
            host_blocks=self.config.host_blocks, sizes=self.sizes(),
        )
        self._t = 0
        self._losses = self._loss_steps()
        self.faults = (
            MessageFaults(self.o.message_faults, self.o.seed, self.o.tp)
            if self.o.message_faults > 0 else None
        )
        # its own generator, so a run without losses draws exactly as before
        self._loss_rng = random.Random(f"worker-loss-{opts.seed}")
        self._recovering: list[int] | None = None  # ranks still to restart (_recover)

    def _tp_fields(self) -> dict[str, Any]:
        """The config's rank fields; none for one private rank (the config as before)."""
        o = self.o
        if o.tp < 1:
            raise ValueError(f"tp must be at least 1, got {o.tp}")
        if o.backing not in BACKINGS:
            raise ValueError(f"unknown backing {o.backing!r}; choose one of {', '.join(BACKINGS)}")
        if o.backing == "shared" and o.executor != "reference":
            raise ValueError("the shared backing runs on the reference executor only")
        if o.tp == 1 and o.backing == "private":
            return {}
        return {"tp_ranks": o.tp, "backing": o.backing}

    def _start_workers(self) -> None:
        """One worker port per rank: in this process, or each in its own."""
        o = self.o
        longest = max([o.max_pages, *(len(a.page_keys) for a in self.arrivals)])
        positions = longest * o.block_tokens
        if o.backing == "shared":
            self.shared = SharedHostPool(self.layout, o.layers)
        for rank in range(o.tp):
            port: WorkerPort
            if o.worker_processes:
                from hisparse.workerproc import ProcessWorker

                port = ProcessWorker(
                    rank, self.config, gpu_blocks=o.gpu_blocks, slots=o.concurrency,
                    executor=o.executor, max_positions=positions,
                    shared=None if self.shared is None else self.shared.name,
                    writer=rank == WRITER,
                )
            else:
                executor = (make_executor(o.executor, self.config, positions)
                            if self.shared is None
                            else SharedHostExecutor(self.shared, writer=rank == WRITER))
                port = LocalWorker(rank, self.config, executor, gpu_blocks=o.gpu_blocks,
                                   slots=o.concurrency)
            self.ports.append(port)

    def _start_pd(self) -> None:
        """The prefiller and every worker's import runner (``--pd-share``)."""
        o = self.o
        if (o.executor not in PD_EXECUTORS or o.worker_processes or o.tp > 1
                or o.indexer_offload):
            raise ValueError("--pd-share runs on the reference or cuda executor, one worker "
                             "in this process, without --indexer-offload")
        capacity = sum(len(a.page_keys) for a in self.arrivals) + o.max_pages * o.concurrency
        self.pd = PdSide(PdOptions(o.pd_share, o.transport, o.staging_slots), o.seed,
                         o.layers, o.block_tokens, o.row_bytes, capacity)
        for port in self.ports:
            self.pd.attach(self.local(port.rank).worker, port.rank)

    def close(self) -> None:
        """Stop the worker processes (if any) and free the shared pool; idempotent."""
        if self.pd is not None:
            self.pd.close()
        for port in self.ports:
            port.close()
        if self.shared is not None:
            self.shared.close()

    @property
    def copiers(self) -> list[WorkerPort]:
        """The ranks that copy device -> host (the writer alone with a shared pool)."""
        return [self.ports[WRITER]] if self.shared is not None else self.ports

    def local(self, rank: int = 0) -> LocalWorker:
        """Rank ``rank``'s in-process worker (tests reach into its pools)."""
        port = self.ports[rank]
        if not isinstance(port, LocalWorker):
            raise RuntimeError(f"rank {rank}'s worker runs in another process")
        return port

    @property
    def worker(self) -> HiSparseWorker:
        return self.local().worker

    @property
    def executor(self) -> Executor[Any]:
        return self.local().executor

    @property
    def wconn(self) -> HiSparseConnector:
        return self.local().conn

    def _loss_steps(self) -> set[int]:
        """The steps at which the worker is lost: seeded, spread over the arrivals."""
        k = self.o.worker_restarts
        if k <= 0:
            return set()
        last = max((a.step for a in self.arrivals), default=0)
        horizon = range(1, max(2, min(self.o.steps, last + 1)))
        rng = random.Random(f"worker-loss-steps-{self.o.seed}")
        return set(rng.sample(horizon, min(k, len(horizon))))

    def sizes(self) -> dict[str, Any]:
        """What the run was sized as (printed first)."""
        o, c = self.o, self.config
        return {
            "workload": o.workload if o.workload_path is None
            else f"{o.workload} {o.workload_path}",
            "requests": len(self.arrivals), "gpu_blocks": o.gpu_blocks,
            "host_blocks": c.host_blocks, "host_pool_bytes": c.host_pool_bytes,
            "block_tokens": o.block_tokens, "row_bytes": o.row_bytes, "top_k": o.top_k,
            "layers": o.layers, "index_leaders": list(c.leaders), "max_running": o.concurrency,
            "hot_rows": c.hot, "speculative": o.num_speculative_tokens, "executor": o.executor,
            "seed": o.seed, "abort_rate": o.abort_rate, "check": o.check,
            **({"tp_ranks": o.tp, "backing": o.backing} if self._tp_fields() else {}),
            **({"worker_restarts": o.worker_restarts} if o.worker_restarts else {}),
            **({"message_faults": o.message_faults} if o.message_faults else {}),
            **({"pd_share": o.pd_share, "transport": o.transport,
                "staging_slots": o.staging_slots} if o.pd_share else {}),
        }

    # -- workload -------------------------------------------------------------

    def _key_id(self, key: str) -> int:
        return self.keys.setdefault(key, len(self.keys))

    def _arrive(self, a: Arrival) -> None:
        self.report.requests += 1
        if len(a.page_keys) > self.o.gpu_blocks:  # could never be admitted: say so
            self.report.too_large += 1
            self.report.never_admitted += 1
            return
        if a.request_id in self.importing and self.pd is not None:  # its import failed,
            self._import_ended(a.request_id)  # it retired, and its ID is declared again
        self.pages[a.request_id] = np.array([self._key_id(k) for k in a.page_keys], np.int64)
        tokens = None if self.pd is None else self.pd.draw(len(a.page_keys))
        if tokens is not None and self.pd is not None and not self.pd.hold(
            a.request_id, self.pages[a.request_id], tokens
        ):
            tokens = None  # the prefiller's buffer is full: it arrives without prefill KV
        if tokens is None:
            if self.pd is not None:  # (an ID used again: now without prefill KV)
                self.pd.prompt_tokens.pop(a.request_id, None)
            self.coordinator.add_request(a.request_id, a.page_keys)
        else:  # it arrives with prefill KV: a prefiller holds its pages
            self.coordinator.add_import(a.request_id, a.page_keys, tokens, self.o.block_tokens)
        self.decode_steps[a.request_id] = a.decode_steps
        self.pending.append(a.request_id)

    def _new_request(self, i: int) -> None:
        """One synthetic request drawn now (the stateful tests add requests one by one)."""
        o, r = self.o, f"req{i}"
        pages = self.rng.randint(o.min_pages, o.max_pages)
        shared = self.rng.randrange(o.prefixes + 1)  # o.prefixes = no shared prefix
        keys = tuple(
            f"pre{shared}:{j}" if shared < o.prefixes and j < o.prefix_pages else f"{r}:{j}"
            for j in range(pages)
        )
        self._arrive(Arrival(self._t, r, keys, self.rng.randint(5, 40)))

    def _topk(self, r: str) -> NDArray[np.int32]:
        """[S, K] for S = num_speculative_tokens + 1 verification steps ([K] without)."""
        steps = [self._topk_one(r) for _ in range(self.o.num_speculative_tokens + 1)]
        return steps[0] if len(steps) == 1 else np.stack(steps)

    def _topk_one(self, r: str) -> NDArray[np.int32]:
        n = len(self.pages[r]) * self.o.block_tokens
        if self.pd is not None:  # an imported prompt may end inside its final block
            n = self.pd.prompt_tokens.get(r, n)
        return locality_topk(self.rng, n, self.o.top_k)

    def _admit_workers(self, r: str, table: list[Loc]) -> None:
        """Every rank binds the admitted table; its GPU-resident pages are prefilled."""
        for port in self.ports:
            port.admit(r, table)
        self._prefill(r, table)

    def _prefill(self, r: str, table: list[Loc]) -> None:
        """Write the request's GPU-resident pages into every layer's resident rows."""
        b = self.o.block_tokens
        gpu = [(i, w[1]) for i, w in enumerate(table) if w[0] == "gpu"]
        if not gpu or self.o.executor == "accounting":  # no bytes to write or compare
            return
        pages = np.array([i for i, _ in gpu], np.int64)
        blocks = np.array([g for _, g in gpu], np.int64)
        offs = np.tile(np.arange(b, dtype=np.int64), len(gpu))
        spec = self.layout
        rows = np.array([spec.resident_row(int(g), o) for g in blocks for o in range(b)])
        keys = np.repeat(self.pages[r][pages], b)
        data = np.stack([rows_of(keys, layer, offs, self.o.row_bytes)
                         for layer in range(self.o.layers)])
        for port in self.ports:
            port.write_rows(rows, data)

    def _release_workers(self, r: str) -> None:
        for port in self.ports:
            port.release(r)

    def _verify(self, result: DecodeRows, topk: dict[str, NDArray[np.int32]]) -> None:
        """Every resolved row holds the bytes written for its position (reads back)."""
        if self.o.executor == "accounting":  # no bytes: nothing to compare
            return
        b = self.o.block_tokens
        entries = [(r, t) for r, ts in topk.items() for t in np.atleast_2d(ts)]
        pos = np.stack([t for _, t in entries]).astype(np.int64)
        valid = pos >= 0
        page = np.where(valid, pos // b, 0)
        keys = np.stack([self.pages[r][page[e]] for e, (r, _) in enumerate(entries)])
        offs = np.where(valid, pos % b, 0)
        for layer, seen in result.seen.items():
            want = rows_of(keys.reshape(-1), layer, offs.reshape(-1), self.o.row_bytes)
            bad = ~np.all(seen.reshape(want.shape) == want, axis=1) & valid.reshape(-1)
            self.report.data_mismatches += int(bad.sum())

    # -- one engine step -------------------------------------------------------

    def _schedule(self) -> None:
        c, o, rep = self.coordinator, self.o, self.report
        self._end_requests()
        if self.pd is not None:
            self._schedule_imports()
        for r in list(self.pending):
            if len(self.running) + len(self.importing) >= o.concurrency:
                break
            if self.pd is not None and r in self.pd.prompt_tokens:
                if not self._admit_import(r):
                    break
                continue
            adm = c.admit(r)
            if adm is None:  # GPU pool pressure: spill, retry next step
                rep.admissions_refused += 1
                need = c.gpu_blocks_needed(r) - self.kv.num_free
                c.reclaim(need)
                break
            self._admitted(r, adm)
            self.running[r] = self.decode_steps[r]

    def _end_requests(self) -> None:
        """Abort (at the abort rate) or finish the running requests whose turn it is."""
        c, rep = self.coordinator, self.report
        for r in list(self.running):
            if self.rng.random() < self.o.abort_rate:
                c.abort(r)
                self._release_workers(r)
                del self.running[r]
                rep.aborted += 1
            elif self.running[r] <= 0:
                c.finish(r)
                self._release_workers(r)
                del self.running[r]
                rep.finished += 1

    def _admitted(self, r: str, adm: Admission) -> None:
        """Book an admission: off the queue, counted, its table on every worker."""
        rep = self.report
        self.pending.remove(r)
        rep.prefix_hits += adm.prefix_hits
        rep.pages_admitted += len(adm.table)
        if self.metrics is not None:
            self.metrics.on_admission(adm, self._t)
        self._admit_workers(r, list(adm.table))

    # -- P/D imports (--pd-share; hisparse/pdimport/sim.py) ----------------------

    def _admit_import(self, r: str) -> bool:
        """Admit an imported request: its target chosen once (and kept across retries),
        its destinations leased, the import command queued. False: retry next step."""
        c, rep = self.coordinator, self.report
        try:
            target = c.admit_import(r)
        except (RequestNeverFits, ImportNeverFits):  # more than a whole pool: say so
            c.abort(r)
            self.pending.remove(r)
            rep.too_large += 1
            rep.never_admitted += 1
            assert self.pd is not None
            self.pd.forget(r)
            return True
        if target is None:  # the chosen target's destinations do not fit yet
            rep.admissions_refused += 1
            chosen = c.state.imp_of(r).target
            need = len(self.pages[r]) if chosen == "device" else 1
            c.reclaim(max(1, need - self.kv.num_free))
            return False
        self.pending.remove(r)
        rep.pages_admitted += len(self.pages[r])
        self.importing[r] = self.decode_steps[r]
        return True

    def _import_ended(self, r: RequestId) -> None:
        """r's import failed or was aborted, and it retired: nothing was published. An
        abort counts once, whenever the end is seen (at the next step, or when the ID
        comes back first), and the ID may be aborted again when it is used again."""
        assert self.pd is not None
        self.pd.failed(r)
        del self.importing[r]
        if r in self.pd.aborted:
            self.pd.aborted.discard(r)
            self.report.aborted += 1

    def _schedule_imports(self) -> None:
        """Imports that ended since the last step: completed ones run (every rank binds the
        table; their bytes came by import, nothing is prefilled), failed ones end."""
        assert self.pd is not None
        c = self.coordinator
        s = c.state
        for r in list(self.importing):
            status = s.req.get(r)  # a failed import retires at once (None)
            if status == "importing":
                if r not in self.pd.aborted and self.rng.random() < self.o.abort_rate:
                    c.abort(r)  # aborted mid-import: the worker stops, FailImport ends it
                    self.pd.aborted.add(r)
                continue
            if status == "running":
                self.pd.completed(r, s.imp_of(r).target)
                table: list[Loc] = []
                for i in range(1, len(self.pages[r]) + 1):
                    where = s.loc[(r, i)]
                    assert where is not None, f"completed import {r!r} left page {i} unplaced"
                    table.append(where)
                for port in self.ports:
                    port.admit(r, table)
                self.running[r] = self.importing.pop(r)
            elif status is None:  # failed or aborted: nothing was published
                self._import_ended(r)

    def _advance_imports(self) -> None:
        if self.pd is not None:
            for port in self.ports:
                self.local(port.rank).worker.advance_imports()
            self.pd.sample()

    def step(self, t: int) -> None:
        self._t = t
        rep, before_spills, before_d2h = self.report, self.coordinator.spills, self._d2h_bytes()
        self._schedule()
        meta = self.sched.build_connector_meta()
        lost = None
        if t in self._losses:  # with several ranks a seeded one is lost
            lost = self._loss_rng.randrange(self.o.tp) if self.o.tp > 1 else 0
        missed = None
        if lost is not None and self._loss_rng.random() < 0.5:
            missed = lost  # this step's metadata is lost with that worker
            rep.metas_lost += 1
        self._bind(meta, t, missed)
        if lost is not None:
            self._recover(t, lost)
        self._advance_imports()
        topk = {r: self._topk(r) for r in self.running}
        hits = (0, 0, 0, 0)
        if topk:
            for port in self.ports:  # every rank resolves the same top-K
                result = self._decode(port, topk, t + 1)
                self._verify(result, topk)
                if port.rank == 0:  # the replica's figures: rank 0's
                    if self.metrics is not None:
                        self.metrics.on_decode(result)
                    hits = (result.resident_hits, result.hot_hits, result.misses,
                            result.h2d_bytes)
            for r in topk:
                self.running[r] -= 1
        for port, rng in zip(self.ports, self._rank_rng, strict=True):
            queued = len(port.queued())
            if queued:  # the stream completes copies late and in batches
                port.land(rng.randint(0, queued))
            if rng.random() < 0.7:  # acks are sometimes held back a step or more
                self._deliver(port, t)
        if self.metrics is not None:
            self.metrics.on_step(self.coordinator)
        rep.resident_hits += hits[0]
        rep.hot_hits += hits[1]
        rep.misses += hits[2]
        rep.h2d_bytes += hits[3]
        rep.decoded_tokens += len(topk)
        row = (
            len(self.running), len(self.pending), self.o.gpu_blocks - self.kv.num_free,
            self.coordinator.state.host_used, self.coordinator.spills - before_spills,
            *hits[:3], hits[3], self._d2h_bytes() - before_d2h, len(topk),
        )
        for name, value in zip(SERIES, row, strict=True):
            rep.series[name].append(int(value))

    def _decode(self, port: WorkerPort, topk: dict[str, NDArray[np.int32]], step: int
                ) -> DecodeRows:
        """One rank's decode; a reader of the shared pool first lets the writer's
        copies it waits on land (its stream waits on their events)."""
        result = port.decode(topk, step=step)
        if result.waits_on:
            writer = self.ports[WRITER]
            queued = writer.queued()
            last = max(result.waits_on)
            if last not in queued:
                raise RuntimeError(f"rank {port.rank} waits on copy {last}, which the "
                                   "writer does not run")
            writer.land(queued.index(last) + 1)
            result = port.decode(topk, step=step)
            if result.waits_on:
                raise RuntimeError(f"rank {port.rank} still waits on {result.waits_on}")
        return result

    def _d2h_bytes(self) -> int:
        """Bytes every rank copied device -> host (a shared pool's readers copy none)."""
        return sum(port.d2h_bytes() for port in self.ports)

    def _deliver(self, port: WorkerPort, t: int) -> None:
        """The rank's acks since its last meta, up to the coordinator (as bytes). With a
        shared pool the writer's acks go first: a reader's enqueued ack is accepted only
        once the writer's for the same transfer is (the coordinator's merge rule)."""
        if self.shared is not None and port.rank != WRITER:
            self._deliver(self.ports[WRITER], t)
        raw = port.take_meta()
        if raw is not None:
            if self.metrics is not None:
                self.metrics.on_worker_meta(WORKER_META.validate_json(raw), t)
            faults = self.faults
            if faults is None:
                try:
                    self.sched.update_connector_output(raw)
                except MessageGap:  # lost before the network calmed (drain): the loss path
                    if not self.o.message_faults:
                        raise  # no channel loses messages here: a gap is a bug
                    self._recover(t, port.rank)
                return
            for m in faults.route("up", port.rank, raw):
                try:
                    self.sched.update_connector_output(m)
                except MessageGap:  # one before it was lost: the worker-loss path
                    self._gap(port.rank, t)
                    return

    def _worker_lost(self, rank: int, busy: tuple[int, ...]) -> None:
        if self.o.tp == 1 and self.shared is None:
            self.sched.on_worker_lost(busy)  # the single-worker call, as before
        else:
            self.sched.on_worker_lost(busy, rank)

    def _bind(self, meta: HiSparseConnectorMetadata | None, t: int,
              missed: int | None = None) -> None:
        """This step's metadata to every rank but ``missed`` (lost on its way there)."""
        if meta is not None:  # over the process boundary as bytes, validated once
            if self.metrics is not None:
                self.metrics.on_connector_meta(meta, t)
            raw = CONNECTOR_METADATA.dump_json(meta)
            for port in self.ports:  # rank order: the writer (rank 0) takes it first
                if port.rank == missed:
                    continue
                if self.faults is None:
                    port.bind(raw)
                    continue
                sent = self.faults.route("down", port.rank, raw)
                try:
                    for m in sent:
                        port.bind(m)
                except MessageGap:  # one before it was lost: the worker-loss path
                    self._gap(port.rank, t)
                    continue
                if raw not in sent:  # dropped or held back: the step's decode needs it,
                    self._gap(port.rank, t)  # so the worker notices now

    def _gap(self, rank: int, t: int) -> None:
        """A receiver refused a message past a lost one: restart that rank's worker and
        recover (its next metadata opens the new epoch)."""
        assert self.faults is not None
        self.faults.counts["gaps"] += 1
        self.report.message_faults = dict(self.faults.counts)
        self._recover(t, rank)

    def _recover(self, t: int, rank: int) -> None:
        """Restart ``rank``'s worker, and every rank whose recovery message is lost in
        turn, in one loop: never by recursion, since with several ranks a chain of losses
        has no bound in length (each restart re-sends to every rank), only in the ranks
        waiting at once."""
        if self._recovering is not None:  # inside a recovery: that loop restarts it
            if rank not in self._recovering:
                self._recovering.append(rank)
            return
        self._recovering = [rank]
        try:
            while self._recovering:
                self._lose_worker(t, self._recovering.pop(0))
        finally:
            self._recovering = None

    def _lose_worker(self, t: int, rank: int) -> None:
        """Rank ``rank``'s worker restarts before this step's decode (public API only):
        its unreported acks are gone, the coordinator recovers from what its stream
        still copies, and the re-sent block-table entries reach it before it reads."""
        port = self.ports[rank]
        queued = len(port.queued())
        if queued:  # some copies land before the loss, some after
            port.land(self._loss_rng.randint(0, queued))
        self.report.open_at_loss += len(self.coordinator.state.open_spills)
        busy = port.restart()
        self._worker_lost(port.rank, busy)
        self.report.worker_restarts += 1
        self._bind(self.sched.build_connector_meta(), t)

    def _drain_imports(self) -> None:
        """End of run: imports in flight finish (or fail) before anything else drains."""
        for _ in range(1000):
            if self.pd is None or not self.importing:
                return
            self._bind(self.sched.build_connector_meta(), self._t)
            self._advance_imports()
            for port in self.ports:
                port.land(None)
                self._deliver(port, self._t)
            self._schedule_imports()
        raise RuntimeError(f"imports still in flight after the drain: "
                           f"{ {r: self.coordinator.state.req.get(r) for r in self.importing} }")

    def drain(self) -> None:
        """End of run: stop what still runs or waits and let every copy and ack arrive."""
        self._drain_imports()
        for r in list(self.running):
            self.coordinator.finish(r)
            self._release_workers(r)
            del self.running[r]
            self.report.still_running += 1
        for r in self.pending:
            self.coordinator.abort(r)
            self.report.never_admitted += 1
            if self.pd is not None:
                self.pd.forget(r)
        self.pending.clear()
        if self.faults is not None:  # the network calms down: late messages arrive
            faults, self.faults = self.faults, None
            for port in self.ports:
                for m in faults.flush("down", port.rank):
                    self._late(partial(port.bind, m), port.rank)
                for m in faults.flush("up", port.rank):
                    self._late(partial(self.sched.update_connector_output, m), port.rank)
            self.report.message_faults = dict(faults.counts)
        for _ in range(3):  # send what is left, land every copy, deliver every ack
            self._bind(self.sched.build_connector_meta(), self._t)
            for port in self.ports:
                port.land(None)
            for port in self.ports:
                self._deliver(port, self._t)
        if self.metrics is not None:
            self.metrics.on_step(self.coordinator)
            self.metrics.flush()

    def _late(self, deliver: Callable[[], None], rank: int) -> None:
        """A held-back message arrives at the end: ignored, or a gap (the loss path)."""
        try:
            deliver()
        except MessageGap:
            self._recover(self._t, rank)

    def _done(self, nxt: int) -> bool:
        return nxt >= len(self.arrivals) and not self.running and not self.pending

    def run(self, progress: bool = False) -> SimulateReport:
        steps: Any = range(self.o.steps)
        if progress:
            from tqdm import tqdm

            steps = tqdm(steps, desc="simulate", unit="step", leave=False)
        nxt = 0
        rep = self.report
        try:
            try:
                for t in steps:
                    while nxt < len(self.arrivals) and self.arrivals[nxt].step <= t:
                        self._arrive(self.arrivals[nxt])
                        nxt += 1
                    self.step(t)
                    rep.steps += 1
                    if self._done(nxt):
                        break
                rep.not_arrived = len(self.arrivals) - nxt  # due after the last step
                self.drain()
            except InvariantViolation as exc:
                rep.violations += 1
                rep.notes.append(str(exc))
            rep.d2h_bytes = self._d2h_bytes()
        finally:  # worker processes stop whatever happened
            if progress:
                steps.close()
            self.close()
        rep.spills = self.coordinator.spills
        rep.invariant_checks = self.coordinator.machine.invariant_checks
        if self.pd is not None:
            rep.imports = self.pd.figures.doc()
        rep.notes += coverage_notes(rep)
        if self.o.trace is not None:
            from hisparse.spec.record import machine_trace
            from hisparse.spec.trace import write_trace

            trace = machine_trace(self.coordinator.machine)
            write_trace(self.o.trace, trace)
            rep.trace_steps = len(trace.steps)
        return rep


def coverage_notes(rep: SimulateReport) -> list[str]:
    """Say plainly when a run did not exercise what it is meant to show."""
    notes = []
    if rep.spills == 0:
        notes.append(
            "offload never exercised: no page was spilled to host memory (the GPU pool "
            "was never short); raise --requests or --max-running, or lower --gpu-blocks"
        )
    elif rep.misses == 0:
        notes.append("no decode step read a row from the host tier (0 host misses)")
    if rep.too_large:
        notes.append(
            f"{rep.too_large} request(s) never admitted: more pages than the whole GPU pool "
            "(raise --gpu-blocks)"
        )
    return notes


def make_simulation(opts: SimulateOptions, metrics: HiSparseMetrics | None = None
                    ) -> Simulation:
    """The run ``opts`` asks for (with ``indexer_offload``: hisparse/indexer_sim.py)."""
    if opts.indexer_offload:
        from hisparse.indexer_sim import IndexerSimulation

        return IndexerSimulation(opts, metrics=metrics)
    return Simulation(opts, metrics=metrics)


def simulate(
    opts: SimulateOptions, progress: bool = False, metrics: HiSparseMetrics | None = None
) -> SimulateReport:
    return make_simulation(opts, metrics=metrics).run(progress)


def report_json(rep: SimulateReport) -> dict[str, Any]:
    """The counts, the derived rates (``rates``) and the per-step series, as JSON."""
    from hisparse.report import rates

    doc = asdict(rep)
    if not doc["imports"]:  # a run without --pd-share writes what it wrote before
        del doc["imports"]
    doc["rates"] = rates(rep)
    return doc
