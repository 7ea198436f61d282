"""A prefix-cacheable GPU cache group (the engine's side, like vLLM's block pool for
one KV cache group): blocks with a content identity stay cached after their request
frees them and serve later requests' prefix hits until pressure evicts them (least
recently freed first). The indexer group lives here; HiSparse never sees it.
Cost: O(pages of the request) per call; the pool is never scanned."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from hisparse.connectors.offload_store import BlockHash


class PrefixCachedGroup:
    """``data[block]`` is the group's bytes; blocks are reference counted."""

    def __init__(self, blocks: int, block_bytes: int) -> None:
        self.data = np.zeros((blocks, block_bytes), np.uint8)
        self._refs = [0] * blocks
        self._hash: list[BlockHash | None] = [None] * blocks
        self._cached: dict[BlockHash, int] = {}
        self._evictable: OrderedDict[int, None] = OrderedDict()  # cached, unreferenced
        self._free = list(range(blocks - 1, -1, -1))  # no identity, unreferenced
        self.evictions = 0

    @property
    def blocks(self) -> int:
        return len(self._refs)

    @property
    def num_free(self) -> int:
        """Blocks an allocation may take (plain free ones and evictable cached ones)."""
        return len(self._free) + len(self._evictable)

    def hit(self, hashes: Sequence[BlockHash]) -> int:
        """The longest prefix of ``hashes`` cached on the GPU."""
        n = 0
        while n < len(hashes) and hashes[n] in self._cached:
            n += 1
        return n

    def can_allocate(self, hashes: Sequence[BlockHash], hits: int) -> bool:
        """Whether ``allocate(hashes, hits)`` would succeed (changes nothing)."""
        reused_evictable = sum(1 for h in hashes[:hits] if self._refs[self._cached[h]] == 0)
        return self.num_free - reused_evictable >= len(hashes) - hits

    def allocate(self, hashes: Sequence[BlockHash], hits: int) -> list[int] | None:
        """The cached blocks of the first ``hits`` pages, fresh blocks for the rest;
        None (nothing changed) if the pool cannot give them."""
        if hits > self.hit(hashes) or not self.can_allocate(hashes, hits):
            return None
        out = []
        for h in hashes[:hits]:
            g = self._cached[h]
            self._evictable.pop(g, None)
            self._refs[g] += 1
            out.append(g)
        for _ in range(len(hashes) - hits):
            g = self._take()
            self._refs[g] = 1
            out.append(g)
        return out

    def _take(self) -> int:
        if self._free:
            return self._free.pop()
        g, _ = self._evictable.popitem(last=False)
        old = self._hash[g]
        assert old is not None
        del self._cached[old]
        self._hash[g] = None
        self.evictions += 1
        return g

    def publish(self, block: int, h: BlockHash) -> None:
        """The block now holds the content ``h`` (prefill wrote it or a restore landed):
        later lookups may hit it. A second block of one content stays private."""
        if self._hash[block] is None and h not in self._cached:
            self._hash[block] = h
            self._cached[h] = block

    def free(self, blocks: Sequence[int]) -> None:
        """Drop one reference each; a block with an identity stays cached."""
        for g in blocks:
            self._refs[g] -= 1
            if self._refs[g] < 0:
                raise RuntimeError(f"GPU block {g} freed more often than allocated")
            if self._refs[g] == 0:
                if self._hash[g] is None:
                    self._free.append(g)
                else:
                    self._evictable[g] = None
