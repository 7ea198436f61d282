"""The bounded decoder staging pool an import READs into, configured in bytes and slots.

One contiguous buffer split into ``slots`` equal slots; each slot holds one page. The
buffer is host memory here; ``DeviceStagingPool`` (``hisparse.executor.cuda.staging``)
keeps it in VRAM for the CUDA executor, overriding only how a slot is zeroed and
written. A lease names its owner (the request), and a transport writes only into slots
leased to the request it imports. Leasing more than is free is a typed refusal that
leases nothing. Cost per call is O(slots leased/released).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from hisparse.transport.errors import StagingConfigError, StagingExhausted, TransportError


def buffer_address(buf: Any) -> int:
    """The address of a contiguous byte array's first byte: a NumPy array's host address,
    or a device array's (CuPy, anything with ``__cuda_array_interface__``) device pointer."""
    cai = getattr(buf, "__cuda_array_interface__", None)
    if cai is not None:
        return int(cai["data"][0])
    return int(buf.ctypes.data)


def on_device(buf: Any) -> bool:
    """Whether ``buf`` is device memory (it exposes ``__cuda_array_interface__``)."""
    return hasattr(buf, "__cuda_array_interface__")


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
        self.buffer: Any = self._allocate(slots * slot_bytes)
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
            self._zero(slot)
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

    def view(self, slot: int) -> Any:
        """The page-sized writable view of ``slot`` (an array of the buffer's kind)."""
        start = slot * self.slot_bytes
        return self.buffer[start : start + self.page_bytes]

    def address(self, slot: int) -> int:
        """The address of ``slot`` (what a NIXL local descriptor names): host memory here,
        a device pointer in a ``DeviceStagingPool``."""
        return buffer_address(self.buffer) + slot * self.slot_bytes

    # -- what a pool in other memory overrides -------------------------------------------

    def _allocate(self, nbytes: int) -> Any:
        """The zeroed staging buffer: host memory."""
        return np.zeros(nbytes, dtype=np.uint8)

    def _zero(self, slot: int) -> None:
        """Zero a slot as it is leased."""
        self.view(slot)[:] = 0

    def write(self, dst: Any, src: np.ndarray) -> None:
        """A loopback READ's bytes (host memory) into ``dst``, a view of this pool or of
        registered block memory. A host pool writes host memory only: device block memory
        needs a ``DeviceStagingPool``, whose writes are ordered on the executor's stream."""
        if on_device(dst):
            raise TransportError(
                "a host staging pool cannot write device memory: build the pool with the "
                "CUDA executor's staging_pool() (a DeviceStagingPool)"
            )
        dst[:] = src

    def fence(self) -> None:
        """Before a writer outside the executor's stream (a NIXL READ) writes a leased slot
        or block memory: every queued operation on them has finished. Host memory has no
        queue: nothing to wait for."""
        return None
