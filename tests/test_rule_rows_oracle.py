"""Rule: the content oracle's rows tell every (key, layer, offset) apart in their derived
tail as well as their header, and ``locality_topk``'s cluster drifts over all positions
(``hisparse/rows.py``).

From the guard survivors of the second guard-phase run (docs/mutation-survivors.md):
``22:var:5`` (the tail ignores the offset), ``22:var:6`` (the tail reads the width, not
the layer), ``22:arith:0`` (``% 251`` → ``// 251``: neighbouring rows share a tail), so a
row whose tail bytes came from another row would pass as its own; ``37:var:16``
(``randrange(n)`` → ``randrange(k)``): the cluster's centre stuck in the first ``k``
positions.
"""

from __future__ import annotations

import random

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from hisparse.rows import locality_topk, rows_of

SMALL = st.integers(0, 15)


@given(key=SMALL, layer=SMALL, offset=SMALL, which=st.sampled_from(["key", "layer", "offset"]),
       width=st.integers(13, 40))
def test_changing_one_coordinate_changes_the_tail(key: int, layer: int, offset: int,
                                                  which: str, width: int) -> None:
    def tail(k: int, la: int, o: int) -> bytes:
        row = rows_of(np.array([k], np.int64), la, np.array([o], np.int64), width)
        assert row.shape == (1, width)
        return bytes(row[0, 12:])

    other = {"key": (key + 1, layer, offset), "layer": (key, layer + 1, offset),
             "offset": (key, layer, offset + 1)}[which]
    assert tail(key, layer, offset) != tail(*other)


def test_the_cluster_centre_drifts_over_every_position() -> None:
    rng, n, k = random.Random(0), 4000, 16
    lo, hi = k // 4, k // 4 + k // 2  # the cluster's entries in the top-K
    cluster = np.concatenate([locality_topk(rng, n, k)[lo:hi] for _ in range(200)])
    assert cluster.min() >= 0 and cluster.max() < n
    assert (cluster >= n // 2).any() and (cluster < n // 2).any()
