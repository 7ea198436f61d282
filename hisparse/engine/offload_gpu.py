"""The OffloadingWorker's copies on the GPU, over an engine's ``IndexCache`` (torch).

Block ``g`` of the group is rows ``g * block_tokens .. (g + 1) * block_tokens - 1`` of
every tensor of the ``IndexCache`` (its rows are ``slot * max_context + position``, so a
slot's page is one contiguous run of rows in each). The host store is pinned tensors of
the same dtypes, one ``[capacity, block_tokens, ...]`` per device tensor: the bytes go
as they are (FP8 bits and float32 scales, or bf16 keys), never converted.

``land`` enqueues the copies on the engine's stream, in order, and records an event
after them; ``get_worker_meta`` acknowledges the jobs whose event has completed (a
query, never a wait), so a store is acknowledged only once its bytes are on the host.
"""

from __future__ import annotations

from typing import Any

import torch

from hisparse.connectors.base import KVLayout
from hisparse.connectors.offloading import OffloadingScheduler, OffloadingWorker
from hisparse.engine.cache import IndexCache
from hisparse.engine.engine import DecodeEngine
from hisparse.engine.offload import IndexerOffload
from hisparse.engine.schedule import HiSparseScheduler


class IndexCacheWorker(OffloadingWorker):
    """The worker half over an ``IndexCache`` and pinned host tensors."""

    def __init__(self, layout: KVLayout, index: IndexCache, capacity_blocks: int,
                 stream: torch.cuda.Stream, name: str = "offload") -> None:
        # Not OffloadingWorker.__init__: the group is the IndexCache's tensors, not
        # one uint8 array; the queue, acks and parsing are the base class's.
        if capacity_blocks < 1:
            raise ValueError(f"capacity_blocks must be at least 1, got {capacity_blocks}")
        bt = index.shape.block_tokens
        if layout.block_tokens != bt:
            raise ValueError(f"layout.block_tokens {layout.block_tokens} is not the "
                             f"engine's block_tokens {bt}")
        self._name, self._layout, self.stream = name, layout, stream
        self.blocks = index.shape.slots * index.shape.max_pages
        self.device_blocks = [t.view(self.blocks, bt, *t.shape[1:]) for t in index.tensors()]
        self.host_blocks = [
            torch.zeros((capacity_blocks, *d.shape[1:]), dtype=d.dtype, pin_memory=True)
            for d in self.device_blocks
        ]
        self.capacity = capacity_blocks
        self.block_bytes = sum(d[0].numel() * d.element_size() for d in self.device_blocks)
        self._queue = []
        self._done = []
        self._landing: list[tuple[Any, list[int]]] = []  # (event, job IDs), in order
        self.copied_bytes = 0

    def bounds(self) -> tuple[int, int]:
        return self.blocks, self.capacity

    def land(self, n: int | None = None) -> None:
        """Enqueue the first ``n`` queued copies (all: None) on the stream, in order."""
        k = len(self._queue) if n is None else min(n, len(self._queue))
        if k == 0:
            return
        batch, self._queue = self._queue[:k], self._queue[k:]
        with torch.cuda.stream(self.stream):
            for kind, c in batch:
                for dev, host in zip(self.device_blocks, self.host_blocks, strict=True):
                    if kind == "store":
                        host[c.host_slot].copy_(dev[c.gpu_block], non_blocking=True)
                    else:
                        dev[c.gpu_block].copy_(host[c.host_slot], non_blocking=True)
            event = torch.cuda.Event()
            event.record(self.stream)
        self._landing.append((event, [c.job_id for _, c in batch]))
        self.copied_bytes += k * self.block_bytes

    def get_worker_meta(self) -> bytes | None:
        while self._landing and self._landing[0][0].query():
            self._done += self._landing.pop(0)[1]
        return super().get_worker_meta()

    def synchronize(self) -> None:
        """Wait for every enqueued copy (tests and the end of a run, never a step)."""
        for event, _ in self._landing:
            event.synchronize()


def offload_indexer(engine: DecodeEngine, scheduler: HiSparseScheduler,
                    capacity_blocks: int) -> IndexerOffload:
    """``engine``'s indexer group offloaded through an OffloadingConnector of
    ``capacity_blocks`` host blocks, beside ``scheduler`` (the engine's HiSparse)."""
    shape = engine.shape
    layout = KVLayout(block_tokens=shape.block_tokens)
    worker = IndexCacheWorker(layout, engine.index, capacity_blocks, engine.stream)
    offload = OffloadingScheduler(layout, worker.block_bytes, capacity_blocks)
    return IndexerOffload(scheduler, offload, worker, max_pages=shape.max_pages)
