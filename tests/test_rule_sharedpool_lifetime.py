"""Rule: a shared host pool's name is freed by its creator's ``close`` and by no one
else's, ``close`` unmaps and is idempotent, and attaching with a layout the allocation
cannot hold is refused; a reader's refused read copies nothing (``hisparse/sharedpool.py``).

From the guard survivors of the second guard-phase run (docs/mutation-survivors.md):
``80:call:3`` (no ``unlink``: the name leaked), ``78:bool:0`` (``and`` → ``or``: an
attacher's ``close`` freed the creator's name), ``78:not:1`` (unlinked only after it
already was), ``82:call:4`` (no ``shm.close()``: the mapping
stayed), ``52:raise:1`` (an allocation too small for the layout was attached),
``46:none:1`` (``name is None`` → ``not name``: the empty name created a fresh pool),
``154:reorder:2`` (a reader's read refused before the writer's event had already copied).
"""

from __future__ import annotations

from multiprocessing import shared_memory

import numpy as np
import pytest

from hisparse.executor.errors import ExecutorError
from hisparse.executor.layout import PoolLayout
from hisparse.sharedpool import ReadBeforeWriterEvent, SharedHostPool

SMALL = PoolLayout(gpu_blocks=2, host_blocks=2, block_tokens=4, row_bytes=16, hot_rows=4,
                   slots=1)
LARGE = PoolLayout(gpu_blocks=2, host_blocks=64, block_tokens=4, row_bytes=16, hot_rows=4,
                   slots=1)


def _exists(name: str) -> bool:
    try:
        probe = shared_memory.SharedMemory(name=name)
    except FileNotFoundError:
        return False
    probe.close()
    return True


def test_only_the_creators_close_frees_the_name_and_close_unmaps() -> None:
    owner = SharedHostPool(SMALL, 2)
    name = owner.name
    reader = SharedHostPool(SMALL, 2, name=name)
    reader.close()
    assert _exists(name)  # an attacher's close leaves the name to its creator
    assert reader.shm.buf is None  # unmapped
    reader.close()  # idempotent
    assert _exists(name)
    owner.close()
    assert not _exists(name)
    assert owner.shm.buf is None
    owner.close()  # idempotent: no second unlink


def test_attaching_with_a_layout_the_allocation_cannot_hold_is_refused() -> None:
    owner = SharedHostPool(SMALL, 1)
    try:
        with pytest.raises(ExecutorError, match="the layout needs"):
            SharedHostPool(LARGE, 1, name=owner.name)
        SharedHostPool(SMALL, 1, name=owner.name).close()  # the same layout attaches
    finally:
        owner.close()


@pytest.mark.parametrize("name", ["", "hisparse-no-such-pool"])
def test_a_name_that_is_no_pool_is_refused_never_a_fresh_pool(name: str) -> None:
    """A reader given a wrong name must not create a private pool of its own (it would
    read nothing its writer wrote): ``46:none:1`` (``not name`` took the empty name for
    none and created one)."""
    with pytest.raises(OSError):
        SharedHostPool(SMALL, 1, name=name)


def test_a_read_refused_before_the_writers_event_copies_nothing() -> None:
    """``154:reorder:2`` (the copy moved before the event check): the refused read had
    already copied the shared host rows into the reader's device pool."""
    from tests.test_sharedpool import _ranks, _spill_block_2_to_host_3

    pool, writer, reader = _ranks()
    try:
        _spill_block_2_to_host_3(pool, writer, reader)
        devices = [h.runtime.pools.device for h in reader.worker.handles]
        for d in devices:  # a sentinel in the hot rows, where a read copies host rows
            d[reader.worker.layout.resident_rows:] = 0xEE
        before = [d.copy() for d in devices]
        with pytest.raises(ReadBeforeWriterEvent, match=r"\[5\]"):
            reader.worker.decode({0: {"r": np.arange(4, dtype=np.int32)}}, step=1)
        assert all(np.array_equal(d, b) for d, b in zip(devices, before, strict=True))
    finally:
        del writer, reader
        pool.close()
