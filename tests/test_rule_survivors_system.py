"""Rules of the executors that survivors of the whole mutation run
showed (lines the suite ran without asserting their effect; docs/mutation-run7)."""

from __future__ import annotations

import numpy as np
import pytest

from hisparse.executor import PoolLayout, ReferenceExecutor
from hisparse.executor.errors import PendingHostWrite

LAYOUT = PoolLayout(gpu_blocks=2, host_blocks=4, block_tokens=2, row_bytes=16, hot_rows=3,
                    slots=2)


def test_a_host_read_is_refused_while_transfer_zero_is_queued_into_its_block() -> None:
    """Transfer ID 0 is an ID like any other: a copy it names still holds its block (an
    empty-is-missing test would read the block while the copy is in flight).
    Kills executor/stream.py:80:none:2."""
    ex = ReferenceExecutor()
    pools = ex.allocate(LAYOUT)
    src = LAYOUT.resident_row(1, 0)
    pools.device[src:src + 2] = np.arange(32, dtype=np.uint8).reshape(2, 16)
    ex.enqueue_spill(pools, 0, src_gpu_block=1, dst_host_block=2)
    before = pools.host.copy()
    with pytest.raises(PendingHostWrite) as info:
        ex.read_host_rows(pools, np.array([4], np.int64))  # host block 2's first row
    assert (info.value.host_block, info.value.transfer_id) == (2, 0)
    assert str(info.value).startswith("host block 2 still has copy 0 queued into it")
    assert (pools.host == before).all() and ex.queued() == [0]
    ex.release()
    assert ex.completed() == [0]
    assert (ex.read_host_rows(pools, np.array([4, 5], np.int64))
            == np.arange(32, dtype=np.uint8).reshape(2, 16)).all()
