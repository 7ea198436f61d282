"""Sequence numbers on the two channels: telling a fresh message from a replay.

Engines retry steps and re-send messages, so a message may arrive twice, late or never
(tla/HiSparse.tla: IgnoreReplay, LoseCommand, LoseMeta). Each connector metadata and
each worker meta carries, for its rank, ``epoch`` (how many times the rank went through
the worker-loss path: the worker counts its restarts, the coordinator its recoveries,
and the loss path does both once), ``since`` (the number of the epoch's first message)
and ``seq`` (it only grows). The receiver ignores a message of an older epoch (sent
before the loss) or one numbered below the next (a replay), applies the one numbered
next (the epoch's first: ``since``), and refuses one numbered past it with
``MessageGap``: one before it was lost, and the engine runs the worker-loss path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from hisparse.spec.errors import gap

Verdict = Literal["apply", "ignore"]


@dataclass
class Receiver:
    """One rank's receiving end: its epoch and the number it expects next."""

    direction: str
    rank: int
    epoch: int = 0
    next: int | None = None  # None: nothing taken in this epoch yet (expect ``since``)
    ignored: int = field(default=0, compare=False)  # replays, pre-loss messages (a statistic)

    def classify(self, epoch: int, since: int, seq: int) -> Verdict:
        """Apply or ignore the message; ``MessageGap`` if one before it was lost (or it
        is of an epoch this side's loss path never started). Changes nothing but the
        ignored count; ``accept`` after applying."""
        expected = since if self.next is None else self.next
        if epoch < self.epoch or (epoch == self.epoch and seq < expected):
            self.ignored += 1
            return "ignore"
        if epoch > self.epoch or seq > expected:
            raise gap(self.direction, self.rank, expected, seq)
        return "apply"

    def accept(self, seq: int) -> None:
        """The message ``seq`` was applied: expect the one after it."""
        self.next = seq + 1

    def lost(self) -> None:
        """The worker-loss path ran: a new epoch; nothing sent before it is taken."""
        self.epoch += 1
        self.next = None


@dataclass
class Sender:
    """One sending end: its epoch, the epoch's first number and the next number."""

    epoch: int = 0
    since: int = 0
    next: int = 0

    def stamp(self) -> tuple[int, int, int]:
        """(epoch, since, seq) for the next message."""
        seq = self.next
        self.next += 1
        return self.epoch, self.since, seq

    def new_epoch(self) -> None:
        """The worker-loss path ran: the next message opens a new epoch."""
        self.epoch += 1
        self.since = self.next
