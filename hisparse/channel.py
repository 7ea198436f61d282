"""Sequence numbers on the two channels: telling a fresh message from a replay.

Engines retry steps and re-send messages, so a message may arrive twice, late or never
(tla/HiSparse.tla: IgnoreReplay, LoseCommand, LoseMeta). Each
connector metadata and each worker meta carries ``seq`` (it only grows) and ``since``
(the number of the first message after the receiver's rank last went through the
worker-loss path). The receiver applies the message numbered next, ignores an older
one (a replay, or one sent before the loss) and refuses a newer one with
``MessageGap``: one before it was lost, and the engine runs the worker-loss path. The
loss path starts a new epoch on both sides, so nothing sent before it is taken after.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from hisparse.spec.errors import gap

Verdict = Literal["apply", "ignore"]


@dataclass
class Receiver:
    """One rank's receiving end: the epoch it is in and the number it expects next."""

    direction: str
    rank: int
    since: int = 0  # first number of the current epoch
    next: int = 0
    resync: bool = False  # the loss path ran: only a newer epoch's first message is taken
    ignored: int = 0  # replays and pre-loss messages ignored (a statistic)

    def classify(self, since: int, seq: int) -> Verdict:
        """Apply or ignore the message (since, seq); ``MessageGap`` if one was lost.
        Changes nothing but the ignored count; ``accept`` after applying."""
        if self.resync:
            if since <= self.since:
                self.ignored += 1
                return "ignore"  # sent before the loss path
            if seq != since:
                raise gap(self.direction, self.rank, since, seq)
            return "apply"
        if since < self.since or (since == self.since and seq < self.next):
            self.ignored += 1
            return "ignore"
        if since > self.since:  # a new epoch this side's loss path did not start
            raise gap(self.direction, self.rank, self.next, seq)
        if seq > self.next:
            raise gap(self.direction, self.rank, self.next, seq)
        return "apply"

    def accept(self, since: int, seq: int) -> None:
        """The message (since, seq) was applied: expect the one after it."""
        self.since, self.next, self.resync = since, seq + 1, False

    def lost(self) -> None:
        """The worker-loss path ran: ignore everything sent before it."""
        self.resync = True


@dataclass
class Sender:
    """One sending end: the next number and the first number of the current epoch."""

    next: int = 0
    since: int = 0

    def stamp(self) -> tuple[int, int]:
        """(since, seq) for the next message."""
        seq = self.next
        self.next += 1
        return self.since, seq

    def new_epoch(self) -> None:
        """The worker-loss path ran: the next message starts a new epoch."""
        self.since = self.next
