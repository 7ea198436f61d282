"""The engine's indexer group offloaded through the generic OffloadingConnector.

The engine keeps the indexer's keys in ``IndexCache``, a normal GPU cache group that
HiSparse never touches. Seen as a block pool, block ``slot * max_pages + page`` is the
keys (every indexer owner's, FP8 scales included) of positions ``page * block_tokens``
onward of the request in ``slot``. This side drives an ``OffloadingScheduler`` over
those blocks, beside the HiSparse scheduler:

- **Store**: when HiSparse starts spilling a complete page (``on_spill``), that page's
  indexer block is stored too (a block already held is not stored twice).
- **Restore** at admission, by the suffix rule (spec/suffix.py, as indexer_sim.py runs
  it): a slot's rows are private, so the GPU indexer hit is 0 and the missing suffix is
  the whole HiSparse host hit. If every block of it is stored, it is restored and
  prefill computes keys only past it; otherwise every group falls back to the prefix
  they share (none): HiSparse's hit is capped at 0 and prefill recomputes the MLA rows
  and re-runs the indexer's key projection for every position.

Copies run on the engine's stream at the moment they are decided (``flush``), so the
device orders a store before any later write of its rows, and a restore before the
prefill and the decode steps that read its rows: no host waits for a copy and the
decode step stays free of host syncs. Acks (delivered after each step, whose own
synchronization has passed them) only move the store's bookkeeping: a block becomes
restorable at its store's ack, a restored block's host slot stays pinned until its ack.

Plain Python: the worker half (the copies) is given. engine/offload_gpu.py has the torch
worker over an ``IndexCache``; CPU tests give the numpy ``OffloadingWorker``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Protocol

from hisparse.connectors.offload_store import BlockHash, chain_hashes
from hisparse.connectors.offloading import OffloadingScheduler
from hisparse.connectors.wire import OffloadMetadata
from hisparse.engine.schedule import HiSparseScheduler
from hisparse.engine.workload import EngineRequest
from hisparse.spec.suffix import SuffixPlan, plan_suffix


class OffloadWorkerHalf(Protocol):
    """What this side needs of an OffloadingWorker (numpy or torch)."""

    def parse_metadata(self, raw: bytes) -> OffloadMetadata: ...

    def bind_metadata(self, parsed: object) -> None: ...

    def land(self, n: int | None = None) -> None: ...

    def get_worker_meta(self) -> bytes | None: ...


@dataclass
class IndexerOffloadCounts:
    """What the suffix rule decided at admission (the store's own figures are in
    ``OffloadingScheduler.get_stats``)."""

    admissions: int = 0
    host_hits: int = 0  # admissions with a HiSparse host prefix hit
    suffix_restores: int = 0
    fallbacks: int = 0
    fallback_pages: int = 0  # host-hit pages given up by fallbacks


class IndexerOffload:
    """The indexer group's OffloadingConnector beside one HiSparse scheduler (which
    it hooks: ``scheduler.on_spill``)."""

    def __init__(self, hisparse: HiSparseScheduler, offload: OffloadingScheduler,
                 worker: OffloadWorkerHalf, *, max_pages: int) -> None:
        if max_pages < 1:
            raise ValueError(f"max_pages must be at least 1, got {max_pages}")
        if hisparse.on_spill is not None:
            raise ValueError("the HiSparse scheduler already has an on_spill hook")
        self.hs, self.offload, self.worker = hisparse, offload, worker
        self.max_pages = max_pages
        self.block_tokens = offload.layout.block_tokens
        self.hashes: dict[str, tuple[BlockHash, ...]] = {}  # declared, not yet finished
        self.counts = IndexerOffloadCounts()
        hisparse.on_spill = self.spilled

    def block(self, slot: int, page: int) -> int:
        """The GPU block of 0-based ``page`` of the request in ``slot``."""
        return slot * self.max_pages + page

    def add(self, request: EngineRequest) -> None:
        h = chain_hashes(request.page_keys)
        self.hashes[request.request_id] = h
        self.offload.add_request(request.request_id, h)

    def plan(self, request: EngineRequest) -> SuffixPlan:
        """The suffix rule for ``request`` now (changes nothing)."""
        r = request.request_id
        hashes = self.hashes[r]
        return plan_suffix(self.hs.coordinator.lookup_prefix(r), 0,
                           lambda b: self.offload.restorable(hashes[b]))

    def admitted(self, request: EngineRequest, slot: int, plan: SuffixPlan) -> int:
        """HiSparse admitted ``request`` into ``slot`` with ``plan.admit_mla`` pages of
        host hit: start the plan's restores (enqueued before the prefill that follows)
        and return the positions restored, where prefill starts writing keys."""
        r, c = request.request_id, self.counts
        c.admissions += 1
        c.host_hits += plan.host_hit > 0
        c.suffix_restores += plan.suffix_restore
        c.fallbacks += plan.fallback
        c.fallback_pages += plan.host_hit - plan.admit_mla
        if not plan.restore:
            return 0
        # the request's first admit_indexer blocks; the restored ones are their last
        # len(restore) (all of them: the GPU hit is 0)
        blocks = [self.block(slot, b) for b in range(plan.admit_indexer)]
        self.offload.update_state_after_alloc(r, blocks, len(plan.restore) * self.block_tokens)
        self.flush()
        return plan.admit_indexer * self.block_tokens

    def spilled(self, request_id: str, page: int) -> None:
        """HiSparse started spilling complete ``page`` (1-based): store its indexer
        block (sent at the next ``flush``, before any later write of its rows)."""
        slot = self.hs.worker.tables.slots[request_id]
        h = self.hashes[request_id][page - 1]
        self.offload.save(request_id, [(h, self.block(slot, page - 1))])

    def finished(self, request_id: str) -> None:
        """The request ended: forget it (a store still copying its rows is ordered
        before the next request's writes to the slot by the stream)."""
        self.offload.request_finished(request_id, ())
        self.hashes.pop(request_id, None)

    def flush(self) -> None:
        """Send the jobs decided so far to the worker, which enqueues their copies."""
        raw = self.offload.build_connector_meta()
        if raw is not None:
            self.worker.bind_metadata(self.worker.parse_metadata(raw))
            self.worker.land()

    def deliver(self) -> None:
        """The worker's acks back (completed copies only)."""
        raw = self.worker.get_worker_meta()
        if raw is not None:
            self.offload.apply_worker_meta(self.offload.parse_worker_meta(raw))
            self.offload.take_completed()  # no GPU prefix cache to publish into

    def report(self) -> dict[str, int]:
        return {**asdict(self.counts), **self.offload.get_stats()}
