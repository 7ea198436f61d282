"""A modelled copy stream: spills are queued now and land when the test says so.

On a GPU, enqueueing a device-to-host copy and observing its completion are separate
moments; the protocol's two acknowledgements depend on the difference. This stream
keeps them apart on the CPU: ``push`` snapshots the source bytes (stream order, so the
source block may be reused at once), and only ``release`` writes them into the host pool
and makes the transfer ID reportable.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from hisparse.executor.errors import BadTransfer, PendingHostWrite
from hisparse.executor.layout import PoolLayout
from hisparse.executor.validate import check_host_rows


@dataclass(frozen=True, eq=False)
class QueuedCopy:
    """One block copy in flight: its bytes as of enqueue, and where they will land."""

    host: NDArray[np.uint8]  # the destination host pool; identifies the cache
    dst_block: int
    data: NDArray[np.uint8]  # [block_tokens, row_bytes]


class SpillStream:
    """Spill copies in enqueue order, grouped by transfer ID."""

    def __init__(self) -> None:
        self._queued: dict[int, list[QueuedCopy]] = {}  # insertion order = stream order
        self._landed: list[int] = []
        # (pool identity, destination block) -> transfer ID queued into it: a collision
        # check costs O(1), not O(copies in flight)
        self._into: dict[tuple[int, int], int] = {}

    def push(self, transfer_id: int, copy: QueuedCopy) -> None:
        """Queue ``copy`` under ``transfer_id``; refuse collisions before queueing anything."""
        self.check(transfer_id, copy.host, copy.dst_block)
        self._queued.setdefault(transfer_id, []).append(copy)
        self._into[(id(copy.host), copy.dst_block)] = transfer_id

    def check(self, transfer_id: int, host: NDArray[np.uint8], dst_block: int) -> None:
        """Raise ``BadTransfer`` if a copy under ``transfer_id`` into ``dst_block`` of pool
        ``host`` would collide with one already queued or landed."""
        if transfer_id in self._landed:
            raise BadTransfer(
                f"transfer {transfer_id} has already completed; use a fresh transfer ID"
            )
        for other in self._queued.get(transfer_id, ()):
            if other.host is host:
                raise BadTransfer(
                    f"transfer {transfer_id} already has a copy queued for this cache; "
                    "one transfer moves one page per cache"
                )
        pending = self.pending_into(host, dst_block)
        if pending is not None:
            raise BadTransfer(
                f"host block {dst_block} still has copy {pending} queued into it; "
                "its destination lease is held until that copy completes"
            )

    def pending_into(self, host: NDArray[np.uint8], block: int) -> int | None:
        """Transfer ID of the queued copy into ``block`` of pool ``host``, if any."""
        return self._into.get((id(host), block))

    def readable_rows(
        self, layout: PoolLayout, host: NDArray[np.uint8], rows: NDArray[np.int64]
    ) -> NDArray[np.int64]:
        """``rows`` checked for a CPU read of ``host``: refused (``PendingHostWrite``), not
        waited on, while a copy is queued into their block, so completion stays under the
        caller's control."""
        checked = check_host_rows(layout, rows)
        for block in np.unique(checked // layout.block_tokens):
            tid = self.pending_into(host, int(block))
            if tid is not None:
                raise PendingHostWrite(int(block), tid)
        return checked

    def queued(self) -> list[int]:
        """Transfer IDs queued and not yet released, oldest first."""
        return list(self._queued)

    def device_view(
        self, host: NDArray[np.uint8], rows: NDArray[np.int64], block_tokens: int
    ) -> NDArray[np.uint8]:
        """Host ``rows`` as device work enqueued now reads them: queued copies applied."""
        out = host[rows].copy()
        blocks, offsets = rows // block_tokens, rows % block_tokens
        for copies in self._queued.values():
            for c in copies:
                if c.host is host:
                    hit = blocks == c.dst_block
                    out[hit] = c.data[offsets[hit]]
        return out

    def release(self, count: int | None = None) -> None:
        """Land the ``count`` oldest transfers (all when None): bytes reach the host pool."""
        if count is None:
            count = len(self._queued)
        if not 0 <= count <= len(self._queued):
            raise ValueError(f"cannot release {count} of {len(self._queued)} queued transfers")
        for tid in list(self._queued)[:count]:
            for c in self._queued.pop(tid):
                del self._into[(id(c.host), c.dst_block)]
                rows = c.data.shape[0]
                c.host[c.dst_block * rows : (c.dst_block + 1) * rows] = c.data
            self._landed.append(tid)

    def completed(self) -> list[int]:
        """Transfer IDs landed since the last call, in landing order."""
        done, self._landed = self._landed, []
        return done
