"""Rule: a block of the offload store is pinned by each restore in flight and evictable
again exactly when its last restore is acked; its queries answer bools
(``hisparse/connectors/offload_store.py``; ``hisparse/connectors/multi.py``).

From the guard survivors of the second guard-phase run (docs/mutation-survivors.md):

- ``offload_store.py:138:arith:4`` (``e.pins -= 1`` at a restore's start): a restored
  block never came back to the LRU, so the store filled with blocks it could not evict;
  here, over every count of overlapping restores and every order of their acks, the
  block is refused as a victim while any is open and evicted once the last is acked;
- ``offload_store.py:81:none:1`` (``e is not None and ...`` → ``e and ...``):
  ``restorable`` of an unknown block answered ``None``, not ``False``;
- ``multi.py:137:none:0`` (``is not None`` dropped): ``provides_memory_pool`` answered
  the child's name or ``None`` instead of a bool;
- ``multi.py:146:int:2`` (``n > 0`` → ``n > 1``): a child matching exactly one token
  (one-token blocks) was passed over; the composition's answer and loader must be the
  first child's non-zero answer, whatever it is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hisparse.connectors.base import KVLayout
from hisparse.connectors.multi import MultiConnectorScheduler
from hisparse.connectors.offload_store import OffloadStore
from tests.connector_helpers import NamedChild


def _stored(store: OffloadStore, h: str) -> None:
    job = store.start_store("r", h, 0)
    assert job is not None
    store.complete([job.job_id])


@settings(max_examples=30, deadline=None)
@given(data=st.data(), restores=st.integers(1, 4))
def test_a_block_is_pinned_until_its_last_restore_is_acked(data: st.DataObject,
                                                           restores: int) -> None:
    s = OffloadStore(1)
    _stored(s, "a")
    jobs = [j.job_id for _ in range(restores) for j in s.start_restores("q", [("a", 1)])]
    order = data.draw(st.permutations(jobs))
    for n, j in enumerate(order, 1):
        assert s.start_store("r", "b", 2) is None  # pinned: no victim, nothing changed
        assert s.held("a") and not s.held("b") and s.evictions == 0
        s.complete([j])
        assert s.restorable("a")
        if n < len(order):
            continue
        job = s.start_store("r", "b", 2)  # the last ack: a is the victim now
        assert job is not None and s.evictions == 1
        assert not s.held("a") and s.held("b")


def test_restorable_answers_a_bool_for_every_state() -> None:
    s = OffloadStore(2)
    assert s.restorable("never") is False
    assert s.start_store("r", "a", 0) is not None
    assert s.restorable("a") is False  # storing
    _stored(s, "b")
    assert s.restorable("b") is True


class _Child(NamedChild):
    """A scheduler child with a fixed answer and, optionally, the memory pool."""

    def __init__(self, name: str, matched: int | None, layout: KVLayout,
                 pool: bool = False) -> None:
        super().__init__(name, layout)
        self.matched, self.provides_memory_pool = matched, pool

    def get_num_new_matched_tokens(self, request_id: str, num_computed_tokens: int
                                   ) -> int | None:
        return self.matched

    def update_state_after_alloc(self, request_id: str, block_ids: Sequence[int],
                                 num_external_tokens: int) -> None:
        """Not read here (nor are the rest: the interface's remaining calls)."""

    def build_connector_meta(self) -> bytes | None:
        return None

    def parse_worker_meta(self, raw: bytes) -> object:
        return raw

    def apply_worker_meta(self, parsed: object) -> None:
        return None

    def request_finished(self, request_id: str, block_ids: Sequence[int]) -> bool:
        return False

    def get_stats(self) -> Mapping[str, int]:
        return {}


@settings(max_examples=60, deadline=None)
@given(answers=st.lists(st.one_of(st.none(), st.integers(0, 3)), min_size=1, max_size=4))
def test_the_first_non_zero_answer_loads_whatever_its_size(answers: list[int | None]) -> None:
    kv = KVLayout(block_tokens=1)
    m = MultiConnectorScheduler([_Child(f"c{i}", n, kv) for i, n in enumerate(answers)])
    expect: tuple[int | None, str | None] = (0, None)
    for i, n in enumerate(answers):  # vLLM's MultiConnector: stop at the first say
        if n is None or n > 0:
            expect = (n, None if n is None else f"c{i}")
            break
    assert (m.get_num_new_matched_tokens("r", 0), m.loader("r")) == expect


@given(pool=st.lists(st.booleans(), min_size=1, max_size=3).filter(lambda p: sum(p) <= 1))
def test_provides_memory_pool_is_a_bool(pool: list[bool]) -> None:
    kv = KVLayout(block_tokens=4)
    m = MultiConnectorScheduler([_Child(f"c{i}", 0, kv, p) for i, p in enumerate(pool)])
    assert m.provides_memory_pool is any(pool)


@pytest.mark.parametrize("capacity", [0, -3])
def test_a_store_of_no_block_is_refused(capacity: int) -> None:
    # (offload_store.py:67:raise:0: no test built one)
    with pytest.raises(ValueError,
                       match=rf"^offload store capacity must be at least 1, got {capacity}$"):
        OffloadStore(capacity)
    assert OffloadStore(1).capacity == 1
