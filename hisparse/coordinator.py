"""HiSparseCoordinator: the scheduler side of HiSparse.

It owns the protocol state (one ``ProtocolMachine`` from ``hisparse.spec``, not a
copy of it): host block IDs, request/prefix associations, residency transitions,
spill decisions and the prefix lookup over published pages. HMA is reached only
through the ``KVCacheManager`` interface.

Worker acknowledgements arrive as a ``HiSparseWorkerMeta``. The coordinator
checks it whole against the machine's own rules, then replays the worker's
reported steps into the machine (WorkerEnqueue, WorkerComplete, WorkerReport)
and consumes it (ConsumeMeta), so the machine's run is a behaviour of the TLA+
spec and can be recorded as a trace. Replaying at consumption time is sound: a
source block stays pinned, and its bytes unchanged, until its enqueued ack is
consumed.

Tensor parallelism (``config.tp_ranks`` = W ranks, docs/tensor-parallel.md): the
same commands go to every rank, and every rank returns its own worker meta naming its
``rank``. Each is consumed on its own, in the order that rank sent them, by the spec's
rule: a transfer's GPU source goes back once every rank's enqueued ack has been
consumed, its host page is published once no rank owes an ack (every copier's completed
ack; with a shared pool, the writer's completed ack and every reader's enqueued ack,
which a reader sends once its stream is ordered after the writer's copy event). With a
shared pool the writer's (rank 0's) meta of a step is consumed before the readers'. An
unknown rank (``UnknownRank``), an ack a rank already gave (``RepeatedAck``) or one it
does not owe (``AckNotOwed``) is refused and changes nothing.

Cost follows live work: every call costs O(its own pages and transfers) or
O(log) of the host pool. The coordinator's own indexes (spillable pages, free
host blocks, the eviction LRU) change only together with the protocol state, and
an ended request retires (leaves every table) as soon as nothing references it.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from itertools import islice
from typing import Literal, NamedTuple

from hisparse.blockpool import KVCacheManager
from hisparse.channel import Receiver
from hisparse.config import HiSparseConfig
from hisparse.msgshape import worker_meta_ids, worker_meta_imports, worker_meta_numbers
from hisparse.spec.errors import (
    ActionNotEnabled,
    ProtocolError,
    UnknownImport,
    UnknownRank,
    UnknownTransfer,
)
from hisparse.spec.machine import ProtocolMachine
from hisparse.spec.messages import (
    BlockTableReplacement,
    HiSparseWorkerMeta,
    ImportCommand,
    ImportFailure,
    ImportLanded,
    PageImport,
    SparseKVPageTransfer,
    trusted_replacement,
    trusted_transfer,
)
from hisparse.spec.native import mypyc_attr
from hisparse.spec.state import LIVE_IMPORT, Key, Loc, Page, ProtocolState, RequestId, Spill


class RequestNeverFits(ProtocolError):
    """``admit`` refuses a request that needs more GPU blocks than the whole pool holds:
    waiting for blocks to come back can never admit it."""

    def __init__(self, request_id: RequestId, need: int, pool: int) -> None:
        super().__init__(
            f"request {request_id!r} needs {need} GPU blocks beyond its prefix hits; the "
            f"pool holds {pool}: split or truncate it, or raise the GPU pool"
        )
        self.request_id = request_id
        self.need = need
        self.pool = pool


class ImportNeverFits(ProtocolError):
    """``admit_import`` refuses a host-target import that needs more host blocks than the
    whole host pool holds."""

    def __init__(self, request_id: RequestId, need: int, pool: int) -> None:
        super().__init__(
            f"imported request {request_id!r} needs {need} host blocks; the host pool holds "
            f"{pool}: raise host_pool_gib"
        )
        self.request_id = request_id
        self.need = need
        self.pool = pool


class Admission(NamedTuple):
    """Where a newly running request's pages live: ("gpu", block) or ("host", block).
    (A NamedTuple: immutable, and one object per admission instead of a frozen
    dataclass's attribute-by-attribute construction.)"""

    request_id: RequestId
    table: tuple[Loc, ...]
    prefix_hits: int


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)  # (spec/native.py)
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
        self.gpu_blocks = gpu_blocks
        self.machine = ProtocolMachine.create(
            config.protocol(gpu_blocks), check=check, record=record
        )
        self.ranks = config.tp_ranks
        self._unsent: list[int] = []  # transfers started, not yet handed to the connector
        # per rank: handed to the connector, that rank's enqueued ack not consumed
        self._sent: list[set[int]] = [set() for _ in range(self.ranks)]
        self._replacements: list[BlockTableReplacement] = []
        self._resync = False  # the next metadata re-sends every host entry (after a loss)
        # resident, unpinned pages of running requests, oldest admission first
        self._resident: dict[Page, None] = {}
        self._running: dict[RequestId, None] = {}
        # published host pages no block-table entry references, least recently used first
        # (an OrderedDict: a plain dict popped from the front leaves holes that every
        # later look at its first entry walks over)
        self._lru: OrderedDict[int, None] = OrderedDict()
        # exactly the free host blocks, lowest first
        self._host_free = list(range(self.machine.state.config.host_blocks))
        self._host_capacity = self.machine.state.config.host_capacity  # a frozen constant
        self.spills = 0
        self.evictions = 0  # published host pages evicted to make room
        self.prefix_hits = 0
        self.retired = 0
        # sequence numbers (hisparse/channel.py): the next connector metadata's number,
        # per rank the number of the first one after its last loss; the metas received
        self._down_next = 0
        self._down_since = [0] * self.ranks
        self._down_epoch = [0] * self.ranks
        self._up_rx = [Receiver("worker meta", w) for w in range(self.ranks)]
        # P/D import (docs/pd-import.md): per import ID its request; per importing
        # request its ID, token count and block size, and the pages the worker reported
        # landed; the commands and aborts not yet handed to the connector
        self._next_import = 0
        self._import_req: dict[int, RequestId] = {}
        self._import_of: dict[RequestId, int] = {}
        self._import_size: dict[RequestId, tuple[int, int]] = {}
        self._landed: dict[int, set[int]] = {}
        self._imports_unsent: list[ImportCommand] = []
        self._aborts_unsent: list[int] = []
        self._import_sent: set[int] = set()
        self.imports_completed = {"device": 0, "host": 0}
        self.imports_failed = 0

    # -- requests -----------------------------------------------------------

    @property
    def state(self) -> ProtocolState:
        return self.machine.state  # (methods below read it directly: a property is a call)

    def add_request(self, request_id: RequestId, page_keys: Sequence[Key]) -> None:
        """Declare a request and the prefix identities of its pages (a retired ID may return)."""
        self.machine.add_request(request_id, page_keys)

    def lookup_prefix(self, request_id: RequestId) -> int:
        """Pages of the request's prefix served by published host pages."""
        return self.machine.hit_len(request_id)

    def gpu_blocks_needed(self, request_id: RequestId) -> int:
        return len(self.machine.state.page_keys[request_id]) - self.lookup_prefix(request_id)

    def admit(self, request_id: RequestId, max_hits: int | None = None) -> Admission | None:
        """Arrive: None (and nothing changes) if HMA cannot give the blocks now;
        ``RequestNeverFits`` if it never could. ``max_hits`` caps the host prefix hit
        (the indexer suffix rule's fallback: every group admitted with the prefix they
        share); the pages past it get GPU blocks."""
        m = self.machine
        m.check_arrive(request_id)
        s = m.state
        n = len(s.page_keys[request_id])
        hits = m.hit_len(request_id)
        hosts: list[int] | None = None
        if max_hits is not None and max_hits < hits:
            if max_hits < 0:
                raise ValueError(f"max_hits must be at least 0, got {max_hits}")
            hits = max_hits
            keys = s.page_keys[request_id]
            hosts = [min(s.prefix[keys[i]]) for i in range(hits)]
        need = n - hits
        if need > self.gpu_blocks:
            raise RequestNeverFits(request_id, need, self.gpu_blocks)
        blocks = self.kv.allocate(need)
        if blocks is None:
            return None
        try:
            m.Arrive(request_id, blocks=blocks, hosts=hosts)
        except ProtocolError:  # unreachable after check_arrive; hand the blocks back
            self.kv.free(blocks)
            raise
        self.prefix_hits += hits
        loc, resident = s.loc, self._resident
        table: list[Loc] = []
        for i in range(1, n + 1):  # (no pages_of list)
            p = (request_id, i)
            where = loc[p]
            assert where is not None  # LivePagesReadable: a running request's pages have blocks
            table.append(where)
            if where[0] == "host":
                self._lru.pop(where[1], None)  # referenced again: not a victim
            else:
                resident[p] = None
        self._running[request_id] = None
        return Admission(request_id, tuple(table), hits)

    def finish(self, request_id: RequestId) -> None:
        self._end(request_id, abort=False)

    def abort(self, request_id: RequestId) -> None:
        """Abort at any moment; pinned blocks go back at their enqueued ack."""
        self._end(request_id, abort=True)

    def _end(self, r: RequestId, *, abort: bool) -> None:
        m = self.machine
        s = m.state
        hosts: list[int] = []
        gpu: list[Page] = []  # pages that may be spillable: they leave the index
        keys = s.page_keys.get(r)
        if keys is not None:
            loc = s.loc
            for i in range(1, len(keys) + 1):  # (no pages_of list)
                p = (r, i)
                w = loc[p]
                if w is not None:
                    if w[0] == "host":
                        hosts.append(w[1])
                    else:
                        gpu.append(p)
        importing = s.req.get(r) == "importing"
        freed = m.Abort(r) if abort else m.Finish(r)
        if freed:
            self.kv.free(freed)
        if importing:
            self._abort_import(r)
        else:  # an import never admitted: its size is all this side kept of it
            self._import_size.pop(r, None)
        resident = self._resident
        for p in gpu:
            resident.pop(p, None)
        self._running.pop(r, None)
        for h in hosts:
            self._release_host(h)
        self._retire_one(r)

    def _retire_one(self, r: RequestId) -> None:
        """Retire ended request r if nothing references it any more."""
        if self.machine.state.req.get(r) in ("finished", "aborted"):
            try:  # Retire checks retire_refusal itself; a refusal changes nothing
                self.machine.Retire(r)
            except ActionNotEnabled:
                return
            self.retired += 1

    def _release_host(self, h: int) -> None:
        """A published page nothing references becomes the newest eviction candidate."""
        s = self.machine.state
        if s.host_state[h] == "valid" and not s.host_refs.get(h):
            self._lru.pop(h, None)
            self._lru[h] = None

    def _retire(self, requests: Iterable[RequestId]) -> None:
        """Retire each ended request that nothing references any more."""
        for r in requests:
            self._retire_one(r)

    # -- spills ---------------------------------------------------------------

    def spillable(self, limit: int | None = None) -> list[Page]:
        """Resident, unpinned pages of running requests, oldest admission first."""
        return list(self._resident if limit is None else islice(self._resident, limit))

    def _free_host_block(self) -> int | None:
        """The lowest free host block, evicting the LRU victim if the pool is full.
        Only called once the spill is known to be allowed."""
        if self.machine.state.host_used >= self._host_capacity and not self._evict_lru():
            return None
        return self._host_free[0] if self._host_free else None

    def _evict_lru(self) -> bool:
        """Evict the least recently used published, unreferenced host page, if any."""
        lru = self._lru
        if not lru:
            return False
        victim = next(iter(lru))
        self.machine.EvictHost(victim)
        del lru[victim]
        self.evictions += 1
        heapq.heappush(self._host_free, victim)
        return True

    def spill(self, page: Page) -> int | None:
        """Start spilling one resident page; None if the host pool has no room.

        A page the protocol does not allow to spill raises ``ActionNotEnabled`` before
        anything changes (no block is taken, nothing is evicted).
        """
        where = self.machine.check_spill(page)
        h = self._free_host_block()
        if h is None:
            return None
        tid = self.machine.StartSpill(page, h)
        heapq.heappop(self._host_free)  # h, the heap's top
        self._resident.pop(page, None)
        self._unsent.append(tid)
        self.kv.pin(where[1])
        self.spills += 1
        return tid

    def evict_published(self, limit: int | None = None) -> int:
        """Evict up to ``limit`` (all: None) published, unreferenced host pages, least
        recently used first; returns how many. O(pages evicted x log pool)."""
        n = 0
        while (limit is None or n < limit) and self._evict_lru():
            n += 1
        return n

    def reclaim(self, blocks: int) -> int:
        """Spill enough pages that ``blocks`` GPU blocks come back at their enqueued acks."""
        started = 0
        for p in self.spillable(max(blocks, 0)):
            if self.spill(p) is None:
                break
            started += 1
        return started


    # -- P/D import (docs/pd-import.md) ---------------------------------------------

    def add_import(
        self, request_id: RequestId, page_keys: Sequence[Key], num_tokens: int,
        block_size: int,
    ) -> None:
        """A request arrives with prefill KV from a prefill engine (ImportArrive):
        ``page_keys`` are its pages' prefix keys, ``num_tokens`` need not fill the last."""
        n = -(-num_tokens // block_size) if num_tokens > 0 and block_size > 0 else -1
        if n != len(page_keys):
            raise ValueError(f"{num_tokens} tokens in blocks of {block_size} are not "
                             f"{len(page_keys)} pages")
        m = self.machine
        m.add_import(request_id, page_keys)
        try:
            m.ImportArrive(request_id)
        except ProtocolError:  # (unreachable after add_import: a fresh declaration)
            m.Abort(request_id)
            m.Retire(request_id)
            raise
        self._import_size[request_id] = (num_tokens, block_size)

    def admit_import(self, request_id: RequestId) -> str | None:
        """Admission of an imported request: the landing target is chosen once, from
        the admission calculation (ChooseTarget), then its destinations are leased when
        they fit (AdmitImport) and the ImportCommand is queued; None (and nothing
        changes but the first call's choice) when they do not fit yet: retry later,
        with the same target. Returns the target."""
        m, s = self.machine, self.machine.state
        x = s.imp_of(request_id)
        if x.target == "none":
            if s.req.get(request_id) != "new" or x.phase != "announced":
                raise ActionNotEnabled("ChooseTarget", f"request {request_id!r} is not an "
                                                       "announced import")
            m.ChooseTarget(request_id, self.kv.num_free)
            x = s.imp_of(request_id)
        keys = s.page_keys[request_id]
        n = len(keys)
        need_gpu = n if x.target == "device" else 1
        if need_gpu > self.gpu_blocks:
            raise RequestNeverFits(request_id, need_gpu, self.gpu_blocks)
        hosts: list[int] = []
        if x.target == "host":
            if n > self._host_capacity:
                raise ImportNeverFits(request_id, n, self._host_capacity)
            while s.host_used + n > self._host_capacity and self._evict_lru():
                pass
            if s.host_used + n > self._host_capacity:
                return None
            hosts = [heapq.heappop(self._host_free) for _ in range(n)]  # the lowest free
        blocks = self.kv.allocate(need_gpu)
        if blocks is None:
            self._give_back_hosts(hosts)
            return None
        try:
            chosen = m.AdmitImport(request_id, blocks=blocks, hosts=hosts or None)
        except ProtocolError:
            self.kv.free(blocks)
            self._give_back_hosts(hosts)
            raise
        target: Literal["device", "host"] = "device" if chosen == "device" else "host"
        iid = self._next_import
        self._next_import = iid + 1
        self._import_req[iid] = request_id
        self._import_of[request_id] = iid
        self._landed[iid] = set()
        num_tokens, block_size = self._import_size[request_id]
        mirror = {n: blocks[0]} if target == "host" else {}
        pages = tuple(
            PageImport(
                page_index=i, key=keys[i - 1],
                host_block=hosts[i - 1] if hosts else None,
                gpu_block=blocks[i - 1] if target == "device" else mirror.get(i),
                valid_rows=min(block_size, num_tokens - (i - 1) * block_size),
            )
            for i in range(1, n + 1)
        )
        self._imports_unsent.append(ImportCommand(
            import_id=iid, request_id=request_id, target=target, num_tokens=num_tokens,
            block_size=block_size, pages=pages))
        return target

    def _give_back_hosts(self, hosts: list[int]) -> None:
        for h in hosts:
            heapq.heappush(self._host_free, h)

    def take_imports(self) -> tuple[tuple[ImportCommand, ...], tuple[int, ...]]:
        """The import commands and import aborts since the last call (for the metadata)."""
        cmds, self._imports_unsent = self._imports_unsent, []
        aborts, self._aborts_unsent = self._aborts_unsent, []
        for c in cmds:
            self._import_sent.add(c.import_id)
        return tuple(cmds), tuple(aborts)

    def _abort_import(self, r: RequestId) -> None:
        """An importing request was aborted: a command still unsent is withdrawn and the
        import fails here (the worker never saw it); else the abort goes down and the
        worker's failed ack returns everything."""
        iid = self._import_of.get(r)
        if iid is None:
            return
        unsent = [c for c in self._imports_unsent if c.import_id == iid]
        if unsent:
            self._imports_unsent.remove(unsent[0])
            self.machine.ImportError(r)
            self._fail_import(iid)
        else:
            self._aborts_unsent.append(iid)

    def _check_import_acks(
        self, landed: tuple[ImportLanded, ...], done: tuple[int, ...],
        failed: tuple[ImportFailure, ...],
    ) -> None:
        """Refuse (UnknownImport, nothing changes) acks of imports not handed over, pages
        outside them or landed twice, done before every page landed. O(the acks)."""
        s = self.machine.state
        new: dict[int, set[int]] = {}
        for a in landed:
            iid = a.import_id
            if iid not in self._import_sent:
                raise UnknownImport(iid, "landed pages of an import never handed over")
            n = len(s.page_keys[self._import_req[iid]])
            seen = self._landed[iid]
            for p in a.pages:
                if not 1 <= p <= n:
                    raise UnknownImport(iid, f"page {p} is not one of its {n} pages")
                if p in seen:
                    raise UnknownImport(iid, f"page {p} reported landed twice")
            new[iid] = set(a.pages)
        for iid in done:
            if iid not in self._import_sent:
                raise UnknownImport(iid, "done ack of an import never handed over")
            n = len(s.page_keys[self._import_req[iid]])
            if len(self._landed[iid]) + len(new.get(iid, ())) != n:
                raise UnknownImport(iid, "done before every page landed")
        for f in failed:
            if f.import_id not in self._import_sent:
                raise UnknownImport(f.import_id, "failed ack of an import never handed over")

    def _land_page(self, r: RequestId, i: int) -> None:
        """Replay the worker's steps for one landed page into the machine (one staging
        slot at a time: the worker's pool is its own)."""
        m, p = self.machine, (r, i)
        if m.state.imp_of(r).target == "device":
            m.LandChunk(p, 1)
            return
        m.LeaseStaging(p)
        m.LandChunk(p, 1)
        m.CopyToHost(p)
        if i == len(m.state.page_keys[r]):
            m.MirrorPage(p)
        m.ReleaseStaging(p)

    def _apply_import_acks(
        self, landed: tuple[ImportLanded, ...], done: tuple[int, ...],
        failed: tuple[ImportFailure, ...],
    ) -> None:
        s = self.machine.state
        for a in landed:
            r = self._import_req[a.import_id]
            for i in sorted(a.pages):
                self._landed[a.import_id].add(i)
                if s.imp_of(r).phase == "landing":
                    self._land_page(r, i)
        for iid in done:
            self._complete_import(iid)
        for f in failed:
            r = self._import_req[f.import_id]
            if s.imp_of(r).phase == "landing":
                self.machine.ImportError(r)
            self._fail_import(f.import_id)

    def _complete_import(self, iid: int) -> None:
        m, s = self.machine, self.machine.state
        r = self._import_req[iid]
        m.ReportImport(r)
        if s.req[r] == "aborted":  # its abort crossed the done ack: nothing is published
            self._fail_import(iid)
            return
        target = s.imp_of(r).target
        published = m.CompleteImport(r)
        self._forget_import(iid)
        for h in published:  # a mirrored page's host copy: published, unreferenced
            self._release_host(h)
        for i in range(1, len(s.page_keys[r]) + 1):
            where = s.loc[(r, i)]
            if where is not None and where[0] == "gpu":
                self._resident[(r, i)] = None
        self._running[r] = None
        self.imports_completed[target] = self.imports_completed.get(target, 0) + 1

    def _fail_import(self, iid: int) -> None:
        """FailImport: every GPU and host block of the import goes back; r ends aborted."""
        r = self._import_req[iid]
        gpus, hosts = self.machine.FailImport(r)
        self.kv.free(gpus)
        for h in hosts:
            if self.machine.state.host_state[h] == "free":
                heapq.heappush(self._host_free, int(h))
        self._forget_import(iid)
        self.imports_failed += 1
        self._retire_one(r)

    def _forget_import(self, iid: int) -> None:
        r = self._import_req.pop(iid)
        self._import_of.pop(r, None)
        self._import_size.pop(r, None)
        self._landed.pop(iid, None)
        self._import_sent.discard(iid)
        if iid in self._aborts_unsent:
            self._aborts_unsent.remove(iid)

    def _fail_lost_imports(self, failed: list[RequestId]) -> None:
        """A worker loss failed these imports: FailImport returns their blocks."""
        for r in failed:
            iid = self._import_of.get(r)
            if iid is not None:
                self._imports_unsent = [c for c in self._imports_unsent if c.import_id != iid]
                self._fail_import(iid)

    def importing(self) -> int:
        """Imports admitted and not yet ended (live work)."""
        return sum(1 for x in self.machine.state.imp.values() if x.phase in LIVE_IMPORT)

    # -- the two metadata directions -------------------------------------------

    def take_commands(
        self,
    ) -> tuple[tuple[SparseKVPageTransfer, ...], tuple[BlockTableReplacement, ...]]:
        """New page transfers and block-table replacements since the last call.

        The same commands go to every rank; one that a rank's loss dropped before it was
        handed over names the ranks that still take it (``ranks``)."""
        s = self.machine.state
        tids, self._unsent = self._unsent, []
        if self.ranks > 1:
            return self._take_ranked(tids), self._take_replacements()
        if not tids:
            return (), self._take_replacements()
        down, sent = s.down[0], self._sent[0]
        out: list[SparseKVPageTransfer] = []
        for tid in tids:  # one loop, no comprehension frames: this runs every step
            t = down.get(tid)
            if t is None:
                continue
            sent.add(tid)
            out.append(trusted_transfer(tid, t.src, int(t.dst)))
        return tuple(out), self._take_replacements()

    def _take_ranked(self, tids: list[int]) -> tuple[SparseKVPageTransfer, ...]:
        """``take_commands``' transfers with W ranks: each names the ranks that still hold
        it unless every rank does."""
        downs, sent = self.machine.state.down, self._sent
        out: list[SparseKVPageTransfer] = []
        for tid in tids:
            holders = [w for w, d in enumerate(downs) if tid in d]
            if not holders:
                continue
            t = downs[holders[0]][tid]
            for w in holders:
                sent[w].add(tid)
            out.append(
                trusted_transfer(
                    tid,
                    t.src,
                    int(t.dst),
                    None if len(holders) == len(downs) else tuple(holders),
                )
            )
        return tuple(out)

    def _take_replacements(self) -> tuple[BlockTableReplacement, ...]:
        """Block-table replacements since the last call (all of them after a loss)."""
        s = self.machine.state
        reps, self._replacements = self._replacements, []
        if self._resync:  # a lost metadata may have carried replacements: send them all
            self._resync = False
            reps = [
                BlockTableReplacement(request_id=r, page_index=p[1], host_block=int(w[1]))
                for r in self._running
                for p in s.pages_of(r)
                if (w := s.loc[p]) is not None and w[0] == "host"
            ]
        return tuple(reps)

    def stamp_metadata(self) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
        """(seq, since, epoch) for the connector metadata built now (numbers only grow)."""
        seq = self._down_next
        self._down_next = seq + 1
        return seq, tuple(self._down_since), tuple(self._down_epoch)

    def awaiting_acks(self) -> bool:
        """A transfer is open: a metadata goes every step, so a lost one shows."""
        return bool(self.machine.state.open_spills) or bool(self._import_req)

    @property
    def metas_ignored(self) -> int:
        """Sequenced worker metas ignored as replays or as sent before a loss."""
        return sum(rx.ignored for rx in self._up_rx)

    def on_worker_meta(self, meta: HiSparseWorkerMeta) -> None:
        """Rank ``meta.rank``'s acks: a transfer every rank enqueued releases its source
        lease (stream order); one no rank owes an ack for any more publishes its page.

        The meta is checked whole first, by the machine's own rules (also one built
        with ``model_construct``, which skips validation): a bad one raises and
        changes nothing.
        """
        w = meta.rank
        if not (type(w) is int and 0 <= w < self.ranks):
            raise UnknownRank(w, self.ranks)
        numbers = worker_meta_numbers(meta)  # BadSequence when malformed
        rx: Receiver | None = None
        seq: int | None = None
        if numbers is not None:
            epoch, since, seq = numbers
            rx = self._up_rx[w]
            if rx.classify(epoch, since, seq) == "ignore":  # a replay, or sent before a loss
                return
        # exact ints: a model_construct'ed meta may hold anything where the IDs go (read
        # there, not here, where mypyc would check the declared tuple type first)
        enq, done = worker_meta_ids(meta)
        i_landed, i_done, i_failed = worker_meta_imports(meta)
        importing = bool(i_landed or i_done or i_failed)
        if importing:
            self._check_import_acks(i_landed, i_done, i_failed)  # raises, nothing changed
        if not enq and not done:
            if importing:
                self._apply_import_acks(i_landed, i_done, i_failed)
            if rx is not None and seq is not None:
                rx.accept(seq)
            return
        m, s = self.machine, self.machine.state
        sent = self._sent[w]
        for tid in enq:
            if tid not in sent:
                m.check_report(enq, done, w)  # names a repeated or an unowed ack
                raise UnknownTransfer(tid, "enqueued ack for a transfer never handed over")
        m.check_report(enq, done, w)
        # everything below is enabled (check_report): plain loops, no comprehension frames
        dst, spill, req = s.transfer_dst, s.spill, s.req
        moved: list[tuple[int, Spill]] = []
        closing: list[int] = []
        ended: list[RequestId] = []  # requests of these transfers that may retire after
        reader = w not in m.copiers  # a reader's enqueued ack is its last
        for tid in enq:
            h = dst[tid]
            sp = spill[h]
            assert sp is not None  # an open transfer (check_report)
            if sp.phase == "sent":
                moved.append((h, sp))
            if reader:
                closing.append(h)
            m.WorkerEnqueue(tid, w)
            sent.discard(tid)
            if req[sp.page[0]] != "running":
                ended.append(sp.page[0])
        for tid in done:
            h = dst[tid]
            sp = spill[h]
            if sp is not None and req[sp.page[0]] != "running":
                ended.append(sp.page[0])
            closing.append(h)
            m.WorkerComplete(h, w)
        m.WorkerReport(w)
        m.ConsumeMeta(w)
        if moved:
            kv, loc, reps = self.kv, s.loc, self._replacements
            for h, sp in moved:
                now = spill[h]
                if now is not None and now.phase == "sent":
                    continue  # another rank has not enqueued it yet: the source stays leased
                r, i = page = sp.page
                kv.unpin(sp.src)
                kv.free((sp.src,))
                where = loc.get(page)  # (None: the request retired or its entry is gone)
                if where is not None and where[0] == "host":
                    # trusted values: no re-validation
                    reps.append(trusted_replacement(r, i, int(where[1])))
        if closing:
            host_state = s.host_state
            for h in closing:
                if spill[h] is not None:
                    continue  # another rank still owes an ack
                if host_state[h] == "valid":
                    self._release_host(h)
                else:  # an aborted request's or an abandoned transfer's page was discarded
                    heapq.heappush(self._host_free, h)
        for r in ended:
            self._retire_one(r)
        if importing:
            self._apply_import_acks(i_landed, i_done, i_failed)
        if rx is not None and seq is not None:
            rx.accept(seq)

    def on_worker_lost(self, still_copying: Iterable[int], rank: int = 0) -> None:
        """Rank ``rank``'s worker restarted or a metadata message to or from it was lost
        (WorkerLoss).

        ``still_copying``: the transfer IDs the restarted worker's stream still runs.
        Transfers not known enqueued on every rank are abandoned (sources unpinned,
        nothing published); the rank owes no ack any more except for a copy still
        running; a transfer no rank owes an ack for closes (published if it landed
        everywhere, freed otherwise). Checked whole first: an unknown rank, or an ID
        that is not an open transfer handed to that rank, raises and changes nothing.
        """
        s, m = self.machine.state, self.machine
        w = rank
        if not (type(w) is int and 0 <= w < self.ranks):
            raise UnknownRank(w, self.ranks)
        busy = set(still_copying)
        sent, copying_tid = self._sent[w], s.copying_tid[w]
        for tid in busy:
            h = m.open_transfer(tid)
            if h is None:
                raise UnknownTransfer(tid, "reported copying, but not an open transfer")
            if w not in m.copiers:
                raise UnknownTransfer(tid, f"reported copying by rank {w}, which copies nothing")
            if not (tid in sent or copying_tid.get(h) == tid):
                raise UnknownTransfer(tid, "reported copying, but never handed to the worker")
        # the stream as the worker reports it: what runs was enqueued, what left it landed
        for tid in sorted(busy):
            if tid in s.down[w]:
                m.WorkerEnqueue(tid, w)
        for h in sorted(s.open_spills):
            copying = copying_tid.get(h)
            if copying is not None and copying not in busy:
                m.WorkerComplete(h, w)
        touched = {sp.page[0] for h in s.open_spills if (sp := s.spill[h]) is not None}
        out = m.WorkerLoss(w)
        self._fail_lost_imports(out.imports_failed)
        for g in out.unpinned:
            self.kv.unpin(g)
        self.kv.free(out.returned)
        for p in out.resident:
            self._resident[p] = None
        for h in out.freed:
            heapq.heappush(self._host_free, h)
        for h in out.published:
            self._release_host(h)
        # the rank's commands are gone; one not handed over yet still goes to the others
        self._unsent = [tid for tid in self._unsent if any(tid in d for d in s.down)]
        sent.clear()
        self._replacements.clear()
        self._resync = True
        # a new epoch on both channels of the rank: nothing sent before is taken after
        self._up_rx[w].lost()
        self._down_since[w] = self._down_next
        self._down_epoch[w] += 1
        self._retire(touched)

    # -- introspection (tests, benchmarks) ---------------------------------------

    def table_sizes(self) -> dict[str, int]:
        """Entries in every table that grows with requests or transfers (0 when drained)."""
        s = self.machine.state
        return {
            "req": len(s.req),
            "page_keys": len(s.page_keys),
            "loc": len(s.loc),
            "prefix": len(s.prefix),
            "transfer_dst": len(s.transfer_dst),
            "copying_tid": sum(len(c) for c in s.copying_tid),
            "host_refs": len(s.host_refs),
            "req_refs": len(s.req_refs),
            "open_spills": len(s.open_spills),
            "down": sum(len(d) for d in s.down),
            "up": sum(len(u) for u in s.up),
            "unsent": len(self._unsent),
            "sent": sum(len(x) for x in self._sent),
            "replacements": len(self._replacements),
            "resident": len(self._resident),
            "running": len(self._running),
            "imp": len(s.imp),
            "pg": len(s.pg),
            "imp_gpu": len(s.imp_gpu),
            "imports": len(s.imports),
            "import_req": len(self._import_req),
            "import_of": len(self._import_of),
            "import_size": len(self._import_size),
            "landed": len(self._landed),
            "import_sent": len(self._import_sent),
            "imports_unsent": len(self._imports_unsent),
            "aborts_unsent": len(self._aborts_unsent),
        }
