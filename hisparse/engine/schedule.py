"""The scheduler side of the engine: HiSparse exactly as ``hisparse simulate`` drives it.

``HiSparseScheduler`` owns the coordinator (over a real ``BlockPool``), both connector
roles and the worker; metadata crosses the process boundary as JSON bytes each way. What
it adds for a real decode loop is the engine's knowledge of which pages are *complete*:
decode appends KV to a request's tail pages, so only pages whose every token is final
may be spilled (the coordinator offers every resident page). ``PageTables`` mirrors the
worker's block tables as two int32 arrays the engine uploads for the device-side
resolver inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from hisparse.blockpool import BlockPool
from hisparse.config import HiSparseConfig
from hisparse.connector import HiSparseConnector, KVConnectorRole
from hisparse.coordinator import Admission, HiSparseCoordinator
from hisparse.engine.workload import EngineRequest
from hisparse.executor.base import Executor
from hisparse.executor.cuda import CudaExecutor
from hisparse.spec.messages import CONNECTOR_METADATA, WORKER_META
from hisparse.spec.state import Loc
from hisparse.worker import HiSparseWorker


class SchedulerError(Exception):
    """An admission the scheduler cannot make; nothing was changed."""


class PageTables:
    """Per slot, each page's GPU block and host block (-1 where it is not there)."""

    def __init__(self, slots: int, max_pages: int) -> None:
        self.gpu: NDArray[np.int32] = np.full((slots, max_pages), -1, np.int32)
        self.host: NDArray[np.int32] = np.full((slots, max_pages), -1, np.int32)

    def bind(self, slot: int, table: list[Loc] | tuple[Loc, ...]) -> None:
        self.clear(slot)
        for i, where in enumerate(table):
            self.set(slot, i, where)

    def set(self, slot: int, index: int, where: Loc) -> None:
        tier, block = where
        self.gpu[slot, index] = block if tier == "gpu" else -1
        self.host[slot, index] = block if tier == "host" else -1

    def clear(self, slot: int) -> None:
        self.gpu[slot] = -1
        self.host[slot] = -1


class HiSparseScheduler:
    """Coordinator → connector → worker → executor and back, one engine step at a time."""

    def __init__(
        self, config: HiSparseConfig, executor: Executor[Any], *, gpu_blocks: int,
        slots: int, max_pages: int,
    ) -> None:
        self.config = config
        self.kv = BlockPool(gpu_blocks)
        self.coordinator = HiSparseCoordinator(config, self.kv, gpu_blocks=gpu_blocks)
        self.worker = HiSparseWorker(config, executor, gpu_blocks=gpu_blocks, slots=slots)
        self.sched = HiSparseConnector(KVConnectorRole.SCHEDULER, coordinator=self.coordinator)
        self.wconn = HiSparseConnector(KVConnectorRole.WORKER, worker=self.worker)
        self.tables = PageTables(slots, max_pages)
        self.gpu_blocks = gpu_blocks
        self.slots = slots
        self.on_spill: Callable[[str, int], None] | None = None
        """Told (request, 1-based page) of every spill ``reclaim`` starts: the indexer
        offload stores that page's indexer block then (engine/offload.py)."""

    def add(self, request: EngineRequest) -> None:
        self.coordinator.add_request(request.request_id, request.page_keys)

    def admit(self, request: EngineRequest, max_hits: int | None = None
              ) -> tuple[int, Admission] | None:
        """The request's slot and admission, or None (nothing changed) under GPU pressure.
        ``max_hits`` caps the host prefix hit (the indexer suffix rule's fallback).

        A full batch is refused (``SchedulerError``) before the coordinator is asked."""
        if len(self.worker.tables.slots) >= self.slots:
            raise SchedulerError(
                f"{request.request_id}: all {self.slots} slots are running; end a request first"
            )
        adm = self.coordinator.admit(request.request_id, max_hits)
        if adm is None:
            return None
        slot = self.worker.admit(request.request_id, adm.table)
        self.tables.bind(slot, adm.table)
        return slot, adm

    def blocks_short(self, request: EngineRequest, max_hits: int | None = None) -> int:
        need = self.coordinator.gpu_blocks_needed(request.request_id)
        if max_hits is not None:
            hits = self.coordinator.lookup_prefix(request.request_id)
            need += max(0, hits - max_hits)
        return need - self.kv.num_free

    def reclaim(self, blocks: int, final: Mapping[str, int]) -> int:
        """Spill up to ``blocks`` complete pages (oldest request first): page ``i``
        (1-based) of request ``r`` is complete when ``i * block_tokens <= final[r]``,
        the number of positions whose KV will not be written again."""
        bt = self.config.block_tokens
        started = 0
        for r, i in self.coordinator.spillable():
            if started >= blocks:
                break
            if i * bt > final.get(r, 0):
                continue
            if self.coordinator.spill((r, i)) is None:
                break
            started += 1
            if self.on_spill is not None:
                self.on_spill(r, i)
        return started

    def end(self, request_id: str, *, aborted: bool) -> None:
        slot = self.worker.tables.slots[request_id]
        if aborted:
            self.coordinator.abort(request_id)
        else:
            self.coordinator.finish(request_id)
        self.worker.release(request_id)
        self.tables.clear(slot)

    def send_commands(self) -> int:
        """This step's transfers and replacements to the worker (as bytes); returns the
        number of spills enqueued.

        A spill reads its block after the work already queued on the compute stream,
        and on a GPU the compute stream then waits for the spills (on the device), so
        a block handed back at its enqueued ack can be rewritten by anything later.
        """
        meta = self.sched.build_connector_meta()
        if meta is None:
            return 0
        self.wconn.bind_connector_metadata(CONNECTOR_METADATA.dump_json(meta))
        if meta.transfers and isinstance(self.worker.executor, CudaExecutor):
            self.worker.executor.order_after_spills()
        for rep in meta.replacements:
            slot = self.worker.tables.slots.get(rep.request_id)
            if slot is not None:  # a request that has ended needs no update
                where = self.worker.tables.tables[rep.request_id][rep.page_index - 1]
                self.tables.set(slot, rep.page_index - 1, where)
        return len(meta.transfers)

    def deliver_acks(self) -> None:
        """The worker's enqueued and completed transfer IDs back to the coordinator."""
        wmeta = self.wconn.get_worker_meta()
        if wmeta is not None:
            self.sched.update_connector_output(WORKER_META.dump_json(wmeta))

    def drain(self) -> None:
        """Land every copy and deliver every ack (end of a run)."""
        for _ in range(3):
            self.send_commands()
            self.worker.executor.release()
            self.deliver_acks()
