"""Rules that survivors of the whole mutation run showed (docs/mutation-run7): a shared
host pool leaves no file descriptor or mapping behind once closed and refuses a foreign
layout before allocating; a reader waits on the writer's copy into host row 0 too; a NIXL
prefiller left by its ``with`` block is stopped in order; a closed P/D side holds no
transport."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hisparse.config import HiSparseConfig
from hisparse.executor.errors import ExecutorError
from hisparse.executor.layout import PoolLayout
from hisparse.executor.reference import ReferenceExecutor
from hisparse.pdimport.sim import PdOptions, PdSide
from hisparse.sharedpool import ReadBeforeWriterEvent, SharedHostExecutor, SharedHostPool
from hisparse.spec.messages import (
    CONNECTOR_METADATA,
    HiSparseConnectorMetadata,
    SparseKVPageTransfer,
)
from hisparse.workerport import LocalWorker

SMALL = PoolLayout(gpu_blocks=2, host_blocks=2, block_tokens=4, row_bytes=16, hot_rows=4,
                   slots=1)


def _fds_on(name: str) -> int:
    """This process's open file descriptors that refer to the allocation ``name``."""
    path = f"/dev/shm/{name.lstrip('/')}"
    count = 0
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = str(fd.readlink())
        except OSError:  # (the listing's own descriptor, closed by now)
            continue
        count += target in (path, f"{path} (deleted)")
    return count


# --- the shared host pool's file descriptors and mappings (hisparse/sharedpool.py) ---------


@pytest.mark.parametrize("attached", [False, True], ids=["creator", "attacher"])
def test_a_closed_shared_pool_holds_no_file_descriptor_on_its_allocation(
        attached: bool) -> None:
    # kills sharedpool.py:113:call:2 (the descriptor opened to map the allocation was never
    # closed) and sharedpool.py:91:call:6 (the view mapping, and the descriptor it holds,
    # stayed open after close)
    owner = SharedHostPool(SMALL, 1)
    pool = SharedHostPool(SMALL, 1, name=owner.name) if attached else owner
    try:
        # open: SharedMemory's own descriptor and one per mapping (its own, the views')
        assert _fds_on(pool.name) == (6 if attached else 3)
        pool.close()
        assert _fds_on(pool.name) == (3 if attached else 0)  # the creator's, if it lives
    finally:
        owner.close()
    assert _fds_on(owner.name) == 0


def test_a_closed_shared_pool_with_no_view_alive_is_unmapped_and_gives_no_view() -> None:
    # kills sharedpool.py:91:call:6 (close left the view mapping mapped: views still came)
    pool = SharedHostPool(SMALL, 2)
    pool.close()
    with pytest.raises(ValueError, match="mmap closed or invalid"):
        pool.host(0)
    with pytest.raises(ValueError, match="mmap closed or invalid"):
        _ = pool.events


def test_a_foreign_layout_is_refused_before_anything_is_allocated() -> None:
    # kills sharedpool.py:139:reorder:1 (the pools allocated before the check: a layout too
    # large for any memory failed allocating, as a ValueError, instead of being refused)
    huge = PoolLayout(gpu_blocks=2**40, host_blocks=2, block_tokens=2**10, row_bytes=2**20,
                      hot_rows=4, slots=1)
    with pytest.raises(ValueError, match="array is too big"):
        ReferenceExecutor().allocate(huge)  # (what allocating it would do)
    pool = SharedHostPool(SMALL, 1)
    try:
        ex = SharedHostExecutor(pool, writer=True)
        with pytest.raises(ExecutorError,
                           match=r"^the worker's layout or layers differ from the shared "
                                 r"pool's$"):
            ex.allocate(huge)
        # a refusal changes nothing: the first layer still gets the pool's layer 0
        pools = ex.allocate(SMALL)
        assert np.shares_memory(pools.host, pool.host(0))
        with pytest.raises(ExecutorError, match="layout or layers differ"):
            ex.allocate(SMALL)  # the pool has one layer
        del pools
    finally:
        pool.close()


# --- a reader rank waits on the writer's copy into host row 0 (hisparse/workerport.py) -----

CONFIG = HiSparseConfig(host_pool_blocks=4, block_tokens=4, row_bytes=16, top_k=4, layers=1)


def test_a_reader_reading_host_row_0_alone_waits_on_the_writers_copy_into_it() -> None:
    # host row 0 is the first row of host block 0, a row like any other: a top-K reaching
    # only it waits on the writer's copy into block 0
    # kills workerport.py:130:int:1 and workerport.py:130:cmp:3 (``host >= 0`` -> ``>= 1`` /
    # ``> 0``: row 0 was taken for an empty position and the read went ahead)
    pool = SharedHostPool(CONFIG.pool_layout(4, 2), CONFIG.layers)
    writer = LocalWorker(0, CONFIG, SharedHostExecutor(pool, writer=True), gpu_blocks=4,
                         slots=2)
    reader = LocalWorker(1, CONFIG, SharedHostExecutor(pool, writer=False), gpu_blocks=4,
                         slots=2)
    try:
        data = np.arange(64, dtype=np.uint8).reshape(1, 4, 16) + 7
        t = SparseKVPageTransfer(transfer_id=5, src_gpu_block=2, dst_host_block=0)
        raw = CONNECTOR_METADATA.dump_json(HiSparseConnectorMetadata(transfers=(t,)))
        for w in (writer, reader):
            w.write_rows(np.arange(8, 12, dtype=np.int64), data)
            w.bind(raw)
            w.admit("r", [("host", 0)])
        topk = {"r": np.array([0, -1, -1, -1], dtype=np.int32)}  # token 0: host row 0
        assert reader.worker.batch(topk, 1).host_row.tolist() == [[0, -1, -1, -1]]
        assert reader.writer_waits(topk, 1) == (5,)
        got = reader.decode(topk, 1)
        assert (got.waits_on, got.misses, got.seen) == ((5,), 0, {})  # nothing decoded
        with pytest.raises(ReadBeforeWriterEvent, match=r"\[5\]"):  # as a read would be
            reader.worker.decode({0: topk}, step=1)
        writer.land(None)
        assert reader.writer_waits(topk, 1) == ()
        got = reader.decode(topk, 1)
        assert got.waits_on == () and got.misses == 1
        assert np.array_equal(got.seen[0][0], data[0][0])  # the writer's row, from the pool
    finally:
        del writer, reader
        pool.close()


# --- a NIXL prefiller as a context manager (hisparse/transport/nixlpeer.py) ----------------


def test_leaving_a_nixl_prefillers_with_block_stops_it_in_order(nixl_available: None) -> None:
    # an orderly stop (the child deregisters and exits 0), neither left running nor killed
    # kills transport/nixlpeer.py:146:call:15 (never stopped) and :145:not:0 (stopped only
    # when already reaped)
    from hisparse.transport.nixlpeer import NixlPrefiller
    with NixlPrefiller("pool4-with", np.zeros((2, 64), np.uint8)) as peer:
        assert not peer.reaped and peer.process.is_alive()
    try:
        assert peer.reaped and peer.process.exitcode == 0
        assert not peer.process.is_alive()
    finally:
        if not peer.reaped:  # (only on a failure above)
            peer.kill()


# --- the P/D side's close (hisparse/pdimport/sim.py) ----------------------------------------


def test_a_closed_pd_side_holds_no_transport_and_closing_again_finds_none() -> None:
    # kills pdimport/sim.py:201:call:8 (the closed transports stayed in ``transports``)
    config = HiSparseConfig(host_pool_blocks=4, block_tokens=4, row_bytes=16, top_k=4,
                            layers=1)
    side = PdSide(PdOptions(share=1.0), seed=0, layers=1, block_tokens=4, row_bytes=16,
                  capacity_pages=2)
    worker = LocalWorker(0, config, ReferenceExecutor(), gpu_blocks=4, slots=2)
    side.attach(worker.worker, 0)
    [transport] = side.transports
    assert transport.peers == {"prefiller": side.prefiller}  # type: ignore[attr-defined]
    side.close()
    assert side.transports == []
    assert transport.peers == {} and not transport.live  # type: ignore[attr-defined]
    side.close()  # idempotent
    assert side.transports == []
