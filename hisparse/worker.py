"""Worker side: HiSparseWorker, HiSparseRuntime and HiSparseCacheHandle.

- ``HiSparseCacheHandle`` is what attention sees for one layer: the device cache,
  the shared block table and the request → hot-slot mapping.
- ``HiSparseRuntime`` (one per cache) owns that cache's host bytes, hot rows and
  GPU-LRU state through the executor's pools; an index-sharing follower's runtime
  has no LRU state of its own and replays its leader's miss plan.
- ``HiSparseWorker`` schedules the step's copies and reports enqueued and completed
  transfer IDs. It never allocates or frees logical blocks. With an import runner
  attached (``attach_importer``, hisparse/pdimport/) it also starts and aborts the
  metadata's P/D imports and reports what landed (``take_import_acks``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from hisparse.channel import Receiver, Sender
from hisparse.config import HiSparseConfig
from hisparse.executor.base import CachePools, Executor, ResolveBatch, Resolved, ResolveResult
from hisparse.msgshape import connector_metadata_problem
from hisparse.spec.messages import (
    HiSparseConnectorMetadata,
    ImportFailure,
    ImportLanded,
)
from hisparse.spec.state import Loc, RequestId

if TYPE_CHECKING:
    from hisparse.pdimport.runner import ImportRunner


class WorkerError(Exception):
    """A command the worker must refuse; nothing was applied."""


@dataclass
class BlockTables:
    """Per request, the location of each logical page; shared by every layer's handle."""

    tables: dict[RequestId, list[Loc]] = field(default_factory=dict)
    slots: dict[RequestId, int] = field(default_factory=dict)


@dataclass
class HiSparseRuntime:
    """One cache's host bytes, hot rows and (for a leader) GPU-LRU state."""

    layer: int
    leader: int
    pools: CachePools

    @property
    def is_follower(self) -> bool:
        return self.layer != self.leader


@dataclass
class HiSparseCacheHandle:
    """Attention-facing view of one layer: cache, block table, slot mapping."""

    layer: int
    runtime: HiSparseRuntime
    tables: BlockTables

    @property
    def cache(self) -> Any:
        return self.runtime.pools.device


@dataclass(frozen=True, eq=False)
class DecodeResult:
    """Rows per layer (leaders' rows serve their followers) and each leader's result.

    ``rows`` stay where the executor produced them (device arrays on a GPU). The
    counters are read from the results only when asked for, since on an accelerator
    that is a readback the decode path itself never does.
    """

    rows: dict[int, Any]
    results: dict[int, Resolved]
    followers: dict[int, int]  # leader layer -> number of follower layers replaying it
    row_bytes: int

    @cached_property
    def results_on_host(self) -> dict[int, ResolveResult]:
        """Each leader's whole result on the host (synchronizes an accelerator)."""
        return {layer: r.to_host() for layer, r in self.results.items()}

    @property
    def resident_hits(self) -> int:
        return sum(r.resident_hits for r in self.results_on_host.values())

    @property
    def hot_hits(self) -> int:
        return sum(r.hot_hits for r in self.results_on_host.values())

    @property
    def misses(self) -> int:
        return sum(r.misses for r in self.results_on_host.values())

    @property
    def h2d_bytes(self) -> int:
        """Bytes copied host -> device: each miss, once per leader and per follower."""
        return sum(
            r.misses * (1 + self.followers.get(layer, 0)) * self.row_bytes
            for layer, r in self.results_on_host.items()
        )


class HiSparseWorker:
    """Step-level transfers and decode resolution over registered cache handles."""

    def __init__(
        self,
        config: HiSparseConfig,
        executor: Executor[Any],
        *,
        gpu_blocks: int,
        slots: int,
        rank: int = 0,
    ) -> None:
        self.config = config
        self.rank = rank  # the tensor-parallel rank this worker reports as
        self.executor = executor
        self.layout = config.pool_layout(gpu_blocks, slots)
        self.tables = BlockTables()
        self.handles: list[HiSparseCacheHandle] = []
        for layer, leader in enumerate(config.leaders):
            pools = executor.allocate(self.layout, lru=layer == leader)
            runtime = HiSparseRuntime(layer, leader, pools)
            self.handles.append(HiSparseCacheHandle(layer, runtime, self.tables))
        self._free_slots = list(range(slots - 1, -1, -1))
        self._enqueued: list[int] = []
        self._landed: Counter[int] = Counter()
        self.d2h_bytes = 0
        # sequence numbers (hisparse/channel.py): metadata received, worker metas sent
        self._down = Receiver("connector metadata", rank)
        self._up = Sender()
        self._answer_due = False  # a sequenced metadata was applied: answer with a meta
        self.importer: ImportRunner | None = None

    def attach_importer(self, runner: ImportRunner) -> None:
        """Import P/D requests through ``runner`` (built over this worker's caches)."""
        if [id(p) for p in runner.pools] != [id(h.runtime.pools) for h in self.handles]:
            raise WorkerError("the import runner must land in this worker's caches")
        self.importer = runner

    def import_pools(self) -> list[Any]:
        """Every cache's pools in layer order: what an import runner lands in."""
        return [h.runtime.pools for h in self.handles]

    # -- requests ---------------------------------------------------------------

    def admit(self, request_id: RequestId, table: Sequence[Loc]) -> int:
        """Bind a running request's block table and give it a clean hot slot."""
        if request_id in self.tables.slots:
            raise WorkerError(f"request {request_id!r} is already admitted")
        if not self._free_slots:
            raise WorkerError("no free hot-state slot: raise `slots`")
        slot = self._free_slots.pop()
        for h in self.handles:
            if not h.runtime.is_follower:
                self.executor.reset_slot(h.runtime.pools, slot)
        self.tables.tables[request_id] = list(table)
        self.tables.slots[request_id] = slot
        return slot

    def release(self, request_id: RequestId) -> None:
        slot = self.tables.slots.pop(request_id, None)
        self.tables.tables.pop(request_id, None)
        if slot is not None:
            self._free_slots.append(slot)

    # -- commands down, acks up ---------------------------------------------------

    def apply(self, meta: HiSparseConnectorMetadata) -> None:
        """Enqueue this step's copies on every cache and apply table replacements.

        Everything is checked first, so a bad command changes nothing. A sequenced
        metadata numbered below the next one (a replay, or one sent before this worker's
        restart) is ignored before any copy is enqueued; one numbered past it raises
        ``MessageGap`` (one was lost: the engine runs the worker-loss path).
        """
        if (why := connector_metadata_problem(meta)) is not None:  # (model_construct)
            raise WorkerError(f"malformed connector metadata: {why}")
        numbers = self._numbers(meta)
        if numbers is not None and self._down.classify(*numbers) == "ignore":
            return
        self._apply(meta)
        if numbers is not None:
            self._down.accept(numbers[2])
            self._answer_due = True

    @property
    def replays_ignored(self) -> int:
        """Sequenced metadata ignored as replays or as sent before a restart."""
        return self._down.ignored

    def _numbers(self, meta: HiSparseConnectorMetadata) -> tuple[int, int, int] | None:
        """(epoch, since, seq) of a sequenced metadata for this rank; None: unsequenced."""
        if meta.seq is None or meta.since is None or meta.epoch is None:
            return None
        if not 0 <= self.rank < min(len(meta.since), len(meta.epoch)):
            raise WorkerError(f"connector metadata {meta.seq} numbers no epoch for rank "
                              f"{self.rank}")
        return meta.epoch[self.rank], meta.since[self.rank], meta.seq

    def _apply(self, meta: HiSparseConnectorMetadata) -> None:
        spec = self.layout
        transfers = meta.transfers
        if any(t.ranks is not None for t in transfers):  # some are not for every rank
            transfers = tuple(t for t in transfers if t.ranks is None or self.rank in t.ranks)
        for t in transfers:
            src_ok = 0 <= t.src_gpu_block < spec.gpu_blocks
            if not (src_ok and 0 <= t.dst_host_block < spec.host_blocks):
                raise WorkerError(f"transfer {t.transfer_id} has out-of-range coordinates")
        for r in meta.replacements:
            table = self.tables.tables.get(r.request_id)
            if table is not None and not (
                1 <= r.page_index <= len(table) and 0 <= r.host_block < spec.host_blocks
            ):
                raise WorkerError(f"replacement {r} does not fit request {r.request_id!r}")
        self._check_imports(meta)
        spills = [(t.transfer_id, t.src_gpu_block, t.dst_host_block) for t in transfers]
        if spills:  # one batched copy per cache for the whole step
            for h in self.handles:
                self.executor.enqueue_spills(h.runtime.pools, spills)
        copied = spec.block_tokens * spec.row_bytes * len(self.handles)
        if not self.executor.copies_spills:  # a shared pool's reader moves no bytes
            copied = 0
        for t in transfers:
            self._enqueued.append(t.transfer_id)
            self.d2h_bytes += copied
        for r in meta.replacements:
            table = self.tables.tables.get(r.request_id)
            if table is not None:  # a finished request's entry needs no update
                table[r.page_index - 1] = ("host", r.host_block)
        if self.importer is not None:
            for iid in meta.import_aborts:
                self.importer.abort(iid)
            for cmd in meta.imports:
                self.importer.start(cmd)

    def _check_imports(self, meta: HiSparseConnectorMetadata) -> None:
        """Every import command fits this worker, before anything is applied."""
        if not (meta.imports or meta.import_aborts):
            return
        if self.importer is None:
            raise WorkerError("import commands for a worker without an import runner")
        from hisparse.pdimport.runner import ImportRefused

        for cmd in meta.imports:
            try:
                self.importer.check(cmd)
            except ImportRefused as exc:
                raise WorkerError(str(exc)) from exc

    # -- imports ------------------------------------------------------------------

    def advance_imports(self) -> None:
        """Move every import in flight along (bind, poll, copy, release); never blocks."""
        if self.importer is not None:
            self.importer.advance()

    def take_import_acks(
        self,
    ) -> tuple[tuple[ImportLanded, ...], tuple[int, ...], tuple[ImportFailure, ...]]:
        """(imports_landed, imports_done, imports_failed) since the last call."""
        if self.importer is None:
            return (), (), ()
        return self.importer.take_acks()

    def restart(self) -> tuple[int, ...]:
        """Lose what a restarted worker loses: acks not yet reported (enqueued, and
        completions not yet taken from the stream). Returns the transfer IDs whose
        copies the stream still runs, for the coordinator's recovery; their
        completions are reported as usual once they land."""
        self._enqueued = []
        self.executor.completed()  # landed, never reported: the coordinator finds them idle
        if self.importer is not None:  # imports in flight are lost; the coordinator fails them
            self.importer.restart()
        self._down.lost()  # nothing sent before the loss is taken after it
        self._up.new_epoch()
        self._answer_due = True  # the first meta after a restart opens the new epoch
        return tuple(self.executor.queued())

    def take_acks(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(enqueued, completed) transfer IDs since the last call; never blocks."""
        enqueued, self._enqueued = tuple(self._enqueued), []
        completed = tuple(self.executor.completed())
        return enqueued, completed

    def stamp_meta(self, has_acks: bool) -> tuple[int, int, int] | None:
        """(epoch, since, seq) for this step's worker meta, or None when no meta goes up: one
        goes with acks, and one answers every sequenced metadata applied (so a lost meta
        shows as a gap at the next one)."""
        if not (has_acks or self._answer_due):
            return None
        self._answer_due = False
        return self._up.stamp()

    # -- decode -------------------------------------------------------------------

    def batch(
        self, topk: Mapping[RequestId, NDArray[np.int32]], step: int
    ) -> ResolveBatch:
        """Resident and host rows for each request's top-K, from the block table.

        A request's top-K is [K], or [S, K] for S speculative verification steps,
        which become S consecutive entries of its slot, resolved in order.
        """
        b = self.layout.block_tokens
        per = {r: np.atleast_2d(t) for r, t in topk.items()}
        names = [r for r, t in per.items() for _ in range(t.shape[0])]
        k = next(iter(per.values())).shape[1] if per else 0
        pos = np.concatenate(list(per.values())) if per else np.zeros((0, k), np.int32)
        resident = np.full(pos.shape, -1, np.int32)
        host = np.full(pos.shape, -1, np.int32)
        for e, r in enumerate(names):
            table = self.tables.tables[r]
            gpu = np.array([w[1] if w[0] == "gpu" else -1 for w in table], np.int64)
            hst = np.array([w[1] if w[0] == "host" else -1 for w in table], np.int64)
            p = pos[e]
            valid = p >= 0
            page = np.where(valid, p // b, 0)
            off = np.where(valid, p % b, 0)
            g, h = gpu[page], hst[page]
            resident[e] = np.where(valid & (g >= 0), g * b + off, -1)
            host[e] = np.where(valid & (g < 0), h * b + off, -1)
        slots = np.array([self.tables.slots[r] for r in names], np.int32)
        return ResolveBatch(slots=slots, topk=pos, resident_row=resident, host_row=host, step=step)

    def decode(
        self, topk_by_leader: Mapping[int, Mapping[RequestId, NDArray[np.int32]]], step: int
    ) -> DecodeResult:
        """Resolve each leader's top-K (one resolver launch per leader cache), then
        replay its miss plan on its followers (copy only). Nothing is read back."""
        rows: dict[int, Any] = {}
        results: dict[int, Resolved] = {}
        followers: Counter[int] = Counter()
        for h in self.handles:
            rt = h.runtime
            if rt.is_follower:
                self.executor.replay(rt.pools, results[rt.leader].plan)
                rows[h.layer] = rows[rt.leader]
                followers[rt.leader] += 1
                continue
            result = self.executor.resolve(rt.pools, self.batch(topk_by_leader[h.layer], step))
            rows[h.layer], results[h.layer] = result.rows, result
        return DecodeResult(rows, results, dict(followers), self.layout.row_bytes)
