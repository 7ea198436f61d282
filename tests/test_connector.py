"""Connector roles, the disabled/idle path, and the KV cache manager's refusals."""

from __future__ import annotations

import pytest

from hisparse.blockpool import BlockPool, BlockPoolError, narrow_gpu_block
from hisparse.config import HiSparseConfig
from hisparse.connector import HiSparseConnector, KVConnectorRole
from hisparse.coordinator import HiSparseCoordinator
from hisparse.spec.state import HostBlock


def coordinator() -> HiSparseCoordinator:
    cfg = HiSparseConfig(host_pool_blocks=8, block_tokens=16, row_bytes=64, top_k=16)
    return HiSparseCoordinator(cfg, BlockPool(4), gpu_blocks=4, check=True)


def test_idle_scheduler_builds_no_metadata() -> None:
    conn = HiSparseConnector(KVConnectorRole.SCHEDULER, coordinator=coordinator())
    assert conn.build_connector_meta() is None
    conn.update_connector_output(None)  # nothing to consume is not an error


def test_a_spill_builds_one_command_then_nothing() -> None:
    c = coordinator()
    c.add_request("r", ["a", "b"])
    assert c.admit("r") is not None
    conn = HiSparseConnector(KVConnectorRole.SCHEDULER, coordinator=c)
    tid = c.spill(("r", 1))
    meta = conn.build_connector_meta()
    assert meta is not None and [t.transfer_id for t in meta.transfers] == [tid]
    assert meta.replacements == ()
    again = conn.build_connector_meta()  # sent once; while it is open, a numbered heartbeat
    assert again is not None and again.transfers == () and again.seq == (meta.seq or 0) + 1


def test_roles_are_enforced() -> None:
    c = coordinator()
    with pytest.raises(ValueError):
        HiSparseConnector(KVConnectorRole.WORKER, coordinator=c)
    conn = HiSparseConnector(KVConnectorRole.SCHEDULER, coordinator=c)
    with pytest.raises(RuntimeError):
        conn.get_worker_meta()


def test_block_pool_refusals() -> None:
    pool = BlockPool(3)
    assert pool.allocate(4) is None and pool.num_free == 3
    (b,) = pool.allocate(1) or []
    pool.pin(b)
    with pytest.raises(BlockPoolError):
        pool.free([b])  # pinned by a transfer
    pool.unpin(b)
    pool.free([b])
    with pytest.raises(BlockPoolError):
        pool.free([b])  # double free
    with pytest.raises(BlockPoolError):
        pool.pin(HostBlock(0))  # a host block is never a GPU pool index
    with pytest.raises(BlockPoolError):
        narrow_gpu_block(None, 1)  # the source group has no GPU pool
    assert narrow_gpu_block(0, 1) == 1


def test_followers_hold_no_lru_state() -> None:
    from hisparse.executor.reference import ReferenceExecutor
    from hisparse.worker import HiSparseWorker

    cfg = HiSparseConfig(host_pool_blocks=8, block_tokens=16, row_bytes=64,
                         top_k=16, layers=3, index_leaders=(0, 0, 2))
    w = HiSparseWorker(cfg, ReferenceExecutor(), gpu_blocks=4, slots=2)
    shapes = [h.runtime.pools.hot_tag.shape[0] for h in w.handles]
    assert shapes == [2, 0, 2]
