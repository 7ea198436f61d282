"""The ranks' acks merged into one single-worker meta: the spec's W-rank rule, on the wire.

Until the coordinator consumes one meta per rank (issue 12's Python machine), the ranks
face the single-worker coordinator through this one function of the harness. The rule
is the spec's (``docs/tensor-parallel.md``):

- a transfer's *enqueued* ack goes up once every rank has reported it enqueued (then,
  and only then, may the GPU source lease be released: every rank's copy, or reader's
  ordering, has taken its bytes in stream order);
- its *completed* ack goes up once no rank owes an ack: with *private* backing every
  rank has reported it completed; with *shared* backing the writer has reported it
  completed and every reader has reported it (a reader's ordering is its last ack).

A completed ack never goes up before the same transfer's enqueued ack. Bad input is a
typed error that changes nothing: an unknown rank, an ID twice in one rank's meta, an
ack a rank already gave. State is per open transfer: O(live transfers).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hisparse.spec.errors import ProtocolError
from hisparse.spec.messages import HiSparseWorkerMeta

BACKINGS = ("private", "shared")


class BadRankAck(ProtocolError):
    """A rank's meta cannot be merged (unknown rank, repeated or duplicate ack)."""


@dataclass
class _Acks:
    enqueued: set[int] = field(default_factory=set)
    completed: set[int] = field(default_factory=set)
    sent_enqueued: bool = False


class AckMerge:
    """Collects every rank's acks; ``take`` returns what all ranks together acknowledge."""

    def __init__(self, ranks: int, backing: str, writer: int = 0) -> None:
        if ranks < 1:
            raise ValueError(f"at least one rank, got {ranks}")
        if backing not in BACKINGS:
            raise ValueError(f"backing {backing!r}: choose one of {', '.join(BACKINGS)}")
        if not 0 <= writer < ranks:
            raise ValueError(f"writer rank {writer} outside 0..{ranks - 1}")
        self.ranks, self.backing, self.writer = ranks, backing, writer
        self._open: dict[int, _Acks] = {}
        self._ready_enq: list[int] = []
        self._ready_done: list[int] = []

    def add(self, rank: int, meta: HiSparseWorkerMeta) -> None:
        """One rank's meta, checked whole before anything is recorded."""
        if not 0 <= rank < self.ranks:
            raise BadRankAck(f"rank {rank} is not one of the {self.ranks} ranks")
        enq, done = tuple(meta.enqueued), tuple(meta.completed)
        for kind, ids in (("enqueued", enq), ("completed", done)):
            if len(set(ids)) != len(ids):
                raise BadRankAck(f"rank {rank} repeats a {kind} ID in one meta: {ids}")
        for tid in enq:
            if rank in self._acks(tid).enqueued:
                raise BadRankAck(f"rank {rank} already reported transfer {tid} enqueued")
        for tid in done:
            a = self._acks(tid)
            if rank in a.completed:
                raise BadRankAck(f"rank {rank} already reported transfer {tid} completed")
            if rank not in a.enqueued and tid not in enq:
                raise BadRankAck(f"rank {rank} completed transfer {tid} before enqueuing it")
        for tid in enq:
            a = self._open.setdefault(tid, _Acks())
            a.enqueued.add(rank)
            if len(a.enqueued) == self.ranks:
                self._ready_enq.append(tid)
                a.sent_enqueued = True
        for tid in done:
            self._open[tid].completed.add(rank)
        for tid in dict.fromkeys((*enq, *done)):  # an enqueued ack may be the last one owed
            last = self._open.get(tid)
            if last is not None and self._closes(last):
                self._ready_done.append(tid)
                del self._open[tid]

    def _acks(self, tid: int) -> _Acks:
        return self._open.get(tid) or _Acks()

    def _closes(self, a: _Acks) -> bool:
        if not a.sent_enqueued:
            return False
        if self.backing == "private":
            return len(a.completed) == self.ranks
        return self.writer in a.completed  # every reader enqueued: sent_enqueued

    def take(self) -> HiSparseWorkerMeta | None:
        """The merged acks since the last call; None when there are none."""
        enq, self._ready_enq = tuple(self._ready_enq), []
        done, self._ready_done = tuple(self._ready_done), []
        if not enq and not done:
            return None
        return HiSparseWorkerMeta(enqueued=enq, completed=done)

    @property
    def open_transfers(self) -> int:
        return len(self._open)
