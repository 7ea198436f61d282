"""Inter-process CUDA events in a ring: how one rank's stream orders itself after another's.

With a shared host allocation the writer rank copies into the one pool and every reader
rank's stream must read a host block only after the writer's copy into it (the spec's
reader waits). The writer records an inter-process event after each spill batch; its
handles cross to the readers once, at start. Records are numbered 1, 2, ... and record
``n`` lives in ring slot ``(n - 1) % size``; the number crosses with each step's metadata
(the *announcement*).

The ring's reuse hazard: ``cudaStreamWaitEvent`` waits on the slot's most recent record
*at the time of the call*. A wait for record ``n`` issued before the writer has recorded
``n`` would wait on the slot's previous record, ``n - size``: an older copy, so the read
could overtake the copy it must follow. **Rule: a peer waits on record ``n`` only after
``n`` has been announced to it** (the announcement is sent after the record call
returned). A wait for an announced record whose slot has since been re-recorded waits
on a later record of the same in-order stream: only longer, never too short. ``EventRing``
enforces the rule on the host and refuses, changing nothing, with ``EventNotRecorded``.

The same ring runs the other way too: a reader records after its reads of a step, and
the writer's next copies wait on it, so a copy never overwrites a host block a reader's
earlier, still running kernel reads (the reuse of an evicted block).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hisparse.executor.cuda.backend import load_cupy
from hisparse.executor.errors import ExecutorError

_EVENT_DISABLE_TIMING = 2  # cudaEventDisableTiming
_EVENT_INTERPROCESS = 4  # cudaEventInterprocess


class EventNotRecorded(ExecutorError):
    """A wait names a record its owner has not announced: the ring slot still holds an
    older record, and waiting on it would order nothing useful. Nothing was queued."""

    def __init__(self, record: int, announced: int) -> None:
        super().__init__(
            f"record {record} has not been announced (last announced: {announced}); "
            "wait only for announced records"
        )
        self.record = record
        self.announced = announced


class EventRing:
    """The ring's bookkeeping, on the host: record numbers, slots and the wait rule."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"an event ring needs at least 1 slot, got {size}")
        self.size = size
        self.announced = 0
        """The newest record known to have been made (owner: made; peer: announced)."""

    def slot(self, record: int) -> int:
        return (record - 1) % self.size

    def advance(self) -> tuple[int, int]:
        """The owner's next record: (record number, slot)."""
        self.announced += 1
        return self.announced, self.slot(self.announced)

    def announce(self, record: int) -> None:
        """The owner says ``record`` has been made; announcements never go back."""
        if record < self.announced:
            raise ValueError(f"record {record} announced after record {self.announced}")
        self.announced = record

    def wait_slot(self, record: int) -> int:
        """The slot to wait on for ``record``; ``EventNotRecorded`` breaks the rule."""
        if not 1 <= record <= self.announced:
            raise EventNotRecorded(record, self.announced)
        return self.slot(record)


def _create_events(size: int) -> list[int]:
    rt = load_cupy().cuda.runtime
    return [int(rt.eventCreateWithFlags(_EVENT_DISABLE_TIMING | _EVENT_INTERPROCESS))
            for _ in range(size)]


class IpcEventRing:
    """The owner's ring: inter-process events on the current device, recorded in turn."""

    def __init__(self, size: int) -> None:
        self._rt = load_cupy().cuda.runtime
        self.ring = EventRing(size)
        self.events = _create_events(size)

    def handles(self) -> list[bytes]:
        """The events' IPC handles (64 bytes each), for the peers (once, at start)."""
        return [bytes(self._rt.ipcGetEventHandle(e)) for e in self.events]

    def record(self, stream: Any) -> int:
        """Record the next event after the work queued on ``stream``; its number."""
        record, slot = self.ring.advance()
        self._rt.eventRecord(self.events[slot], stream.ptr)
        return record

    def close(self) -> None:
        events, self.events = self.events, []
        for e in events:
            self._rt.eventDestroy(e)


class PeerEvents:
    """Another process's ring, opened from its handles: waits follow the ring's rule."""

    def __init__(self, handles: Sequence[bytes]) -> None:
        self._rt = load_cupy().cuda.runtime
        self.ring = EventRing(len(handles))
        self.events = [int(self._rt.ipcOpenEventHandle(bytes(h))) for h in handles]

    def wait(self, stream: Any, record: int) -> None:
        """``stream``'s later work waits (on the device) for the peer's ``record``."""
        slot = self.ring.wait_slot(record)
        self._rt.streamWaitEvent(stream.ptr, self.events[slot], 0)

    def synchronize(self, record: int) -> None:
        """Wait on the host until the peer's ``record`` has completed."""
        self._rt.eventSynchronize(self.events[self.ring.wait_slot(record)])

    def close(self) -> None:
        events, self.events = self.events, []
        for e in events:
            self._rt.eventDestroy(e)
