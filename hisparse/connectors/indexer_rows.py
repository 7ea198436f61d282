"""The indexer group's bytes as DeepSeek-V3.2 stores them, for engines and oracles.

Per indexer layer and block: ``block_tokens`` FP8 (e4m3) keys of ``head_dim`` bytes,
then ``block_tokens`` float32 scales (4 bytes each) — the layout vLLM's indexer K cache
gives its blocks. The OffloadingConnector copies whole blocks and never looks inside;
``block_bytes`` is all it is told. ``oracle_block`` is the simulator's ground truth.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

DSV32_INDEXER_HEAD_DIM = 128  # FP8 key bytes per token
SCALE_BYTES = 4  # one float32 scale per token


@dataclass(frozen=True)
class IndexerLayout:
    """Shape of one indexer block across the layers that own an indexer."""

    block_tokens: int
    layers: int  # layers that own an indexer (followers reuse a leader's top-K)
    head_dim: int = DSV32_INDEXER_HEAD_DIM

    @property
    def token_bytes(self) -> int:
        return self.head_dim + SCALE_BYTES

    @property
    def layer_bytes(self) -> int:
        return self.block_tokens * self.token_bytes

    @property
    def block_bytes(self) -> int:
        return self.layers * self.layer_bytes


def oracle_block(layout: IndexerLayout, key_id: int) -> NDArray[np.uint8]:
    """The bytes of the indexer block of page content ``key_id``, every layer: FP8 key
    bytes drawn from (content, layer, token, dim), then float32 scales."""
    t = layout.block_tokens
    tok = np.arange(t, dtype=np.int64)
    dim = np.arange(layout.head_dim, dtype=np.int64)
    parts = []
    for layer in range(layout.layers):
        keys = (key_id * 131 + layer * 29 + tok[:, None] * 7 + dim[None, :] * 3) % 256
        scales = (1.0 + (key_id * 17 + layer * 5 + tok) % 97 / 64.0).astype(np.float32)
        parts += [keys.astype(np.uint8).reshape(-1), scales.view(np.uint8)]
    out: NDArray[np.uint8] = np.concatenate(parts)
    return out
