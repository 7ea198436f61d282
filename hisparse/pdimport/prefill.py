"""The pages a prefiller holds for an imported request: bytes derived from its keys.

A page is layer-major (``hisparse.transport.geometry``): one block per cache, each
``block_tokens`` rows, each row the bytes ``hisparse simulate`` derives for (page key,
layer, offset), so a row that lands in the wrong place, or not at all, is a data
mismatch the simulator's check counts like any other. Rows past the request's last
token hold filler the decoder must never read (it reads only valid rows).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from hisparse.rows import rows_of

FILLER = 0xA5
"""What a prefiller's rows past the last token hold: never read, so never seen."""


def prefill_pages(
    key_ids: NDArray[np.int64], layers: int, block_tokens: int, row_bytes: int,
    num_tokens: int,
) -> NDArray[np.uint8]:
    """``[pages, layers * block_tokens * row_bytes]``: each page's rows for every layer."""
    n = key_ids.size
    keys = np.repeat(key_ids, block_tokens)
    offs = np.tile(np.arange(block_tokens, dtype=np.int64), n)
    per_layer = [rows_of(keys, layer, offs, row_bytes).reshape(n, block_tokens, row_bytes)
                 for layer in range(layers)]
    pages = np.stack(per_layer, axis=1)  # [pages, layers, block, row]
    tail = n * block_tokens - num_tokens
    if tail:
        pages[-1, :, block_tokens - tail:, :] = FILLER
    return np.ascontiguousarray(pages.reshape(n, layers * block_tokens * row_bytes))
