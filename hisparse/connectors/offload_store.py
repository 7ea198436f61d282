"""The OffloadingConnector's scheduler-side table of its bounded host store.

Its own prefix identity (block hashes chained over the page keys, ``chain_hashes``),
independent of HiSparse's. A block is ``storing`` from its store's start to the
store's completion ack, then ``stored``; only a stored, unpinned block is evictable
(least recently used first), and only a stored one is restorable, so a restore never
reads a slot whose store is in flight (tla/IndexerSuffix.tla: RestoreDone after
Decide only over stored blocks). Every refusal changes nothing. Cost: O(live) —
dicts over held blocks and open jobs, never a scan of the store.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

BlockHash = str
JobKind = Literal["store", "restore"]


def chain_hashes(keys: Sequence[str], salt: str = "") -> tuple[BlockHash, ...]:
    """Each block's identity: a hash of its parent's and its own page key, so equal
    identities mean equal prefixes. O(len(keys))."""
    out: list[BlockHash] = []
    parent = salt
    for k in keys:
        parent = hashlib.blake2b(f"{parent}\x00{k}".encode(), digest_size=12).hexdigest()
        out.append(parent)
    return tuple(out)


class StoreRefused(RuntimeError):
    """A store or restore could not start; nothing changed."""


class UnknownJob(RuntimeError):
    """An ack names a job that is not open; nothing was applied."""


@dataclass
class _Entry:
    slot: int
    state: Literal["storing", "stored"]
    pins: int = 0  # restores in flight


@dataclass(frozen=True)
class Job:
    """An open copy: its kind, block identity, GPU block and host slot."""

    job_id: int
    kind: JobKind
    block: BlockHash
    gpu_block: int
    host_slot: int
    request_id: str


class OffloadStore:
    """Which block identities the host store holds, in which slot, in which state."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"offload store capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self._entries: dict[BlockHash, _Entry] = {}
        self._lru: OrderedDict[BlockHash, None] = OrderedDict()  # stored, unpinned
        self._free = list(range(capacity - 1, -1, -1))  # pop() gives the lowest
        self._jobs: dict[int, Job] = {}
        self._next_job = 0
        self.evictions = 0

    # -- queries --

    def restorable(self, h: BlockHash) -> bool:
        """Stored (its store acked): a restore reads complete bytes."""
        e = self._entries.get(h)
        return e is not None and e.state == "stored"

    def held(self, h: BlockHash) -> bool:
        return h in self._entries

    def leading_stored(self, hashes: Sequence[BlockHash], start: int = 0) -> int:
        """How many blocks from ``start`` on are restorable, consecutively."""
        n = start
        while n < len(hashes) and self.restorable(hashes[n]):
            n += 1
        return n - start

    @property
    def used(self) -> int:
        return len(self._entries)

    @property
    def open_jobs(self) -> int:
        return len(self._jobs)

    # -- changes --

    def _slot(self) -> int | None:
        if self._free:
            return self._free.pop()
        if not self._lru:
            return None  # every block is storing or pinned: refuse
        victim, _ = self._lru.popitem(last=False)
        self.evictions += 1
        return self._entries.pop(victim).slot

    def _job(self, kind: JobKind, h: BlockHash, gpu_block: int, slot: int, rid: str) -> Job:
        job = Job(self._next_job, kind, h, gpu_block, slot, rid)
        self._next_job += 1
        self._jobs[job.job_id] = job
        return job

    def start_store(self, rid: str, h: BlockHash, gpu_block: int) -> Job | None:
        """Store one block unless it is held already or no slot can be freed (None:
        nothing changed)."""
        if h in self._entries:
            return None
        slot = self._slot()
        if slot is None:
            return None
        self._entries[h] = _Entry(slot, "storing")
        return self._job("store", h, gpu_block, slot, rid)

    def start_restores(self, rid: str, pairs: Sequence[tuple[BlockHash, int]]) -> list[Job]:
        """Restore every block of ``pairs`` or none: ``StoreRefused`` (nothing changed)
        unless each is stored. Each is pinned until its ack."""
        missing = [h for h, _ in pairs if not self.restorable(h)]
        if missing:
            raise StoreRefused(f"{len(missing)} of {len(pairs)} blocks are not stored")
        jobs = []
        for h, g in pairs:
            e = self._entries[h]
            e.pins += 1
            self._lru.pop(h, None)
            jobs.append(self._job("restore", h, g, e.slot, rid))
        return jobs

    def check_done(self, done: Sequence[int]) -> None:
        """``UnknownJob`` unless every ID is an open job (changes nothing)."""
        unknown = [j for j in done if j not in self._jobs]
        if unknown:
            raise UnknownJob(f"acks for jobs that are not open: {unknown[:8]}")

    def complete(self, done: Sequence[int]) -> list[Job]:
        """Apply acks (checked first: all or nothing); returns the completed jobs."""
        self.check_done(done)
        out = []
        for j in done:
            job = self._jobs.pop(j)
            e = self._entries[job.block]
            if job.kind == "store":
                e.state = "stored"
            else:
                e.pins -= 1
            if e.state == "stored" and e.pins == 0:
                self._lru[job.block] = None
                self._lru.move_to_end(job.block)  # used now: the last to go
            out.append(job)
        return out
