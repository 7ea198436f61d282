"""Executor rules met by the whole mutation run's sixteenth pass
(docs/mutation-survivors.md)."""

from __future__ import annotations

import numpy as np
import pytest

from hisparse.executor.errors import BadTransfer
from hisparse.executor.resolver import ResolveBatch
from hisparse.executor.stream import QueuedCopy, SpillStream
from tests.test_executor_reference import _good, counters, fresh, make_batch, state


@pytest.mark.parametrize("step", [np.int64(5), np.int32(5), np.uint16(5)])
def test_a_numpy_integer_step_is_an_int(step: np.integer) -> None:
    # an engine's step counter may be a numpy scalar: it resolves as the same int
    # (validate.py:42:drop:1 left np.integer out of the accepted types and refused it)
    ex, pools = fresh()
    ex.resolve(pools, make_batch(3, [(1, [6], None, None)]))
    ref, ref_pools = fresh()
    ref.resolve(ref_pools, make_batch(3, [(1, [6], None, None)]))
    got = ex.resolve(pools, ResolveBatch(**{**_good(), "step": step}))  # type: ignore[arg-type]
    want = ref.resolve(ref_pools, ResolveBatch(**_good()))  # type: ignore[arg-type]
    assert got.rows.tolist() == want.rows.tolist()
    assert counters(got) == counters(want)
    assert state(pools) == state(ref_pools)


def _copy(host: np.ndarray, block: int) -> QueuedCopy:
    return QueuedCopy(host, block, np.full((2, 4), block + 1, np.uint8))  # 2 rows a block


def test_a_spill_stream_refuses_a_colliding_push_before_queueing_anything() -> None:
    # the stream's own check, not only its callers': a push that collides raises and
    # queues nothing (stream.py:43:call:0 dropped the check and queued the collision)
    host, other = np.zeros((8, 4), np.uint8), np.zeros((8, 4), np.uint8)
    s = SpillStream()
    s.push(1, _copy(host, 0))
    refused = [
        (2, _copy(host, 0), "host block 0 still has copy 1 queued into it"),
        (1, _copy(host, 1), "transfer 1 already has a copy queued for this cache"),
    ]
    for tid, copy, why in refused:
        with pytest.raises(BadTransfer, match=why):
            s.push(tid, copy)
        assert s.queued() == [1] and s.pending_into(host, 1) is None
    s.push(1, _copy(other, 0))  # the same transfer into another cache: one page each
    s.release()
    with pytest.raises(BadTransfer, match="transfer 1 has already completed"):
        s.push(1, _copy(host, 2))
    assert s.queued() == [] and s.pending_into(host, 2) is None
    assert host[:2].tolist() == [[1] * 4] * 2 and not host[2:].any()  # what landed: one copy
    assert other[:2].tolist() == [[1] * 4] * 2 and not other[2:].any()
