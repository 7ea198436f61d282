"""The simulator's content oracle: the bytes of every KV row, and a top-K with locality.

One module, imported by the simulator, the tensor-parallel run and the P/D prefiller,
so a page's bytes are derived the same way wherever they are written or checked.
"""

from __future__ import annotations

import random

import numpy as np
from numpy.typing import NDArray


def rows_of(
    key_ids: NDArray[np.int64], layer: int, offsets: NDArray[np.int64], width: int
) -> NDArray[np.uint8]:
    """The bytes of KV rows [N, width]: an identifying header, then a derived pattern."""
    n = key_ids.size
    head = np.stack([key_ids, np.full(n, layer), offsets], axis=-1).astype(np.uint32)
    cols = np.arange(width - 12, dtype=np.int64)
    tail = (cols[None, :] * 31 + key_ids[:, None] * 7 + layer * 13 + offsets[:, None]) % 251
    out: NDArray[np.uint8] = np.concatenate(
        [head.view(np.uint8).reshape(n, 12), tail.astype(np.uint8)], axis=1
    )
    return out


def locality_topk(rng: random.Random, n: int, k: int) -> NDArray[np.int32]:
    """A top-K over ``n`` positions with locality: the recent tail, a cluster around a
    drifting centre, a few random (duplicates allowed); all positions, padded, if n <= k."""
    if n <= k:
        out = np.full(k, -1, np.int32)
        out[:n] = np.arange(n, dtype=np.int32)
        return out
    tail = list(range(n - k // 4, n))
    centre = rng.randrange(n)
    cluster = [min(n - 1, max(0, centre + rng.randint(-k, k))) for _ in range(k // 2)]
    rand = [rng.randrange(n) for _ in range(k - len(tail) - len(cluster))]
    return np.array(tail + cluster + rand, dtype=np.int32)
