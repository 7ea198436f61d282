"""``hisparse simulate --indexer-offload``: the run with a second cache group.

Each page also has indexer keys (DeepSeek-V3.2's FP8 keys and scales,
connectors/indexer_rows.py) in a prefix-cacheable GPU group of their own
(connectors/gpu_group.py), stored and restored by a generic OffloadingConnector;
HiSparse keeps only the sparse-MLA host tier. Both connectors run under one
MultiConnector: every step's metadata and worker meta cross as one message of
per-child bytes. At admission the scheduler applies the indexer suffix rule
(spec/suffix.py, tla/IndexerSuffix.tla) to the HiSparse host hit, the GPU indexer hit
and what the offload store holds: restore exactly the missing suffix, or admit every
group with the prefix they share (HiSparse's Arrive capped). A request decodes once its
restores have landed; every decode step reads every page's indexer block and compares
it with the all-resident oracle (``data_mismatches`` counts those rows too).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from hisparse.connectors.base import KVLayout
from hisparse.connectors.gpu_group import PrefixCachedGroup
from hisparse.connectors.hisparse_child import HiSparseSchedulerChild, HiSparseWorkerChild
from hisparse.connectors.indexer_rows import IndexerLayout, oracle_block
from hisparse.connectors.multi import MultiConnectorScheduler, MultiConnectorWorker
from hisparse.connectors.offload_store import BlockHash, chain_hashes
from hisparse.connectors.offloading import Completed, OffloadingScheduler, OffloadingWorker
from hisparse.connectors.wire import MULTI_MESSAGE
from hisparse.report import _bytes as human_bytes  # the report's one byte formatter
from hisparse.simulate import SimulateOptions, Simulation
from hisparse.spec.messages import WORKER_META, HiSparseConnectorMetadata
from hisparse.spec.suffix import SuffixPlan, plan_suffix
from hisparse.workerport import DecodeRows, WorkerPort
from hisparse.workload import Arrival

if TYPE_CHECKING:
    from hisparse.metrics import HiSparseMetrics

COUNTS = (
    "admissions", "host_beyond_gpu", "suffix_restores", "fallbacks", "fallback_pages",
    "fallback_bytes",
    "indexer_gpu_hit_pages", "restored_blocks", "restore_bytes", "stored_blocks",
    "store_bytes", "store_refusals", "offload_evictions", "gpu_evictions",
    "rows_checked", "mismatches", "restore_waits",
)


def _check(o: SimulateOptions) -> None:
    if o.tp != 1 or o.backing != "private":
        raise ValueError("--indexer-offload runs one private rank (no --tp/--backing)")
    if o.worker_restarts:
        raise ValueError("--indexer-offload does not combine with --worker-restarts")
    if o.message_faults:  # its own bind/deliver path routes no message through the faults
        raise ValueError("--indexer-offload does not combine with --message-faults")
    if o.offload_blocks < 1:
        raise ValueError(f"offload_blocks must be at least 1, got {o.offload_blocks}")
    if o.indexer_gpu_blocks is not None and o.indexer_gpu_blocks < o.gpu_blocks:
        raise ValueError(f"indexer_gpu_blocks ({o.indexer_gpu_blocks}) must be at least "
                         f"gpu_blocks ({o.gpu_blocks}): every admitted page needs both")


class IndexerSimulation(Simulation):
    """The run with the indexer group offloaded through a MultiConnector."""

    def __init__(
        self,
        opts: SimulateOptions,
        arrivals: list[Arrival] | None = None,
        metrics: HiSparseMetrics | None = None,
    ) -> None:
        _check(opts)
        super().__init__(opts, arrivals, metrics)
        leaders = len(set(self.config.leaders))  # layers that own an indexer
        self.ix = IndexerLayout(opts.block_tokens, leaders)
        kv = KVLayout(block_tokens=opts.block_tokens)
        self.group = PrefixCachedGroup(opts.indexer_gpu_blocks or opts.gpu_blocks,
                                       self.ix.block_bytes)
        self.offload = OffloadingScheduler(kv, self.ix.block_bytes, opts.offload_blocks)
        self.offload_worker = OffloadingWorker(kv, self.group.data, opts.offload_blocks)
        self.hs_child = HiSparseSchedulerChild(self.sched, kv)
        self.multi = MultiConnectorScheduler([self.hs_child, self.offload])
        self.multi_worker = MultiConnectorWorker(
            [HiSparseWorkerChild(self.ports[0], kv), self.offload_worker])
        self.hashes: dict[str, tuple[BlockHash, ...]] = {}
        self.ix_blocks: dict[str, list[int]] = {}  # admitted request -> its indexer blocks
        self.restoring: dict[str, int] = {}  # admitted, waiting: request -> open restores
        self.held_jobs: dict[str, int] = {}  # request -> open jobs reading/writing its blocks
        self.to_free: dict[str, list[int]] = {}  # ended, blocks freed when its jobs are done
        self._oracle: dict[int, NDArray[np.uint8]] = {}
        self.counts = dict.fromkeys(COUNTS, 0)
        self._draining = False
        self.report.sizes.update({
            "indexer_offload": True, "indexer_gpu_blocks": self.group.blocks,
            "offload_blocks": opts.offload_blocks, "indexer_block_bytes": self.ix.block_bytes,
        })

    # -- workload --

    def _arrive(self, a: Arrival) -> None:
        super()._arrive(a)
        if a.request_id in self.pages:
            h = chain_hashes(a.page_keys)
            self.hashes[a.request_id] = h
            self.offload.add_request(a.request_id, h)

    def _block(self, key_id: int) -> NDArray[np.uint8]:
        b = self._oracle.get(key_id)
        if b is None:
            b = self._oracle[key_id] = oracle_block(self.ix, key_id)
        return b

    # -- admission: the suffix rule --

    def plan(self, r: str) -> SuffixPlan:
        hashes = self.hashes[r]
        return plan_suffix(self.coordinator.lookup_prefix(r), self.group.hit(hashes),
                           lambda b: self.offload.restorable(hashes[b]))

    def _schedule(self) -> None:
        self._end_requests()
        for r in list(self.pending):
            if len(self.running) + len(self.restoring) >= self.o.concurrency:
                break
            if not self._admit(r):
                break

    def _admit(self, r: str) -> bool:
        """Admit ``r`` under the suffix rule, or refuse with nothing changed."""
        rep, hashes = self.report, self.hashes[r]
        p = self.plan(r)
        n = len(hashes)
        reused = min(p.gpu_hit, p.admit_indexer)  # cached indexer blocks it takes
        need = n - p.admit_mla
        if self.kv.num_free < need or not self.group.can_allocate(hashes, reused):
            rep.admissions_refused += 1
            if self.kv.num_free < need:
                self.coordinator.reclaim(need - self.kv.num_free)
            return False
        t = self.o.block_tokens
        self.hs_child.update_state_after_alloc(r, (), p.admit_mla * t)
        adm = self.hs_child.admit(r)
        if adm is None:  # unreachable after the check above
            raise RuntimeError(f"HMA refused {r} after granting {need} blocks")
        blocks = self.group.allocate(hashes, reused)
        if blocks is None:
            raise RuntimeError(f"the indexer group refused {r} after can_allocate")
        self.offload.update_state_after_alloc(r, blocks[:p.admit_indexer], len(p.restore) * t)
        self._count_plan(p, reused)
        self.ix_blocks[r] = blocks
        self._admitted(r, adm)
        keys = self.pages[r]
        for i in range(p.admit_indexer, n):  # prefill computes the rest of the indexer
            self.group.data[blocks[i]] = self._block(int(keys[i]))
            self.group.publish(blocks[i], hashes[i])
        stored = self.offload.save(r, list(zip(hashes, blocks, strict=True)))
        jobs = len(stored) + len(p.restore)
        if jobs:
            self.held_jobs[r] = jobs
        if p.restore:
            self.restoring[r] = len(p.restore)
        else:
            self.running[r] = self.decode_steps[r]
        return True

    def _count_plan(self, p: SuffixPlan, reused: int) -> None:
        k = self.counts
        k["admissions"] += 1
        k["host_beyond_gpu"] += p.host_hit > p.gpu_hit
        k["suffix_restores"] += p.suffix_restore
        k["fallbacks"] += p.fallback
        k["fallback_pages"] += p.host_hit - p.admit_mla
        k["fallback_bytes"] += (p.host_hit - p.admit_mla) * self.o.host_block_bytes
        k["indexer_gpu_hit_pages"] += reused
        k["restored_blocks"] += len(p.restore)
        k["restore_bytes"] += len(p.restore) * self.ix.block_bytes

    # -- request end: blocks a copy still uses are freed after its ack --

    def _release_workers(self, r: str) -> None:
        super()._release_workers(r)
        blocks = self.ix_blocks.pop(r, None)
        if blocks is None:
            return
        self.multi.request_finished(r, blocks)
        if self.held_jobs.get(r):
            self.to_free[r] = blocks
        else:
            self.group.free(blocks)

    def _job_done(self, r: str) -> None:
        left = self.held_jobs[r] - 1
        if left:
            self.held_jobs[r] = left
            return
        del self.held_jobs[r]
        blocks = self.to_free.pop(r, None)
        if blocks is not None:
            self.group.free(blocks)

    def _completed(self, done: Completed) -> None:
        for job in done.stores:
            self._job_done(job.request_id)
        for job in done.restores:
            self.group.publish(job.gpu_block, job.block)
            r = job.request_id
            if r in self.restoring:
                self.restoring[r] -= 1
                if not self.restoring[r]:
                    del self.restoring[r]
                    self.running[r] = self.decode_steps[r]
            self._job_done(r)

    # -- the step's messages: one MultiConnector message each way --

    def _bind(self, meta: HiSparseConnectorMetadata | None, t: int,
              missed: int | None = None) -> None:
        if meta is not None and self.metrics is not None:
            self.metrics.on_connector_meta(meta, t)
        self.hs_child.stage(meta)
        self.multi_worker.bind_connector_metadata(self.multi.build_connector_meta())

    def _deliver(self, port: WorkerPort, t: int) -> None:
        q = self.offload_worker.queued()
        if q:  # the offload stream lands late and in batches too
            self.offload_worker.land(None if self._draining else self.rng.randint(0, q))
        raw = self.multi_worker.get_worker_meta()
        if raw is not None and self.metrics is not None:  # HiSparse's part, as before
            for part in MULTI_MESSAGE.validate_json(raw).parts:
                if part.child == self.hs_child.name:
                    self.metrics.on_worker_meta(WORKER_META.validate_json(part.data), t)
        self.multi.update_connector_output(raw)
        self._completed(self.offload.take_completed())

    # -- every decode step reads every page's indexer keys --

    def _verify(self, result: DecodeRows, topk: dict[str, NDArray[np.int32]]) -> None:
        super()._verify(result, topk)
        ix, k = self.ix, self.counts
        head = ix.block_tokens * ix.head_dim
        for r in topk:
            blocks = self.ix_blocks[r]
            seen = self.group.data[blocks].reshape(len(blocks), ix.layers, ix.layer_bytes)
            want = np.stack([self._block(int(key)) for key in self.pages[r]]).reshape(
                seen.shape)
            keys_bad = np.any((seen[..., :head] != want[..., :head]).reshape(
                len(blocks), ix.layers, ix.block_tokens, ix.head_dim), axis=-1)
            scales_bad = np.any((seen[..., head:] != want[..., head:]).reshape(
                len(blocks), ix.layers, ix.block_tokens, 4), axis=-1)
            bad = int((keys_bad | scales_bad).sum())
            k["rows_checked"] += len(blocks) * ix.layers * ix.block_tokens
            k["mismatches"] += bad
            self.report.data_mismatches += bad

    def step(self, t: int) -> None:
        self.counts["restore_waits"] += len(self.restoring)
        super().step(t)

    def drain(self) -> None:
        self._draining = True
        for r in list(self.restoring):  # still waiting for restores: ended now
            self.coordinator.finish(r)
            self._release_workers(r)
            del self.restoring[r]
            self.report.still_running += 1
        super().drain()
        for _ in range(3):
            self._deliver(self.ports[0], self._t)
        self.report.indexer = self.indexer_report()

    def indexer_report(self) -> dict[str, Any]:
        k: dict[str, Any] = dict(self.counts)
        s = self.offload.get_stats()
        k["stored_blocks"], k["store_bytes"] = s["stores"], s["store_bytes"]
        k["store_refusals"], k["offload_evictions"] = s["store_refusals"], s["evictions"]
        k["gpu_evictions"] = self.group.evictions
        k["open_jobs"] = s["open_jobs"]
        k["children"] = list(self.multi.names)
        k["stats"] = {name: dict(v) for name, v in self.multi.get_stats().items()}
        return k


def indexer_lines(ix: dict[str, Any]) -> list[str]:
    """The ``--indexer-offload`` figures as report lines (none without it)."""
    if not ix:
        return []
    adm = max(1, ix["admissions"])
    return [
        f"indexer      {ix['admissions']:,} admissions: host hit beyond the GPU indexer hit "
        f"{ix['host_beyond_gpu']:,}, suffix restores {ix['suffix_restores']:,} "
        f"({ix['suffix_restores'] / adm:.1%}), fallbacks {ix['fallbacks']:,} "
        f"({ix['fallbacks'] / adm:.1%}, {ix['fallback_pages']:,} host-hit pages given up, "
        f"{human_bytes(ix['fallback_bytes'])})",
        f"offload      stores {ix['stored_blocks']:,} blocks ({human_bytes(ix['store_bytes'])}), "
        f"restores {ix['restored_blocks']:,} blocks ({human_bytes(ix['restore_bytes'])}), "
        f"{ix['offload_evictions']:,} store evictions, {ix['store_refusals']:,} refused; "
        f"GPU indexer hits {ix['indexer_gpu_hit_pages']:,} pages, "
        f"{ix['gpu_evictions']:,} GPU evictions",
        f"indexer rows {ix['rows_checked']:,} compared with the oracle: "
        f"{ix['mismatches']:,} mismatches",
    ]
