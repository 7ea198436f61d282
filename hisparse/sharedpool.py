"""The shared host backing on the reference executor: one host allocation for every rank.

With ``backing = shared`` the TP ranks' host pools are one physical allocation
(``multiprocessing.shared_memory``), mapped by every rank's process. Only the writer
rank copies into it; it records each landed copy in an event table in the same
allocation (per host block, the newest transfer landed there). A reader rank copies
nothing: taking a spill command it records that its stream waits on the writer's event
for that block (the spec's ``waits``), and its reads come straight from the shared
bytes. A read of a block whose awaited event has not fired is refused, so a decode asks
first (``pending``) and the driver lets the writer's copies land before it (as a stream
wait on an event would). A reader that skipped the wait would read stale shared bytes,
which the simulator's row check catches.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Iterable, Sequence
from multiprocessing import shared_memory

import numpy as np
from numpy.typing import NDArray

from hisparse.executor.base import SpillCopy
from hisparse.executor.errors import ExecutorError
from hisparse.executor.layout import PoolLayout
from hisparse.executor.reference import ReferenceExecutor, ReferencePools
from hisparse.executor.validate import check_spills

NOT_LANDED = -1


class ReadBeforeWriterEvent(ExecutorError):
    """A reader rank read a host block before the writer's copy into it landed."""


class SharedHostPool:
    """The one allocation: every layer's host rows, then one event per host block."""

    def __init__(self, layout: PoolLayout, layers: int, name: str | None = None) -> None:
        self.layout, self.layers = layout, layers
        self._layer_bytes = layout.host_rows * layout.row_bytes
        size = layers * self._layer_bytes + layout.host_blocks * 8
        self.owner = name is None
        self._unlinked = False
        if name is None:
            self.shm = shared_memory.SharedMemory(create=True, size=size)
        else:
            self.shm = shared_memory.SharedMemory(name=name)
            if self.shm.size < size:
                self.shm.close()
                raise ExecutorError(f"shared host pool {name!r} is {self.shm.size} bytes, "
                                    f"the layout needs {size}")
        try:
            self._map = _view_mapping(self.shm, size)
        except OSError as e:  # nothing left behind: the name freed, the mapping closed
            self._close_shm()
            raise ExecutorError(f"shared host pool {self.shm.name!r} cannot be mapped: "
                                f"{e}") from e
        if self.owner:
            self.events[:] = NOT_LANDED

    @property
    def name(self) -> str:
        return self.shm.name

    @property
    def nbytes(self) -> int:
        """Bytes of host rows (the pool itself, without the event table)."""
        return self.layers * self._layer_bytes

    @property
    def events(self) -> NDArray[np.int64]:
        """Per host block, the newest transfer ID whose writer copy has landed there."""
        return np.frombuffer(self._map, np.int64, self.layout.host_blocks,
                             self.layers * self._layer_bytes)

    def host(self, layer: int) -> NDArray[np.uint8]:
        """Layer ``layer``'s host rows, in the shared allocation."""
        return np.frombuffer(self._map, np.uint8, self._layer_bytes,
                             layer * self._layer_bytes).reshape(self.layout.host_rows,
                                                                self.layout.row_bytes)

    def close(self) -> None:
        """Free the name (the creator) and unmap; while arrays in this process still
        view the allocation it stays mapped until they are gone. Idempotent."""
        self._close_shm()
        with contextlib.suppress(BufferError):  # views alive: unmapped with the last
            self._map.close()

    def _close_shm(self) -> None:
        """Free the name (the creator) and close ``shm``'s own mapping (no array views
        it). Idempotent."""
        if self.owner and not self._unlinked:
            self._unlinked = True
            self.shm.unlink()
        self.shm.close()


def _view_mapping(shm: shared_memory.SharedMemory, size: int) -> mmap.mmap:
    """A second mapping of ``shm``'s allocation, the one every view is made from.

    ``np.frombuffer`` holds a buffer export on it, so it cannot be closed while any view
    lives: it is unmapped when the last one goes. (Views of ``shm.buf`` made with
    ``np.ndarray(buffer=...)`` hold no export: closing ``shm`` unmapped memory they still
    read, and a later read died of SIGSEGV.)"""
    fd = os.open(f"/dev/shm/{shm.name.lstrip('/')}", os.O_RDWR)
    try:
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)


class SharedHostExecutor(ReferenceExecutor):
    """A ``ReferenceExecutor`` whose host pools live in a ``SharedHostPool``: the writer
    copies and records its events; a reader copies nothing and waits on them."""

    def __init__(
        self, pool: SharedHostPool, *, writer: bool, skip_writer_wait: bool = False
    ) -> None:
        super().__init__()
        self.pool, self.writer = pool, writer
        self.skip_writer_wait = skip_writer_wait  # an injected bug, for tests only
        self._layers = 0
        self._dst: dict[int, int] = {}  # writer: queued transfer -> destination block
        self._waits: dict[int, int] = {}  # reader: host block -> transfer it waits on

    @property
    def copies_spills(self) -> bool:
        """Only the writer copies; a reader waits on the writer's events."""
        return self.writer

    def allocate(self, layout: PoolLayout, *, lru: bool = True) -> ReferencePools:
        """Pools in layer order; the host rows are the shared allocation's."""
        if layout != self.pool.layout or self._layers >= self.pool.layers:
            raise ExecutorError("the worker's layout or layers differ from the shared pool's")
        pools = super().allocate(layout, lru=lru)
        pools.host = self.pool.host(self._layers)
        self._layers += 1
        return pools

    def enqueue_spills(self, pools: ReferencePools, spills: Sequence[SpillCopy]) -> None:
        if self.writer:
            super().enqueue_spills(pools, spills)
            for t, _, d in spills:
                self._dst[int(t)] = int(d)
            return
        checked = check_spills(pools.layout, spills)
        if self.skip_writer_wait:
            return
        events = self.pool.events
        for t, _, d in checked:
            if events[d] < t:
                self._waits[int(d)] = max(self._waits.get(int(d), NOT_LANDED), int(t))

    def release(self, count: int | None = None) -> None:
        """Land the oldest copies; then (the writer) fire their events."""
        landing = self.queued()[: count if count is not None else None]
        super().release(count)
        events = self.pool.events
        for t in landing:
            d = self._dst.pop(t)
            events[d] = max(int(events[d]), t)

    def pending(self, blocks: Iterable[int]) -> list[int]:
        """The writer transfers that reads of ``blocks`` still wait on (a reader)."""
        events, out = self.pool.events, []
        for b in blocks:
            t = self._waits.get(int(b))
            if t is not None:
                if events[b] >= t:
                    del self._waits[int(b)]
                else:
                    out.append(t)
        return out

    def _copy_plan(self, pools: ReferencePools, plan: NDArray[np.int32]) -> None:
        if not self.writer:
            blocks = np.unique(plan[:, 1].astype(np.int64) // pools.layout.block_tokens)
            if waiting := self.pending(blocks.tolist()):
                raise ReadBeforeWriterEvent(
                    f"host reads wait on the writer's copies {sorted(set(waiting))}")
        super()._copy_plan(pools, plan)
