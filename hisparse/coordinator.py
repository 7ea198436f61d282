"""HiSparseCoordinator: the scheduler side of HiSparse.

It owns the protocol state (one ``ProtocolMachine`` from ``hisparse.spec``, not a
copy of it): host block IDs, request/prefix associations, residency transitions,
spill decisions and the prefix lookup over published pages. HMA is reached only
through the ``KVCacheManager`` interface.

Worker acknowledgements arrive as a ``HiSparseWorkerMeta``. The coordinator
validates it whole, then replays the worker's reported steps into the machine
(WorkerEnqueue, WorkerComplete, WorkerReport) and consumes it (ConsumeMeta), so
the machine's run is a behaviour of the TLA+ spec and can be recorded as a trace.
Replaying at consumption time is sound: a source block stays pinned, and its
bytes unchanged, until its enqueued ack is consumed.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from hisparse.blockpool import KVCacheManager
from hisparse.config import HiSparseConfig
from hisparse.spec.errors import ActionNotEnabled, ProtocolError, UnknownTransfer
from hisparse.spec.machine import ProtocolMachine
from hisparse.spec.messages import BlockTableReplacement, HiSparseWorkerMeta, SparseKVPageTransfer
from hisparse.spec.state import Key, Loc, Page, ProtocolConfig, ProtocolState, RequestId


@dataclass(frozen=True)
class Admission:
    """Where a newly running request's pages live: ("gpu", block) or ("host", block)."""

    request_id: RequestId
    table: tuple[Loc, ...]
    prefix_hits: int


class HiSparseCoordinator:
    """Scheduler-side owner of logical host blocks and residency transitions."""

    def __init__(
        self,
        config: HiSparseConfig,
        kv: KVCacheManager,
        *,
        gpu_blocks: int,
        check: bool = False,
        record: bool = False,
    ) -> None:
        self.config = config
        self.kv = kv
        self.machine = ProtocolMachine(
            ProtocolConfig(
                gpu_blocks=gpu_blocks,
                host_pool_bytes=config.host_pool_bytes,
                host_block_bytes=config.host_block_bytes,
            ),
            check=check,
            record=record,
        )
        self._sent: set[int] = set()  # transfer IDs already handed to the connector
        self._replacements: list[BlockTableReplacement] = []
        self._publish_order: dict[int, int] = {}  # host block -> publish tick (eviction LRU)
        self._tick = 0
        # candidate free host blocks (a heap; a block freed later is pushed again)
        self._host_free = list(range(self.state.config.host_blocks))
        self.spills = 0
        self.prefix_hits = 0

    # -- requests -----------------------------------------------------------

    @property
    def state(self) -> ProtocolState:
        return self.machine.state

    def add_request(self, request_id: RequestId, page_keys: Sequence[Key]) -> None:
        """Declare a request and the prefix identities of its pages."""
        self.machine.add_request(request_id, page_keys)

    def lookup_prefix(self, request_id: RequestId) -> int:
        """Pages of the request's prefix served by published host pages."""
        if request_id not in self.state.page_keys:
            raise ActionNotEnabled("Arrive", f"unknown request {request_id!r}")
        return self.machine.hit_len(request_id)

    def gpu_blocks_needed(self, request_id: RequestId) -> int:
        hits = self.lookup_prefix(request_id)  # refuses an unknown request, typed
        return len(self.state.page_keys[request_id]) - hits

    def admit(self, request_id: RequestId) -> Admission | None:
        """Arrive: None (and nothing changes) if HMA cannot give the blocks now."""
        need = self.gpu_blocks_needed(request_id)
        blocks = self.kv.allocate(need)
        if blocks is None:
            return None
        try:
            self.machine.Arrive(request_id, blocks=blocks)
        except ProtocolError:  # refused: hand the blocks back, change nothing
            self.kv.free(blocks)
            raise
        hits = len(self.state.page_keys[request_id]) - need
        self.prefix_hits += hits
        table: list[Loc] = []
        for p in self.state.pages_of(request_id):
            where = self.state.loc[p]
            assert where is not None  # LivePagesReadable: a running request's pages have blocks
            table.append(where)
        return Admission(request_id, tuple(table), hits)

    def finish(self, request_id: RequestId) -> None:
        self.kv.free(self.machine.Finish(request_id))

    def abort(self, request_id: RequestId) -> None:
        """Abort at any moment; pinned blocks go back at their enqueued ack."""
        self.kv.free(self.machine.Abort(request_id))

    # -- spills ---------------------------------------------------------------

    def spillable(self) -> list[Page]:
        """Resident, unpinned pages of running requests, oldest request first."""
        s = self.state
        return [
            p
            for r, st in s.req.items()
            if st == "running"
            for p in s.pages_of(r)
            if (w := s.loc[p]) and w[0] == "gpu" and not s.src_pin[w[1]]
        ]

    def _free_host_block(self) -> int | None:
        s = self.state
        if s.host_used >= s.config.host_capacity and not self._evict_one():
            return None
        while self._host_free:  # lowest free block first; stale entries are skipped
            h = heapq.heappop(self._host_free)
            if s.host_state[h] == "free":
                return h
        return None

    def _evict_one(self) -> bool:
        """Evict the least recently published unreferenced host page (host-pool pressure)."""
        s = self.state
        victims = [
            h for h, st in enumerate(s.host_state) if st == "valid" and not s.host_refs.get(h)
        ]
        if not victims:
            return False
        h = min(victims, key=lambda b: self._publish_order.get(b, 0))
        self.machine.EvictHost(h)
        self._publish_order.pop(h, None)
        heapq.heappush(self._host_free, h)
        return True

    def spill(self, page: Page) -> int | None:
        """Start spilling one resident page; None if the host pool has no room."""
        h = self._free_host_block()
        if h is None:
            return None
        g = self.state.loc[page]
        assert g is not None
        tid = self.machine.StartSpill(page, h)
        self.kv.pin(g[1])
        self.spills += 1
        return tid

    def reclaim(self, blocks: int) -> int:
        """Spill enough pages that ``blocks`` GPU blocks come back at their enqueued acks."""
        started = 0
        for p in self.spillable():
            if started >= blocks:
                break
            if self.spill(p) is None:
                break
            started += 1
        return started

    # -- the two metadata directions -------------------------------------------

    def take_commands(
        self,
    ) -> tuple[tuple[SparseKVPageTransfer, ...], tuple[BlockTableReplacement, ...]]:
        """New page transfers and block-table replacements since the last call."""
        new = [t for tid, t in self.state.down.items() if tid not in self._sent]
        self._sent.update(t.transfer_id for t in new)
        transfers = tuple(
            SparseKVPageTransfer.model_construct(
                transfer_id=t.transfer_id, src_gpu_block=t.src, dst_host_block=int(t.dst)
            )
            for t in new
        )
        reps, self._replacements = tuple(self._replacements), []
        return transfers, reps

    def _validate(self, meta: HiSparseWorkerMeta) -> None:
        s = self.state
        for ids in (meta.enqueued, meta.completed):
            if len(set(ids)) != len(ids):  # a model_construct'ed meta skips the wire check
                dup = next(t for t in ids if ids.count(t) > 1)
                raise UnknownTransfer(dup, "acked twice in one direction of one meta")
        for tid in meta.enqueued:
            if tid not in s.down or tid not in self._sent:
                raise UnknownTransfer(tid, "enqueued ack for a transfer not awaiting one")
        enq = set(meta.enqueued)
        for tid in meta.completed:
            h = s.transfer_dst.get(tid)
            sp = s.spill[h] if h is not None else None
            if h is None or sp is None or sp.transfer_id != tid:
                raise UnknownTransfer(tid, "completed ack for a transfer that is not open")
            if not (tid in enq or (sp.phase == "enqueued" and s.copying_tid.get(h) == tid)):
                raise UnknownTransfer(tid, "completed ack before its enqueued ack")
        if s.up or s.w_enq or s.w_done:
            raise ActionNotEnabled("ConsumeMeta", "a previous worker meta is still pending")

    def on_worker_meta(self, meta: HiSparseWorkerMeta) -> None:
        """Enqueued IDs release source leases (stream order); completed IDs publish pages.

        The meta is validated whole first: a bad one raises and changes nothing.
        """
        if not meta.enqueued and not meta.completed:
            return
        self._validate(meta)
        m, s = self.machine, self.state
        for tid in meta.enqueued:
            m.WorkerEnqueue(tid)
        for tid in meta.completed:
            m.WorkerComplete(s.transfer_dst[tid])
        m.WorkerReport()
        moved = [s.spill[s.transfer_dst[t]] for t in meta.enqueued]
        m.ConsumeMeta()
        for sp in moved:
            assert sp is not None
            self.kv.unpin(sp.src)
            self.kv.free([sp.src])
            r, i = sp.page
            where = s.loc[sp.page]
            if where is not None and where[0] == "host":
                self._replacements.append(
                    BlockTableReplacement(request_id=r, page_index=i, host_block=int(where[1]))
                )
        for tid in meta.completed:
            h = s.transfer_dst[tid]
            if s.host_state[h] == "valid":
                self._tick += 1
                self._publish_order[h] = self._tick
            else:  # an aborted request's page was discarded
                heapq.heappush(self._host_free, h)
