"""The OffloadingConnector: its bounded store (LRU eviction of stored, unpinned blocks
only; a refusal changes nothing), asynchronous stores and restores acknowledged over
bytes, whole blocks round-tripping exactly, typed errors for bad bytes."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from hisparse.connectors.base import KVLayout, MalformedChildMessage
from hisparse.connectors.indexer_rows import IndexerLayout, oracle_block
from hisparse.connectors.offload_store import OffloadStore, StoreRefused, UnknownJob, chain_hashes
from hisparse.connectors.offloading import OffloadingScheduler, OffloadingWorker
from hisparse.connectors.wire import OFFLOAD_WORKER_META, OffloadWorkerMeta

KV = KVLayout(block_tokens=4)


def _acked(store: OffloadStore, rid: str, h: str, g: int) -> None:
    job = store.start_store(rid, h, g)
    assert job is not None
    store.complete([job.job_id])


def test_chain_hashes_name_prefixes() -> None:
    a, b = chain_hashes(["x", "y"]), chain_hashes(["z", "y"])
    assert a[1] != b[1]  # same page key, different prefix
    assert chain_hashes(["x", "y", "w"])[:2] == a


def test_store_evicts_least_recently_used_stored_block() -> None:
    s = OffloadStore(2)
    _acked(s, "r", "a", 0)
    _acked(s, "r", "b", 1)
    job = s.start_store("r", "c", 2)  # full: evicts a (the oldest)
    assert job is not None and s.evictions == 1
    assert not s.held("a") and s.held("b") and s.held("c")
    assert not s.restorable("c")  # its store is in flight


def test_storing_and_pinned_blocks_are_never_evicted_and_refusal_changes_nothing() -> None:
    s = OffloadStore(2)
    _acked(s, "r", "a", 0)
    assert s.start_store("r", "b", 1) is not None  # storing
    s.start_restores("q", [("a", 5)])  # pinned
    before = copy.deepcopy(s.__dict__)
    assert s.start_store("r", "c", 2) is None  # nothing evictable
    assert s.__dict__ == before


def test_restore_of_a_block_being_stored_is_refused_with_nothing_changed() -> None:
    s = OffloadStore(3)
    _acked(s, "r", "a", 0)
    s.start_store("r", "b", 1)
    before = copy.deepcopy(s.__dict__)
    with pytest.raises(StoreRefused, match="1 of 2 blocks are not stored"):
        s.start_restores("q", [("a", 4), ("b", 5)])
    assert s.__dict__ == before


def test_unknown_ack_applies_nothing() -> None:
    s = OffloadStore(2)
    job = s.start_store("r", "a", 0)
    assert job is not None
    before = copy.deepcopy(s.__dict__)
    with pytest.raises(UnknownJob):
        s.complete([job.job_id, 99])
    assert s.__dict__ == before
    s.complete([job.job_id])
    with pytest.raises(UnknownJob):
        s.complete([job.job_id])  # acked twice


def _pair(capacity: int = 4, gpu_blocks: int = 6) -> tuple[OffloadingScheduler,
                                                           OffloadingWorker, np.ndarray]:
    ix = IndexerLayout(block_tokens=4, layers=2)
    gpu = np.zeros((gpu_blocks, ix.block_bytes), np.uint8)
    return (OffloadingScheduler(KV, ix.block_bytes, capacity),
            OffloadingWorker(KV, gpu, capacity), gpu)


def _step(s: OffloadingScheduler, w: OffloadingWorker, land: int | None = None) -> None:
    raw = s.build_connector_meta()
    if raw is not None:
        w.bind_metadata(w.parse_metadata(raw))
    w.land(land)
    back = w.get_worker_meta()
    if back is not None:
        s.apply_worker_meta(s.parse_worker_meta(back))


def test_blocks_round_trip_through_the_host_store_as_bytes() -> None:
    s, w, gpu = _pair()
    ix = IndexerLayout(block_tokens=4, layers=2)
    hashes = chain_hashes(["k0", "k1"])
    gpu[0], gpu[1] = oracle_block(ix, 0), oracle_block(ix, 1)
    s.add_request("r", hashes)
    assert s.save("r", [(hashes[0], 0), (hashes[1], 1)]) == list(hashes)
    assert s.get_num_new_matched_tokens("r", 0) == 0  # stores not acked yet
    _step(s, w, land=1)  # one store lands and is acked
    assert s.get_num_new_matched_tokens("r", 0) == 4 and s.stores_in_flight("r") == 1
    _step(s, w)
    assert s.take_completed().stores and s.stores_in_flight("r") == 0
    assert s.get_num_new_matched_tokens("r", 0) == 8
    assert s.get_num_new_matched_tokens("r", 4) == 4
    gpu[:] = 0  # the GPU copies are gone
    s.update_state_after_alloc("r", [3, 4], 8)  # restore both into new blocks
    _step(s, w)
    done = s.take_completed()
    assert [j.gpu_block for j in done.restores] == [3, 4]
    assert np.array_equal(gpu[3], oracle_block(ix, 0))
    assert np.array_equal(gpu[4], oracle_block(ix, 1))
    st = s.get_stats()
    assert (st["stores"], st["restores"], st["open_jobs"]) == (2, 2, 0)
    assert st["restore_bytes"] == 2 * ix.block_bytes


def test_bad_bytes_are_typed_errors_and_change_nothing() -> None:
    s, w, _ = _pair()
    s.save("r", [("a", 0)])
    raw = s.build_connector_meta()
    assert raw is not None
    with pytest.raises(MalformedChildMessage, match="offload"):
        w.parse_metadata(b"{not json")
    with pytest.raises(MalformedChildMessage, match="outside"):
        w.parse_metadata(raw.replace(b'"gpu_block":0', b'"gpu_block":60'))
    # one past the last block is outside too (offloading.py:241:cmp:11)
    n_gpu = w.bounds()[0]
    with pytest.raises(MalformedChildMessage, match=f"GPU block {n_gpu} / host slot"):
        w.parse_metadata(raw.replace(b'"gpu_block":0', f'"gpu_block":{n_gpu}'.encode()))
    assert w.parse_metadata(raw.replace(b'"gpu_block":0',
                                        f'"gpu_block":{n_gpu - 1}'.encode())).stores
    assert w.queued() == 0
    with pytest.raises(MalformedChildMessage, match="never sent"):
        s.parse_worker_meta(OFFLOAD_WORKER_META.dump_json(OffloadWorkerMeta(done=(7,))))
    with pytest.raises(MalformedChildMessage):
        s.parse_worker_meta(b'{"done": [0, 0]}')  # duplicate ack
    assert s.get_stats()["open_jobs"] == 1


def test_request_state_is_dropped_at_finish() -> None:
    s, w, _ = _pair()
    s.add_request("r", ("a",))
    s.save("r", [("a", 0)])
    assert s.request_finished("r", [0]) is True  # its store still reads block 0
    _step(s, w)
    assert s.stores_in_flight("r") == 0
    assert s.request_finished("r", [0]) is False
    assert s.get_num_new_matched_tokens("r", 0) == 0  # forgotten: O(live)
