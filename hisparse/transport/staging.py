"""The bounded decoder staging pool an import READs into, configured in bytes and slots.

One contiguous buffer (host memory on the CPU; a GPU buffer later) split into ``slots``
equal slots; each slot holds one page. A lease names its owner (the request), and a
transport writes only into slots leased to the request it imports. Leasing more than is
free is a typed refusal that leases nothing. Cost per call is O(slots leased/released).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hisparse.transport.errors import StagingConfigError, StagingExhausted, TransportError


@dataclass(frozen=True)
class StagingLease:
    """Slot ``slot`` of a pool, leased to request ``owner``."""

    owner: str
    slot: int


class StagingPool:
    """``capacity_bytes`` of staging memory in ``slots`` slots of at least one page each."""

    def __init__(self, capacity_bytes: int, slots: int, page_bytes: int) -> None:
        if slots < 1 or page_bytes < 1:
            raise StagingConfigError(
                f"a staging pool needs at least 1 slot and a positive page size, "
                f"got {slots} slots of pages of {page_bytes} bytes"
            )
        slot_bytes = capacity_bytes // slots
        if slot_bytes < page_bytes:
            raise StagingConfigError(
                f"staging pool of {capacity_bytes} bytes in {slots} slots gives "
                f"{slot_bytes} bytes a slot, which cannot hold one page of {page_bytes} "
                f"bytes: raise the staging bytes to at least {slots * page_bytes} "
                f"or lower the slots to at most {max(capacity_bytes // page_bytes, 0)}"
            )
        self.capacity_bytes = capacity_bytes
        self.slots = slots
        self.page_bytes = page_bytes
        self.slot_bytes = slot_bytes
        self.buffer = np.zeros(slots * slot_bytes, dtype=np.uint8)
        self._free = list(range(slots - 1, -1, -1))  # pop() gives the lowest slot
        self._owner: dict[int, str] = {}

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def in_use(self) -> int:
        return len(self._owner)

    def lease(self, owner: str, n: int) -> list[StagingLease]:
        """``n`` zeroed slots for ``owner``, or ``StagingExhausted`` leasing nothing."""
        if n < 1:
            raise ValueError(f"lease at least one slot, got {n}")
        if n > len(self._free):
            raise StagingExhausted(
                f"request {owner!r} asked for {n} staging slots, {len(self._free)} of "
                f"{self.slots} are free"
            )
        leases = []
        for _ in range(n):
            slot = self._free.pop()
            self._owner[slot] = owner
            self.view(slot)[:] = 0
            leases.append(StagingLease(owner, slot))
        return leases

    def release(self, leases: list[StagingLease]) -> None:
        """Return ``leases``; a lease not held as named is refused before any is returned."""
        seen: set[int] = set()
        for lease in leases:
            if self._owner.get(lease.slot) != lease.owner or lease.slot in seen:
                raise TransportError(f"{lease} is not a live lease of this pool")
            seen.add(lease.slot)
        for lease in leases:
            del self._owner[lease.slot]
            self._free.append(lease.slot)

    def holds(self, lease: StagingLease) -> bool:
        """Whether ``lease`` is live: its slot is leased to its owner."""
        return self._owner.get(lease.slot) == lease.owner

    def view(self, slot: int) -> np.ndarray:
        """The page-sized writable view of ``slot``."""
        start = slot * self.slot_bytes
        return self.buffer[start : start + self.page_bytes]

    def address(self, slot: int) -> int:
        """The host address of ``slot`` (what a NIXL local descriptor names)."""
        return int(self.buffer.ctypes.data) + slot * self.slot_bytes
