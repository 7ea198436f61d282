"""The KV cache manager interface HiSparse needs, and a real block pool for it.

HMA owns the device pool; HiSparse only asks it to allocate, free, pin and
unpin GPU blocks. Block IDs here are GPU pool indexes; a host block ID never
reaches this interface (the source group's ``block_pool_id`` is ``None``).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Protocol

from hisparse.spec.state import HostBlock


class BlockPoolError(Exception):
    """A request HMA must refuse: double free, unknown block, freeing a pinned block."""


class KVCacheManager(Protocol):
    """The four calls the coordinator makes on the engine's KV cache manager."""

    @property
    def num_free(self) -> int: ...

    def allocate(self, n: int) -> list[int] | None:
        """n free blocks (lowest IDs first), or None without side effects if fewer are free."""
        ...

    def free(self, blocks: Sequence[int]) -> None: ...

    def pin(self, block: int) -> None: ...

    def unpin(self, block: int) -> None: ...


def narrow_gpu_block(block_pool_id: int | None, block: int) -> int:
    """Narrow a block reference to a GPU pool index; host-group references are refused."""
    if block_pool_id is None or isinstance(block, HostBlock):
        raise BlockPoolError(f"block {block!r} belongs to the host group, not a GPU pool")
    return block


class BlockPool:
    """A standalone KV cache manager: a min-heap free list with pins.

    A pinned block cannot be freed; allocation is lowest-ID first, so runs are
    deterministic (the protocol machine's default choice agrees).
    """

    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 1:
            raise ValueError("a block pool needs at least one block")
        self.num_blocks = num_blocks
        self._free = list(range(num_blocks))
        self._is_free = [True] * num_blocks
        self._pinned: set[int] = set()

    @property
    def num_free(self) -> int:
        return len(self._free)

    def _check(self, block: int) -> None:
        if isinstance(block, HostBlock) or not 0 <= block < self.num_blocks:
            raise BlockPoolError(f"{block!r} is not a block of this pool")

    def allocate(self, n: int) -> list[int] | None:
        if n < 0:
            raise BlockPoolError(f"cannot allocate {n} blocks")
        free = self._free
        if n > len(free):
            return None
        pop, is_free = heapq.heappop, self._is_free
        out: list[int] = []
        for _ in range(n):  # one loop, no comprehension frame: this runs per admission
            b = pop(free)
            is_free[b] = False
            out.append(b)
        return out

    def free(self, blocks: Sequence[int]) -> None:
        n, is_free, pinned = self.num_blocks, self._is_free, self._pinned
        for b in blocks:
            if not 0 <= b < n or isinstance(b, HostBlock):  # _check, inlined (hot)
                self._check(b)
            if is_free[b]:
                raise BlockPoolError(f"block {b} is already free")
            if b in pinned:
                raise BlockPoolError(f"block {b} is pinned by a transfer")
        if len(blocks) > 1 and len(set(blocks)) != len(blocks):  # (one block: no set)
            raise BlockPoolError(f"duplicate blocks in free({list(blocks)})")
        free, push = self._free, heapq.heappush
        for b in blocks:
            is_free[b] = True
            push(free, b)

    def pin(self, block: int) -> None:
        if isinstance(block, HostBlock) or not 0 <= block < self.num_blocks:
            self._check(block)  # raises; inlined test: pins run on every spill
        if self._is_free[block] or block in self._pinned:
            raise BlockPoolError(f"block {block} is free or already pinned")
        self._pinned.add(block)

    def unpin(self, block: int) -> None:
        if isinstance(block, HostBlock) or not 0 <= block < self.num_blocks:
            self._check(block)  # raises; inlined test: pins run on every spill
        if block not in self._pinned:
            raise BlockPoolError(f"block {block} is not pinned")
        self._pinned.discard(block)

    def is_free(self, block: int) -> bool:
        self._check(block)
        return self._is_free[block]

    def is_pinned(self, block: int) -> bool:
        return block in self._pinned
