"""The shared host backing on the reference executor: one allocation for every rank,
only the writer copies, a reader's reads wait on the writer's events, and a reader
that skips the wait reads stale shared bytes (so the simulator's row check sees it)."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.typing import NDArray

from hisparse.config import HiSparseConfig
from hisparse.sharedpool import ReadBeforeWriterEvent, SharedHostExecutor, SharedHostPool
from hisparse.spec.messages import (
    CONNECTOR_METADATA,
    WORKER_META,
    HiSparseConnectorMetadata,
    SparseKVPageTransfer,
)
from hisparse.workerport import LocalWorker

CONFIG = HiSparseConfig(host_pool_blocks=4, block_tokens=4, row_bytes=16, top_k=4, layers=1)
GPU, SLOTS = 4, 2


def _ranks(skip: bool = False) -> tuple[SharedHostPool, LocalWorker, LocalWorker]:
    pool = SharedHostPool(CONFIG.pool_layout(GPU, SLOTS), CONFIG.layers)
    writer = LocalWorker(0, CONFIG, SharedHostExecutor(pool, writer=True), gpu_blocks=GPU,
                         slots=SLOTS)
    reader = LocalWorker(1, CONFIG, SharedHostExecutor(pool, writer=False,
                                                       skip_writer_wait=skip),
                         gpu_blocks=GPU, slots=SLOTS)
    return pool, writer, reader


def _spill_block_2_to_host_3(pool: SharedHostPool, writer: LocalWorker,
                             reader: LocalWorker) -> NDArray[np.uint8]:
    """Block 2 holds a pattern on both ranks; transfer 5 copies it to host block 3, and a
    request's page now points there (its table entry replaced)."""
    data: NDArray[np.uint8] = np.arange(4 * 16, dtype=np.uint8).reshape(1, 4, 16) + 7
    rows = np.arange(2 * 4, 3 * 4, dtype=np.int64)
    t = SparseKVPageTransfer(transfer_id=5, src_gpu_block=2, dst_host_block=3)
    raw = CONNECTOR_METADATA.dump_json(HiSparseConnectorMetadata(transfers=(t,)))
    for w in (writer, reader):  # the writer takes the command first
        w.write_rows(rows, data)
        w.bind(raw)
        w.admit("r", [("host", 3)])
    first: NDArray[np.uint8] = data[0]
    return first


def test_only_the_writer_copies_and_a_reader_waits_on_its_event() -> None:
    pool, writer, reader = _ranks()
    try:
        data = _spill_block_2_to_host_3(pool, writer, reader)
        topk = {"r": np.arange(4, dtype=np.int32)}
        assert writer.queued() == (5,) and reader.queued() == ()  # the reader copies nothing
        assert writer.d2h_bytes() == 64
        assert reader.d2h_bytes() == 0  # it took the command but moved no bytes
        assert writer.worker.executor.copies_spills and not reader.worker.executor.copies_spills
        assert reader.decode(topk, 1).waits_on == (5,)  # nothing decoded yet
        with pytest.raises(ReadBeforeWriterEvent, match=r"\[5\]"):  # a read would be refused
            reader.worker.decode({0: topk}, step=1)
        writer.land(None)
        assert pool.events[3] == 5
        got = reader.decode(topk, 1)
        assert got.waits_on == () and got.misses == 4
        assert np.array_equal(got.seen[0], data)  # the writer's bytes, read from the pool
        w_meta, r_meta = writer.take_meta(), reader.take_meta()
        assert w_meta is not None and r_meta is not None
        assert WORKER_META.validate_json(w_meta).completed == (5,)
        assert WORKER_META.validate_json(r_meta).completed == ()  # its enqueued ack is its last
        assert reader.restart() == ()  # a reader's stream never copies
    finally:
        del writer, reader
        pool.close()


def test_a_reader_that_skips_the_wait_reads_stale_shared_bytes() -> None:
    pool, writer, reader = _ranks(skip=True)
    try:
        data = _spill_block_2_to_host_3(pool, writer, reader)
        got = reader.decode({"r": np.arange(4, dtype=np.int32)}, 1)
        assert got.waits_on == ()
        assert not np.array_equal(got.seen[0], data)  # zeros: the copy has not landed
    finally:
        del writer, reader
        pool.close()


def test_two_processes_share_one_host_allocation() -> None:
    """The writer's process copies into the allocation; the reader's process, which
    copies nothing, waits on the event and then reads the writer's bytes from it."""
    from hisparse.workerproc import ProcessWorker

    pool = SharedHostPool(CONFIG.pool_layout(GPU, SLOTS), CONFIG.layers)
    writer, reader = (
        ProcessWorker(rank, CONFIG, gpu_blocks=GPU, slots=SLOTS, executor="reference",
                      max_positions=16, shared=pool.name, writer=rank == 0)
        for rank in (0, 1)
    )
    try:
        data = (np.arange(4 * 16, dtype=np.uint8).reshape(1, 4, 16) + 7)
        rows = np.arange(2 * 4, 3 * 4, dtype=np.int64)
        t = SparseKVPageTransfer(transfer_id=5, src_gpu_block=2, dst_host_block=3)
        raw = CONNECTOR_METADATA.dump_json(HiSparseConnectorMetadata(transfers=(t,)))
        for w in (writer, reader):
            w.write_rows(rows, data)
            w.bind(raw)
            w.admit("r", [("host", 3)])
        topk = {"r": np.arange(4, dtype=np.int32)}
        assert reader.decode(topk, 1).waits_on == (5,)
        assert not pool.host(0)[12:16].any()  # nothing landed in the allocation yet
        writer.land(None)
        assert np.array_equal(pool.host(0)[12:16], data[0])  # landed here, once
        got = reader.decode(topk, 1)
        assert got.waits_on == () and np.array_equal(got.seen[0], data[0])
        assert writer.d2h_bytes() == 64 and reader.d2h_bytes() == 0  # only the writer copies
    finally:
        writer.close()
        reader.close()
        pool.close()


def test_a_second_layout_or_one_layer_too_many_is_refused() -> None:
    # either mismatch alone refuses (sharedpool.py:106:bool:1 refused only both at once)
    from hisparse.executor.errors import ExecutorError

    pool = SharedHostPool(CONFIG.pool_layout(GPU, SLOTS), CONFIG.layers)
    ex = SharedHostExecutor(pool, writer=True)
    other = CONFIG.pool_layout(GPU + 1, SLOTS)
    with pytest.raises(ExecutorError, match="layout or layers differ"):
        ex.allocate(other)
    ex.allocate(CONFIG.pool_layout(GPU, SLOTS))  # its one layer
    with pytest.raises(ExecutorError, match="layout or layers differ"):
        ex.allocate(CONFIG.pool_layout(GPU, SLOTS))


def test_a_reader_names_the_writer_copies_its_host_rows_wait_on() -> None:
    """``writer_waits``: the pending writer copies into the host blocks of a decode's host
    rows (rows over block_tokens), none once they landed, none on the writer
    (workerport.py:130:arith:0 multiplied the rows: blocks no copy goes to, so nothing
    was waited on; the decode then raised deep in the executor, and this file's other
    tests, whose failing frames view the pool their ``finally`` had unmapped, crashed
    pytest's report with SIGSEGV)."""
    pool, writer, reader = _ranks()
    try:
        _spill_block_2_to_host_3(pool, writer, reader)
        topk = {"r": np.arange(4, dtype=np.int32)}  # page 0: host block 3, rows 12..15
        waits = (reader.writer_waits(topk, 1), writer.writer_waits(topk, 1))
        writer.land(None)
        assert waits == ((5,), ()) and reader.writer_waits(topk, 1) == ()
        # the writer reads nothing, not even which requests it runs (workerport.py:129:
        # reorder:0 built the batch first: a KeyError for a request it does not hold)
        assert writer.writer_waits({"unknown": np.arange(4, dtype=np.int32)}, 1) == ()
    finally:
        del writer, reader
        pool.close()
