"""The CUDA executor's two roles on a host allocation shared by tensor-parallel ranks.

``SharedWriterExecutor`` (the spec's ``Writer``) copies spills into the one host pool as
``CudaExecutor`` does and records an inter-process event after each batch; for each
transfer it announces the record that covers its copy. ``SharedReaderExecutor`` copies
nothing: it takes a spill command only once the writer's record for that transfer has
been announced to it (the spec: a reader takes a command once the writer's event for it
exists) and makes its compute stream wait on that record; its enqueued ack is its last
(it never owes a completed one). Reads of the host pool by a reader therefore follow the
writer's copies on the device, with no host-side wait.

The other direction: a reader records its own event after each step's reads
(``mark_reads``) and announces it to the writer, whose next copies wait on every
reader's newest announced record, so a reused host block is never overwritten under a
reader's kernel that still reads it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from hisparse.executor.base import SpillCopy
from hisparse.executor.cuda.executor import CudaExecutor
from hisparse.executor.cuda.hostmem import SharedHost
from hisparse.executor.cuda.ipc import IpcEventRing, PeerEvents
from hisparse.executor.cuda.pools import CudaPools
from hisparse.executor.errors import ExecutorError
from hisparse.executor.validate import check_host_rows

RING_SIZE = 8
"""Events per ring: any size is correct under the announce-first rule (ipc.py)."""


class WriterEventMissing(ExecutorError):
    """A reader was handed a spill whose writer record has not been announced to it: the
    writer has not taken the command yet. Nothing was queued."""

    def __init__(self, transfer_id: int) -> None:
        super().__init__(
            f"transfer {transfer_id}: the writer's copy event for it has not been announced; "
            "the writer takes a command first"
        )
        self.transfer_id = transfer_id


class SharedWriterExecutor(CudaExecutor):
    """The writing rank on a shared host pool: copies, then announces its copy events."""

    def __init__(self, *, host_arena: SharedHost, ring_size: int = RING_SIZE, **kw: Any) -> None:
        super().__init__(host_arena=host_arena, **kw)
        with self._cupy.cuda.Device(self.device_id):
            self.events = IpcEventRing(ring_size)
        self.readers: dict[int, PeerEvents] = {}
        """Rank -> that reader's read-done ring (``add_reader``)."""
        self._announce: dict[int, int] = {}

    def add_reader(self, rank: int, handles: Sequence[bytes]) -> None:
        with self._cupy.cuda.Device(self.device_id):
            self.readers[rank] = PeerEvents(handles)

    def reads_done(self, rank: int, record: int) -> None:
        """Reader ``rank`` announces that its reads up to ``record`` are recorded."""
        self.readers[rank].ring.announce(record)

    def enqueue_spills(self, pools: CudaPools, spills: Sequence[SpillCopy]) -> None:
        """``CudaExecutor.enqueue_spills``, after every reader's announced reads, then one
        copy event whose record covers these transfers."""
        checked = self.checked_spills(pools, spills)  # a refusal queues no wait either
        if not checked:
            return
        for peer in self.readers.values():
            if peer.ring.announced:
                peer.wait(self.spill_stream, peer.ring.announced)
        super().enqueue_spills(pools, checked)
        record = self.events.record(self.spill_stream)
        for t, _, _ in checked:
            self._announce[t] = record

    def take_announcement(self) -> dict[int, int]:
        """Transfer ID -> the record covering its copy, since the last call (for readers)."""
        out, self._announce = self._announce, {}
        return out

    def close(self) -> None:
        for peer in self.readers.values():
            peer.close()
        self.events.close()


class SharedReaderExecutor(CudaExecutor):
    """A reading rank on a shared host pool: orders its reads after the writer's copies."""

    def __init__(
        self, *, host_arena: SharedHost, writer_handles: Sequence[bytes],
        ring_size: int = RING_SIZE, **kw: Any,
    ) -> None:
        super().__init__(host_arena=host_arena, **kw)
        with self._cupy.cuda.Device(self.device_id):
            self.writer = PeerEvents(writer_handles)
            self.events = IpcEventRing(ring_size)
        self._writer_record: dict[int, int] = {}  # transfer -> announced record (not yet taken)
        self._taken: set[int] = set()  # taken since the last completed(): records to forget
        self._taken_by: dict[int, set[int]] = {}  # transfer -> the caches that took it

    @property
    def copies_spills(self) -> bool:
        """A reader copies nothing: the writer's copy fills the one host pool."""
        return False

    def learn(self, announcement: Mapping[int, int]) -> None:
        """The writer's announcement: which record covers each new transfer's copy."""
        if announcement:
            self.writer.ring.announce(max(announcement.values()))
            self._writer_record.update(announcement)

    def enqueue_spills(self, pools: CudaPools, spills: Sequence[SpillCopy]) -> None:
        """Take the commands: check them whole, then the compute stream waits on the
        writer's newest record among them (the spill stream is in order, so that covers
        every earlier copy too). Copies nothing."""
        checked = self.checked_spills(pools, spills)
        for t, _, _ in checked:
            if t not in self._writer_record:
                raise WriterEventMissing(t)
            if id(pools) in self._taken_by.get(t, set()):
                raise ExecutorError(f"transfer {t} was already taken for this cache")
        if not checked:
            return
        record = max(self._writer_record[t] for t, _, _ in checked)
        self.writer.wait(self.stream, record)
        for t, _, _ in checked:
            self._taken_by.setdefault(t, set()).add(id(pools))
            self._taken.add(t)

    def completed(self) -> list[int]:
        """Always empty: a reader copies nothing, so it never owes a completed ack (its
        enqueued ack, once its stream is ordered after the writer's copy, is its last).
        Forgets the records of the transfers taken since the last call."""
        for pools in list(self._leaders):
            pools.check_launches(sticky=False)
        for t in self._taken:
            self._writer_record.pop(t, None)
            self._taken_by.pop(t, None)
        self._taken = set()
        return []

    def read_host_rows(self, pools: CudaPools, rows: NDArray[np.int64]) -> NDArray[np.uint8]:
        """Host rows for a CPU reader, after the writer's newest announced copy event."""
        checked = check_host_rows(pools.layout, rows)
        if self.writer.ring.announced:
            self.writer.synchronize(self.writer.ring.announced)
        return pools.host[checked].copy()

    def mark_reads(self) -> int:
        """Record the read-done event after the reads queued so far; its number (for the
        writer's ``reads_done``)."""
        return self.events.record(self.stream)

    def close(self) -> None:
        self.writer.close()
        self.events.close()
