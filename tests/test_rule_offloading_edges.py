"""Rule: the OffloadingConnector's halves take exactly their documented inputs, and a
refusal changes nothing (``hisparse/connectors/offloading.py``).

From the guard survivors of the second guard-phase run (docs/mutation-survivors.md):

- ``land(n)`` completes exactly the first ``min(n, queued)`` copies, in order, and
  ``land(0)`` none (mutant ``259:none:3``: ``n is None`` → ``not n``, so ``land(0)``
  landed every copy);
- ``block_bytes`` of 1 is accepted, below 1 refused (``63:int:0``: ``< 2``); a GPU group
  that is not ``[blocks, block_bytes]`` is refused (``217:raise:3``);
- a worker meta or connector metadata of the wrong type is refused with ``TypeError``
  before anything changes, even when it has the right attribute names
  (``190:reorder:2``, ``251:reorder:4``: the store completed, the queue grown, then the
  refusal);
- one external token with one-token blocks restores one block (``102:int:1``: ``<= 1``);
- a refused restore is counted once and re-raised, with nothing else changed
  (``120:raise:5``: the refusal swallowed; ``119:arith:13``: counted as ``-1``).
"""

from __future__ import annotations

import copy
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hisparse.connectors.base import KVLayout
from hisparse.connectors.offload_store import StoreRefused
from hisparse.connectors.offloading import OffloadingScheduler, OffloadingWorker

BLOCK_BYTES = 8


def _scheduler(block_tokens: int = 4, capacity: int = 8) -> OffloadingScheduler:
    return OffloadingScheduler(KVLayout(block_tokens=block_tokens), BLOCK_BYTES, capacity)


def _worker(gpu_blocks: int = 8, capacity: int = 8) -> OffloadingWorker:
    gpu = np.arange(gpu_blocks * BLOCK_BYTES, dtype=np.uint8).reshape(gpu_blocks, BLOCK_BYTES)
    return OffloadingWorker(KVLayout(block_tokens=4), gpu, capacity)


def one_round(s: OffloadingScheduler, w: OffloadingWorker) -> bytes:
    """The scheduler's metadata to the worker, every copy landed, its acks back (the
    worker meta returned, as sent)."""
    raw = s.build_connector_meta()
    assert raw is not None
    w.bind_metadata(w.parse_metadata(raw))
    w.land()
    back = w.get_worker_meta()
    assert back is not None
    s.apply_worker_meta(s.parse_worker_meta(back))
    return back


def _state(s: OffloadingScheduler) -> dict[str, object]:
    """Everything the scheduler holds, its store's table spelled out (no ``__eq__``)."""
    out = {k: v for k, v in s.__dict__.items() if k not in ("_layout", "store")}
    return copy.deepcopy({**out, "store": s.store.__dict__})


@settings(max_examples=40, deadline=None)
@given(stores=st.integers(0, 6), n=st.integers(0, 8))
def test_land_completes_exactly_the_first_n_copies(stores: int, n: int) -> None:
    s, w = _scheduler(), _worker()
    s.save("r", [(f"h{i}", i) for i in range(stores)])
    raw = s.build_connector_meta()
    if raw is not None:
        w.bind_metadata(w.parse_metadata(raw))
    sent = [c.job_id for c in w.parse_metadata(raw).stores] if raw is not None else []
    host_before = w.host.copy()
    w.land(n)
    k = min(n, stores)
    assert w.queued() == stores - k
    back = w.get_worker_meta()
    done = [] if back is None else list(s.parse_worker_meta(back).done)
    assert done == sent[:k]
    for i in range(stores):  # stores use slots 0.. in order: only the landed ones wrote
        expect = w.gpu[i] if i < k else host_before[i]
        assert np.array_equal(w.host[i], expect)
    assert w.copied_bytes == k * BLOCK_BYTES


def test_land_without_a_count_completes_every_copy() -> None:
    s, w = _scheduler(), _worker()
    s.save("r", [("a", 0), ("b", 1), ("c", 2)])
    raw = s.build_connector_meta()
    assert raw is not None
    w.bind_metadata(w.parse_metadata(raw))
    w.land()
    assert w.queued() == 0 and w.copied_bytes == 3 * BLOCK_BYTES


def test_block_bytes_of_one_is_accepted_and_below_refused() -> None:
    assert _scheduler_with(1).block_bytes == 1
    for bad in (0, -1):
        with pytest.raises(ValueError, match=f"at least 1, got {bad}"):
            _scheduler_with(bad)


def _scheduler_with(block_bytes: int) -> OffloadingScheduler:
    return OffloadingScheduler(KVLayout(block_tokens=4), block_bytes, 2)


@pytest.mark.parametrize("shape", [(8,), (2, 2, 2), ()])
def test_a_gpu_group_that_is_not_blocks_by_bytes_is_refused(shape: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match=r"\[blocks, block_bytes\]"):
        OffloadingWorker(KVLayout(block_tokens=4), np.zeros(shape, np.uint8), 2)


def test_a_worker_meta_of_the_wrong_type_is_refused_with_nothing_changed() -> None:
    s, w = _scheduler(), _worker()
    s.save("r", [("a", 0), ("b", 1)])
    raw = s.build_connector_meta()
    assert raw is not None
    w.bind_metadata(w.parse_metadata(raw))
    w.land()
    back = w.get_worker_meta()
    assert back is not None
    acks = s.parse_worker_meta(back).done
    before = _state(s)
    look_alike = SimpleNamespace(done=acks)  # the right field, not the type
    for call in (s.on_worker_meta, s.apply_worker_meta):
        with pytest.raises(TypeError, match="expected OffloadWorkerMeta, got SimpleNamespace"):
            call(look_alike)
        assert _state(s) == before
    s.apply_worker_meta(s.parse_worker_meta(back))  # the real one still applies
    assert s.stores_in_flight("r") == 0


def test_connector_metadata_of_the_wrong_type_is_refused_with_nothing_changed() -> None:
    s, w = _scheduler(), _worker()
    s.save("r", [("a", 0)])
    raw = s.build_connector_meta()
    assert raw is not None
    meta = w.parse_metadata(raw)
    look_alike = SimpleNamespace(stores=meta.stores, restores=meta.restores)
    with pytest.raises(TypeError, match="expected OffloadMetadata, got SimpleNamespace"):
        w.bind_metadata(look_alike)
    assert w.queued() == 0
    w.bind_metadata(meta)
    assert w.queued() == 1


@pytest.mark.parametrize("block_tokens", [1, 2, 4])
def test_external_tokens_restore_exactly_their_whole_blocks(block_tokens: int) -> None:
    for tokens in range(0, 3 * block_tokens + 1):
        s, w = _scheduler(block_tokens), _worker()
        s.add_request("r", ("a", "b", "c"))
        s.save("r", [("a", 0), ("b", 1), ("c", 2)])
        one_round(s, w)
        s.update_state_after_alloc("r", [5, 6, 7], tokens)
        n = tokens // block_tokens
        assert s.get_stats()["restores"] == n
        restore = s.build_meta()
        got = [] if restore is None else [(c.gpu_block, c.host_slot) for c in restore.restores]
        assert got == [(5 + 3 - n + i, 3 - n + i) for i in range(n)]


def test_a_refused_restore_is_counted_once_and_changes_nothing_else() -> None:
    s = _scheduler()
    s.save("r", [("a", 0)])  # storing, not yet stored: not restorable
    before = _state(s)
    stats = dict(s.get_stats())
    with pytest.raises(StoreRefused, match="1 of 1 blocks are not stored"):
        s.restore("q", [("a", 3)])
    after = dict(s.get_stats())
    assert after == {**stats, "restore_refusals": stats["restore_refusals"] + 1}
    s.stats.restore_refusals -= 1  # the one change: the count, checked above
    assert _state(s) == before


def test_no_external_tokens_restore_nothing_even_for_a_request_never_matched() -> None:
    """An engine calls update_state_after_alloc for every scheduled request, most with
    no external tokens: nothing is read or started (offloading.py:102:cmp:2 looked the
    request's hashes up first: a KeyError for one never matched)."""
    sched = _scheduler()
    before = _state(sched)
    sched.update_state_after_alloc("never-matched", [0, 1], 0)
    assert _state(sched) == before
