"""Rule: a prefiller's pages are layer-major, and each row is exactly the simulator's row
for its (page key, layer, offset) when its token is one of the request's, and filler
past the last token, for every count of layers, tokens per block, pages and tokens
(``hisparse/pdimport/prefill.py``).

From the guard survivors of the third guard-phase run (docs/mutation-survivors.md):
``32:var:7`` (``n * block_tokens`` → ``n * layers``: the filler's start computed from the
layer count, so with layers unlike the block size valid rows were overwritten with
filler, or filler missing; the guards only use shapes where the two agree or the filler
is never read).
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from hisparse.pdimport.prefill import FILLER, prefill_pages
from hisparse.rows import rows_of


@st.composite
def _shapes(draw: st.DrawFn) -> tuple[list[int], int, int, int, int]:
    pages = draw(st.integers(1, 4))
    block = draw(st.integers(1, 5))
    tokens = draw(st.integers((pages - 1) * block + 1, pages * block))
    keys = draw(st.lists(st.integers(0, 50), min_size=pages, max_size=pages))
    return keys, draw(st.integers(1, 3)), block, draw(st.sampled_from([16, 24])), tokens


@given(shape=_shapes())
def test_every_row_is_its_own_or_filler_past_the_last_token(
    shape: tuple[list[int], int, int, int, int]
) -> None:
    keys, layers, block, width, tokens = shape
    out = prefill_pages(np.array(keys, np.int64), layers, block, width, tokens)
    assert out.shape == (len(keys), layers * block * width) and out.dtype == np.uint8
    view = out.reshape(len(keys), layers, block, width)
    for p, key in enumerate(keys):
        for layer in range(layers):
            for off in range(block):
                row = view[p, layer, off]
                if p * block + off < tokens:
                    want = rows_of(np.array([key], np.int64), layer,
                                   np.array([off], np.int64), width)[0]
                    assert np.array_equal(row, want), (p, layer, off)
                else:
                    assert np.all(row == FILLER), (p, layer, off)
