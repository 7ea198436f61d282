"""Rule: a host staging pool never writes device memory, and its slots are exactly one
page wide whatever the slot size (``hisparse/transport/staging.py``).

From the guard survivors of the second guard-phase run (docs/mutation-survivors.md):

- ``133:raise:4`` (the refusal deleted): a loopback READ into device block memory through
  a host pool was attempted (a CuPy array assigned from host bytes) instead of refused
  with the way out (``staging_pool()``, a ``DeviceStagingPool``); here a stand-in for
  device memory must be refused and left unwritten;
- ``99:call:2`` (``seen.add`` deleted): a release naming one lease twice passed the
  check, returned the slot once and then raised ``KeyError`` half done, so the slot was
  free twice over; here any list of leases with a repeat, or with one lease not live, is
  refused with ``TransportError`` and the pool is unchanged;
- ``47:cmp:6`` (``page_bytes < 1`` → ``<= 1``): pages of one byte refused; here every
  positive page size and slot count is accepted, 0 of either refused.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hisparse.transport import StagingConfigError, StagingPool, TransportError
from hisparse.transport.staging import StagingLease


class DeviceLike:
    """Exposes ``__cuda_array_interface__`` (what marks device memory) and records writes."""

    def __init__(self, nbytes: int) -> None:
        self.__cuda_array_interface__ = {"data": (1 << 40, False), "shape": (nbytes,),
                                         "typestr": "|u1", "version": 3}
        self.writes: list[Any] = []

    def __setitem__(self, key: Any, value: Any) -> None:
        self.writes.append((key, value))


def test_a_host_pool_refuses_to_write_device_memory_and_writes_nothing() -> None:
    pool = StagingPool(4 * 64, 4, 64)
    dst = DeviceLike(64)
    with pytest.raises(TransportError, match=r"cannot write device memory.*staging_pool\(\)"):
        pool.write(dst, np.full(64, 7, np.uint8))
    assert dst.writes == []
    view = pool.view(0)  # host memory is written as given
    pool.write(view, np.full(64, 7, np.uint8))
    assert (pool.view(0) == 7).all()


def _pool_state(pool: StagingPool) -> tuple[list[int], dict[int, str]]:
    return sorted(pool._free), dict(pool._owner)


@settings(max_examples=50, deadline=None)
@given(data=st.data(), slots=st.integers(1, 5))
def test_a_release_with_a_repeat_or_a_dead_lease_is_refused_with_nothing_changed(
        data: st.DataObject, slots: int) -> None:
    pool = StagingPool(slots * 16, slots, 16)
    held = pool.lease("r", data.draw(st.integers(1, slots)))
    picks = data.draw(st.lists(st.sampled_from(held), min_size=1, max_size=len(held) + 2))
    dead = data.draw(st.booleans())
    if dead:
        picks.append(StagingLease("other", held[0].slot))  # the slot is not leased to it
    before = _pool_state(pool)
    if dead or len({lease.slot for lease in picks}) < len(picks):
        with pytest.raises(TransportError, match="is not a live lease of this pool"):
            pool.release(picks)
        assert _pool_state(pool) == before
    else:
        pool.release(picks)
        assert pool.in_use == len(held) - len(picks)
        assert pool.num_free == slots - pool.in_use


@given(slots=st.integers(0, 4), page=st.integers(0, 4))
def test_every_positive_page_and_slot_count_is_a_pool(slots: int, page: int) -> None:
    if slots >= 1 and page >= 1:
        pool = StagingPool(slots * page, slots, page)
        assert (pool.slots, pool.page_bytes, pool.slot_bytes) == (slots, page, page)
        assert pool.view(slots - 1).size == page
    else:
        with pytest.raises(StagingConfigError, match="at least 1 slot and a positive page"):
            StagingPool(max(slots, 1) * max(page, 1), slots, page)


@pytest.mark.parametrize("n", [0, -1])
def test_a_lease_of_no_slot_is_refused_and_takes_nothing(n: int) -> None:
    # (staging.py:79:raise:2: no test asked for fewer than one slot)
    pool = StagingPool(4 * 16, 4, 16)
    before = _pool_state(pool)
    with pytest.raises(ValueError, match=rf"^lease at least one slot, got {n}$"):
        pool.lease("r", n)
    assert _pool_state(pool) == before and pool.in_use == 0
