"""Seeded faults on the two channels for ``hisparse simulate --message-faults RATE``.

Each message (a connector metadata to one rank, a worker meta from one rank) is, with
probability ``rate`` each, duplicated (delivered twice), delayed (held back and
delivered after the channel's next message) or dropped. The receivers' sequence
numbers (hisparse/channel.py) ignore duplicates and late copies and refuse what follows
a loss (``MessageGap``), which the simulation answers with the worker-loss path.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

KINDS = ("duplicated", "delayed", "dropped")
DIRECTIONS = ("down", "up")


@dataclass
class MessageFaults:
    """One channel router per run: what to deliver now for each message sent."""

    rate: float
    seed: int
    ranks: int
    counts: dict[str, int] = field(default_factory=dict)
    _held: dict[tuple[str, int], list[bytes]] = field(default_factory=dict)
    _rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        if not 0.0 <= self.rate <= 1.0 / len(KINDS):
            raise ValueError(f"message fault rate {self.rate} is not in [0, 1/3]")
        self._rng = random.Random(f"message-faults-{self.seed}")
        self.counts = {f"{d}_{k}": 0 for d in DIRECTIONS for k in KINDS}
        self.counts.update(gaps=0)

    def route(self, direction: str, rank: int, raw: bytes) -> list[bytes]:
        """The messages to deliver now, in order, for ``raw`` just sent."""
        held = self._held.setdefault((direction, rank), [])
        late, held[:] = list(held), []
        x = self._rng.random()
        if x < self.rate:
            kind, now = "duplicated", [raw, raw]
        elif x < 2 * self.rate:
            kind, now = "delayed", []
            held.append(raw)
        elif x < 3 * self.rate:
            kind, now = "dropped", []
        else:
            return [raw, *late]
        self.counts[f"{direction}_{kind}"] += 1
        return [*now, *late]

    def flush(self, direction: str, rank: int) -> list[bytes]:
        """What is still held back on one channel (the run's end: it arrives late)."""
        return self._held.pop((direction, rank), [])

