"""Rule: a reader rank of a shared host pool waits, for each host block, until the
writer's event for that block has reached every transfer the reader took into it; so
``pending([b])`` is empty exactly when each of those transfers' events has fired, and
otherwise names the largest one not yet fired (``hisparse/sharedpool.py``).

The writer's event table keeps, per block, the largest transfer ID landed there, so a
transfer ``t`` into ``b`` has fired when ``events[b] >= t``. The executor takes any fresh
transfer IDs in any order (``check_spills`` and the stream ask only that they are fresh);
only the coordinator's IDs happen to grow.

From the one open survivor of the second guard-phase run (docs/mutation-survivors.md):
``125:var:7`` (``self._waits.get`` → ``self._dst.get``, the writer's map, empty on a
reader): the wait on a block became the last transfer taken into it instead of the
largest, so after a reader took 7 and then 3 into one block it read once 3 had fired,
before 7's event.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hisparse.executor.layout import PoolLayout
from hisparse.executor.reference import ReferencePools
from hisparse.sharedpool import NOT_LANDED, SharedHostExecutor, SharedHostPool

LAYOUT = PoolLayout(gpu_blocks=2, host_blocks=3, block_tokens=2, row_bytes=16, hot_rows=2,
                    slots=1)

Ranks = tuple[SharedHostExecutor, ReferencePools, SharedHostExecutor, ReferencePools]


@pytest.fixture
def ranks() -> Iterator[Ranks]:
    """A writer and a reader executor over one fresh shared pool of one layer."""
    pool = SharedHostPool(LAYOUT, 1)
    try:
        writer = SharedHostExecutor(pool, writer=True)
        reader = SharedHostExecutor(pool, writer=False)
        yield writer, writer.allocate(LAYOUT), reader, reader.allocate(LAYOUT)
    finally:
        pool.close()


def _land(writer: SharedHostExecutor, pools: ReferencePools, t: int, b: int) -> None:
    """The writer's copy of transfer ``t`` into host block ``b``, enqueued and landed."""
    writer.enqueue_spills(pools, [(t, 0, b)])
    writer.release()


def test_a_reader_waits_on_the_largest_transfer_taken_into_a_block(ranks: Ranks) -> None:
    """``125:var:7``: transfer 7 then 3 into block 0; once 3 has fired, the read still
    waits on 7 (the mutant waited on 3 only and let the read through)."""
    writer, wpools, reader, rpools = ranks
    reader.enqueue_spills(rpools, [(7, 0, 0)])
    reader.enqueue_spills(rpools, [(3, 1, 0)])
    assert reader.pending([0]) == [7]
    _land(writer, wpools, 3, 0)
    assert int(writer.pool.events[0]) == 3
    assert reader.pending([0]) == [7]  # 3 fired, 7 has not
    _land(writer, wpools, 7, 0)
    assert reader.pending([0]) == []


@st.composite
def _interleavings(draw: st.DrawFn) -> list[tuple[str, int, int]]:
    """Transfers (fresh IDs in any order, any block), each taken by the reader, some also
    landed by the writer, the takes and landings in any interleaving."""
    ids = draw(st.lists(st.integers(0, 30), unique=True, max_size=8))
    steps: list[tuple[str, int, int]] = []
    for t in ids:
        b = draw(st.integers(0, LAYOUT.host_blocks - 1))
        steps.append(("take", t, b))
        if draw(st.booleans()):
            steps.append(("land", t, b))
    out: list[tuple[str, int, int]] = draw(st.permutations(steps))
    return out


@settings(max_examples=150, deadline=None)
@given(steps=_interleavings())
def test_pending_is_the_largest_taken_transfer_not_yet_fired(
    steps: list[tuple[str, int, int]]
) -> None:
    """After every take and every landing, for every block, ``pending`` is what an
    independent record of the takes and landings says (checked twice: asking again,
    which forgets fired waits, changes no answer)."""
    pool = SharedHostPool(LAYOUT, 1)
    try:
        writer = SharedHostExecutor(pool, writer=True)
        reader = SharedHostExecutor(pool, writer=False)
        wpools, rpools = writer.allocate(LAYOUT), reader.allocate(LAYOUT)
        taken: dict[int, set[int]] = {b: set() for b in range(LAYOUT.host_blocks)}
        fired = dict.fromkeys(range(LAYOUT.host_blocks), NOT_LANDED)
        for kind, t, b in steps:
            if kind == "take":
                reader.enqueue_spills(rpools, [(t, 1, b)])
                taken[b].add(t)
            else:
                _land(writer, wpools, t, b)
                fired[b] = max(fired[b], t)
            for blk in range(LAYOUT.host_blocks):
                waiting = [u for u in taken[blk] if u > fired[blk]]
                expected = [max(waiting)] if waiting else []
                assert reader.pending([blk]) == expected, (kind, t, b, blk)
                assert reader.pending([blk]) == expected
    finally:
        pool.close()


def test_a_reader_waits_on_no_copy_the_writer_has_already_landed(ranks: Ranks) -> None:
    # the spec's WorkerEnqueue: a reader orders its stream after the writer's copy only
    # while that copy is in flight. The writer lands transfer 5 into block 0; the reader
    # then takes 5 (and 4, older) into block 0 and records no wait; transfer 6, not yet
    # landed, is waited on. (The reader's wait table is the only place this shows:
    # ``pending`` forgets a fired wait when asked. Kills sharedpool.py:155:cmp:5, which
    # recorded a wait on the landed 5.)
    writer, wpools, reader, rpools = ranks
    writer.enqueue_spills(wpools, [(5, 0, 0)])
    writer.release()
    assert int(writer.pool.events[0]) == 5
    reader.enqueue_spills(rpools, [(5, 0, 0)])
    assert reader._waits == {}
    reader.enqueue_spills(rpools, [(4, 1, 0)])
    assert reader._waits == {}
    assert reader.pending([0]) == []
    reader.enqueue_spills(rpools, [(6, 0, 0)])
    assert reader._waits == {0: 6}
    assert reader.pending([0]) == [6]
