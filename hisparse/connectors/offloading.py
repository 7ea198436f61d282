"""OffloadingConnector: stores and restores whole blocks of one prefix-cacheable GPU
group in its own bounded host store. Generic and engine-neutral: it knows a block's
byte size, never its format (here the indexer group's FP8 keys and scales).

Scheduler side (``OffloadingScheduler``): the store's table (offload_store.py), the
requests' block identities while they live, the jobs it sends down as
``OffloadMetadata`` bytes and the acks it consumes as ``OffloadWorkerMeta`` bytes.
Worker side (``OffloadingWorker``): the host bytes and the copies, which run
asynchronously (``land``) and are acknowledged when complete.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from hisparse.connectors.base import KVLayout, MalformedChildMessage, parse_child
from hisparse.connectors.offload_store import BlockHash, Job, OffloadStore
from hisparse.connectors.wire import (
    OFFLOAD_METADATA,
    OFFLOAD_WORKER_META,
    BlockCopy,
    OffloadMetadata,
    OffloadWorkerMeta,
)


@dataclass
class OffloadStats:
    """Counts and bytes (the ``get_stats`` figures)."""

    stores: int = 0
    store_bytes: int = 0
    restores: int = 0
    restore_bytes: int = 0
    store_refusals: int = 0  # no slot could be freed: every held block storing or pinned
    restore_refusals: int = 0

    def as_dict(self, store: OffloadStore) -> dict[str, int]:
        return {**self.__dict__, "evictions": store.evictions, "held_blocks": store.used,
                "open_jobs": store.open_jobs}


@dataclass
class Completed:
    """What one worker meta completed: (request, GPU block) per kind."""

    stores: list[Job] = field(default_factory=list)
    restores: list[Job] = field(default_factory=list)


class OffloadingScheduler:
    """The scheduler half; ``request_finished`` forgets a request (O(live))."""

    provides_memory_pool = False
    refuses_on_apply = False  # parse_worker_meta checks every ack against the sent jobs

    def __init__(self, layout: KVLayout, block_bytes: int, capacity_blocks: int,
                 name: str = "offload") -> None:
        if block_bytes < 1:
            raise ValueError(f"block_bytes must be at least 1, got {block_bytes}")
        self._name, self._layout, self.block_bytes = name, layout, block_bytes
        self.store = OffloadStore(capacity_blocks)
        self._hashes: dict[str, tuple[BlockHash, ...]] = {}  # live requests
        self._unsent: list[Job] = []
        self._sent: set[int] = set()
        self._stores_in_flight: dict[str, int] = {}  # request -> its open stores
        self._completed = Completed()  # since the last take_completed
        self.stats = OffloadStats()

    @property
    def name(self) -> str:
        return self._name

    @property
    def layout(self) -> KVLayout:
        return self._layout

    # -- requests --

    def add_request(self, request_id: str, hashes: Sequence[BlockHash]) -> None:
        self._hashes[request_id] = tuple(hashes)

    def get_num_new_matched_tokens(self, request_id: str, num_computed_tokens: int
                                   ) -> int | None:
        """Tokens restorable past the computed ones (whole blocks, consecutive)."""
        hashes = self._hashes.get(request_id)
        if hashes is None:
            return 0
        t = self._layout.block_tokens
        start = -(-num_computed_tokens // t)
        return self.store.leading_stored(hashes, start) * t

    def update_state_after_alloc(self, request_id: str, block_ids: Sequence[int],
                                 num_external_tokens: int) -> None:
        """Restore the blocks that hold the external tokens: ``block_ids`` are the GPU
        blocks of the request's first blocks; the last ``num_external_tokens`` worth of
        the matched prefix is loaded into them."""
        if num_external_tokens <= 0:
            return
        hashes = self._hashes[request_id]
        t = self._layout.block_tokens
        n = num_external_tokens // t
        first = len(block_ids) - n
        self.restore(request_id, [(hashes[first + i], block_ids[first + i]) for i in range(n)])

    def restorable(self, h: BlockHash) -> bool:
        return self.store.restorable(h)

    def restore(self, request_id: str, pairs: Sequence[tuple[BlockHash, int]]) -> None:
        """Restore exactly ``pairs`` (block identity, GPU block) or refuse all
        (``StoreRefused``, nothing changed)."""
        try:
            jobs = self.store.start_restores(request_id, pairs)
        except Exception:
            self.stats.restore_refusals += 1
            raise
        self._unsent += jobs
        self.stats.restores += len(jobs)
        self.stats.restore_bytes += len(jobs) * self.block_bytes

    def save(self, request_id: str, pairs: Sequence[tuple[BlockHash, int]]) -> list[BlockHash]:
        """Store the blocks not yet held; the caller keeps each GPU block unchanged
        until its store's ack (``Completed.stores``). Returns the identities stored."""
        out = []
        for h, g in pairs:
            if self.store.held(h):
                continue
            job = self.store.start_store(request_id, h, g)
            if job is None:
                self.stats.store_refusals += 1
                continue
            self._unsent.append(job)
            self._stores_in_flight[request_id] = self._stores_in_flight.get(request_id, 0) + 1
            self.stats.stores += 1
            self.stats.store_bytes += self.block_bytes
            out.append(h)
        return out

    def stores_in_flight(self, request_id: str) -> int:
        return self._stores_in_flight.get(request_id, 0)

    def request_finished(self, request_id: str, block_ids: Sequence[int]) -> bool:
        """Forget the request; True while its stores still read its GPU blocks."""
        self._hashes.pop(request_id, None)
        return self.stores_in_flight(request_id) > 0

    # -- per step --

    def build_meta(self) -> OffloadMetadata | None:
        if not self._unsent:
            return None
        jobs, self._unsent = self._unsent, []
        self._sent.update(j.job_id for j in jobs)
        copies = {k: tuple(BlockCopy(job_id=j.job_id, gpu_block=j.gpu_block,
                                     host_slot=j.host_slot) for j in jobs if j.kind == k)
                  for k in ("store", "restore")}
        return OffloadMetadata(stores=copies["store"], restores=copies["restore"])

    def build_connector_meta(self) -> bytes | None:
        meta = self.build_meta()
        return None if meta is None else OFFLOAD_METADATA.dump_json(meta)

    def parse_worker_meta(self, raw: bytes) -> OffloadWorkerMeta:
        meta = parse_child(OFFLOAD_WORKER_META, raw, self._name, "worker meta")
        unsent = [j for j in meta.done if j not in self._sent]
        if unsent:
            raise MalformedChildMessage(self._name, "worker meta",
                                        f"acks for jobs never sent: {unsent[:8]}")
        return meta

    def apply_worker_meta(self, parsed: object) -> None:
        done = self.on_worker_meta(parsed)
        self._completed.stores += done.stores
        self._completed.restores += done.restores

    def take_completed(self) -> Completed:
        """The jobs completed by the worker meta applied since the last call (the
        engine frees a stored block's GPU copy, publishes a restored one)."""
        out, self._completed = self._completed, Completed()
        return out

    def on_worker_meta(self, parsed: object) -> Completed:
        """Consume acks (every one checked before any is applied)."""
        if not isinstance(parsed, OffloadWorkerMeta):
            raise TypeError(f"expected OffloadWorkerMeta, got {type(parsed).__name__}")
        done = self.store.complete(parsed.done)
        self._sent.difference_update(parsed.done)
        out = Completed()
        for job in done:
            if job.kind == "store":
                left = self._stores_in_flight[job.request_id] - 1
                if left:
                    self._stores_in_flight[job.request_id] = left
                else:
                    del self._stores_in_flight[job.request_id]
                out.stores.append(job)
            else:
                out.restores.append(job)
        return out

    def get_stats(self) -> Mapping[str, int]:
        return self.stats.as_dict(self.store)


class OffloadingWorker:
    """The worker half: the host store's bytes and the copies, completed by ``land``."""

    refuses_on_apply = False  # parse_metadata checks every block and slot

    def __init__(self, layout: KVLayout, gpu: NDArray[np.uint8], capacity_blocks: int,
                 name: str = "offload") -> None:
        if gpu.ndim != 2:
            raise ValueError("the GPU group is [blocks, block_bytes]")
        self._name, self._layout, self.gpu = name, layout, gpu
        self.host = np.zeros((capacity_blocks, gpu.shape[1]), np.uint8)
        self._queue: list[tuple[str, BlockCopy]] = []
        self._done: list[int] = []
        self.copied_bytes = 0

    @property
    def name(self) -> str:
        return self._name

    @property
    def layout(self) -> KVLayout:
        return self._layout

    def bounds(self) -> tuple[int, int]:
        """GPU blocks and host slots a job may name (a subclass with other buffers,
        such as the engine's torch worker, says its own)."""
        return int(self.gpu.shape[0]), int(self.host.shape[0])

    def parse_metadata(self, raw: bytes) -> OffloadMetadata:
        meta = parse_child(OFFLOAD_METADATA, raw, self._name, "connector metadata")
        n_gpu, n_host = self.bounds()
        for c in (*meta.stores, *meta.restores):
            if c.gpu_block >= n_gpu or c.host_slot >= n_host:
                raise MalformedChildMessage(
                    self._name, "connector metadata",
                    f"job {c.job_id} names GPU block {c.gpu_block} / host slot "
                    f"{c.host_slot} outside {n_gpu} / {n_host}")
        return meta

    def bind_metadata(self, parsed: object) -> None:
        if not isinstance(parsed, OffloadMetadata):
            raise TypeError(f"expected OffloadMetadata, got {type(parsed).__name__}")
        self._queue += [("store", c) for c in parsed.stores]
        self._queue += [("restore", c) for c in parsed.restores]

    def queued(self) -> int:
        return len(self._queue)

    def land(self, n: int | None = None) -> None:
        """The stream completes the first ``n`` copies (all: None), in order."""
        k = len(self._queue) if n is None else min(n, len(self._queue))
        for kind, c in self._queue[:k]:
            if kind == "store":
                self.host[c.host_slot] = self.gpu[c.gpu_block]
            else:
                self.gpu[c.gpu_block] = self.host[c.host_slot]
            self.copied_bytes += self.gpu.shape[1]
            self._done.append(c.job_id)
        del self._queue[:k]

    def get_worker_meta(self) -> bytes | None:
        if not self._done:
            return None
        done, self._done = tuple(self._done), []
        return OFFLOAD_WORKER_META.dump_json(OffloadWorkerMeta(done=done))
