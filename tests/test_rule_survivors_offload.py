"""Rules of the OffloadingConnector, its block store and the MultiConnector's worker-meta
envelope that survivors of the whole mutation run showed (docs/mutation-run7)."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hisparse.connectors.base import MalformedChildMessage
from hisparse.connectors.multi import MultiConnectorScheduler
from hisparse.connectors.offload_store import OffloadStore
from hisparse.connectors.wire import OFFLOAD_METADATA, BlockCopy, OffloadMetadata
from tests.test_rule_offloading_edges import (
    BLOCK_BYTES,
    _scheduler,
    _state,
    _worker,
    one_round,
)


def _store_state(s: OffloadStore) -> dict[str, object]:
    """The store's whole table (its entries have ``__eq__``, its jobs are frozen)."""
    return copy.deepcopy(s.__dict__)


def _acked(s: OffloadStore, rid: str, hashes: list[str]) -> None:
    """Store ``hashes`` (GPU block = position) and ack every store."""
    jobs = [s.start_store(rid, h, g) for g, h in enumerate(hashes)]
    s.complete([j.job_id for j in jobs if j is not None])


# --- the block store -----------------------------------------------------------------------


def test_storing_a_block_the_store_already_holds_is_refused_without_taking_a_slot() -> None:
    """A held block (storing or stored) is refused before a slot is chosen: the free
    slots stay free (kills offload_store.py:123:reorder:1, which popped one first)."""
    s = OffloadStore(4)
    s.start_store("r", "storing", 0)
    _acked(s, "r", ["stored"])
    before = _store_state(s)
    assert s.start_store("r", "storing", 5) is None
    assert s.start_store("r", "stored", 6) is None
    assert _store_state(s) == before
    job = s.start_store("r", "new", 7)  # the lowest free slot is still the next one
    assert job is not None and job.host_slot == 2


def test_storing_a_held_block_into_a_full_store_evicts_nothing() -> None:
    """In a full store whose blocks are all evictable, re-storing a held one is refused
    and no block is evicted (kills offload_store.py:123:reorder:1)."""
    s = OffloadStore(2)
    _acked(s, "r", ["a", "b"])
    before = _store_state(s)
    assert s.start_store("r", "a", 3) is None
    assert s.start_store("r", "b", 3) is None
    assert _store_state(s) == before
    assert s.evictions == 0 and s.restorable("a") and s.restorable("b")


@settings(max_examples=40, deadline=None)
@given(capacity=st.integers(1, 5), n=st.integers(1, 8), acks=st.integers(0, 8),
       pick=st.integers(0, 7))
def test_any_held_block_is_refused_by_store_and_the_refusal_changes_nothing(
        capacity: int, n: int, acks: int, pick: int) -> None:
    """Over stores with some acked (evicting as the store fills), re-storing any held
    block returns None and changes nothing (kills offload_store.py:123:reorder:1)."""
    s = OffloadStore(capacity)
    jobs = [s.start_store("r", f"h{i}", i) for i in range(n)]
    s.complete([j.job_id for j in jobs[:acks] if j is not None])
    held = [f"h{i}" for i in range(n) if s.held(f"h{i}")]
    if not held:
        return  # every store refused (none acked while the store was full)
    h = held[pick % len(held)]
    before = _store_state(s)
    assert s.start_store("other", h, 99) is None
    assert _store_state(s) == before


# --- the scheduler half --------------------------------------------------------------------


def test_store_bytes_count_one_block_size_per_store_started() -> None:
    """``store_bytes`` is ``block_bytes`` times the stores started; a refused or
    already-held block adds nothing (kills offloading.py:139:arith:10)."""
    s = _scheduler(capacity=2)
    assert s.save("r", [("a", 0), ("b", 1)]) == ["a", "b"]
    assert s.save("r", [("a", 0), ("c", 2)]) == []  # held / every slot storing: refused
    stats = s.get_stats()
    assert stats["stores"] == 2 and stats["store_refusals"] == 1
    assert stats["store_bytes"] == 2 * BLOCK_BYTES


def test_an_ack_for_a_job_already_acked_is_refused_as_never_sent() -> None:
    """An acked job leaves the sent set: acking it again is refused by
    ``parse_worker_meta`` naming the job, and nothing changes (kills
    offloading.py:191:call:3, which kept it sent)."""
    s, w = _scheduler(), _worker()
    s.save("r", [("a", 0)])
    back = one_round(s, w)
    assert [j.block for j in s.take_completed().stores] == ["a"]
    before = _state(s)
    with pytest.raises(MalformedChildMessage,
                       match=r"^worker meta for child 'offload': acks for jobs never sent: "
                             r"\[0\]$"):
        s.parse_worker_meta(back)
    assert _state(s) == before


# --- the worker half -----------------------------------------------------------------------


def _meta(gpu_block: int, host_slot: int) -> bytes:
    return OFFLOAD_METADATA.dump_json(OffloadMetadata(
        stores=(BlockCopy(job_id=3, gpu_block=gpu_block, host_slot=host_slot),)))


def test_a_copy_naming_the_host_slot_one_past_the_last_is_refused() -> None:
    """Host slots are ``0 .. capacity-1``: slot ``capacity`` is refused with the bounds
    named, the last slot accepted (kills offloading.py:241:cmp:12: ``>``)."""
    w = _worker(gpu_blocks=4, capacity=6)
    with pytest.raises(MalformedChildMessage,
                       match=r"^connector metadata for child 'offload': job 3 names GPU "
                             r"block 0 / host slot 6 outside 4 / 6$"):
        w.parse_metadata(_meta(0, 6))
    assert w.queued() == 0
    ok = w.parse_metadata(_meta(3, 5))
    assert ok.stores == (BlockCopy(job_id=3, gpu_block=3, host_slot=5),)


# --- the MultiConnector --------------------------------------------------------------------


def test_an_empty_worker_meta_envelope_is_refused_not_taken_as_none() -> None:
    """``None`` means no worker meta this step; ``b""`` is a malformed envelope and is
    refused, changing no child (kills multi.py:169:none:1, which took it as None)."""
    child = _scheduler()
    child.save("r", [("a", 0)])
    child.build_connector_meta()
    m = MultiConnectorScheduler([child])
    before = _state(child)
    m.update_connector_output(None)
    with pytest.raises(MalformedChildMessage,
                       match=r"^worker meta for child 'multi': 1 validation error for "
                             r"MultiMessage$"):
        m.update_connector_output(b"")
    assert _state(child) == before

