"""Rules of the churn bench (``hisparse bench churn``) that survivors of the whole mutation
run showed: its GPU pool's size, which spills it times, a spill with no host block, when it
finishes a request, and a refused ``acks`` (docs/mutation-run7)."""

from __future__ import annotations

import types
from collections.abc import Iterator

import pytest

import hisparse.bench.churn as churn
from tests.test_rule_survivors_churn import _clock


def test_the_gpu_pool_holds_the_pages_of_one_request_more_than_live() -> None:
    # live 3 requests of 2 pages each, a host pool of 10 blocks: the GPU pool (and the
    # coordinator's view of it) is (3 + 1) x 2 = 8 blocks, whatever the host pool's size
    # (kills bench/churn.py:87:var:19 (3*2 + 10 = 16), :87:var:24 (10*2 + 2 = 22) and
    # :87:var:25 (3*10 + 2 = 32))
    ch = churn.Churn(10, live=3, pages=2)
    assert ch.kv.num_blocks == 8 and ch.kv.num_free == 8
    for i in range(12):
        ch.lifecycle(i)
    ch.drain()
    assert churn.drained_problems(ch) == []
    assert ch.kv.num_blocks == 8


def _counting_clock(reads: list[float]) -> types.SimpleNamespace:
    """A stand-in ``time`` whose CPU clock records each read (half a second apart)."""
    clock: Iterator[float] = _clock(0.5)

    def process_time() -> float:
        reads.append(next(clock))
        return reads[-1]

    return types.SimpleNamespace(process_time=process_time)


def test_an_untimed_churn_never_reads_the_cpu_clock_per_spill(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # 10 lifecycles through a pool of 4 host blocks: the last 6 spills evict; without
    # time_spills none is timed: no clock read, no time charged (kills
    # bench/churn.py:115:bool:1, which timed every spill once the pool was full)
    reads: list[float] = []
    monkeypatch.setattr(churn, "time", _counting_clock(reads))
    ch = churn.Churn(4, live=2, pages=2)
    for i in range(10):
        ch.lifecycle(i)
    assert (ch.evicting_spills, ch.evicting_spill_s, reads) == (6, 0.0, [])


def test_a_timed_churn_times_only_the_spills_that_evict(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the same run with time_spills: two reads for each of the 6 evicting spills, none
    # for the 4 that filled the pool (also kills bench/churn.py:115:bool:1)
    reads: list[float] = []
    monkeypatch.setattr(churn, "time", _counting_clock(reads))
    ch = churn.Churn(4, live=2, pages=2, time_spills=True)
    for i in range(10):
        ch.lifecycle(i)
    assert (ch.evicting_spills, ch.evicting_spill_s, len(reads)) == (6, 3.0, 12)


def test_a_spill_with_no_host_block_raises_before_the_steps_metadata_is_built() -> None:
    # one host block, held by r0's copy that no completed ack has published yet: r1's
    # spill finds no block and the lifecycle raises before building metadata, so the next
    # metadata is still number 1 and still carries r0's replacement (kills
    # bench/churn.py:123:reorder:3, which built (and lost) that metadata before raising)
    ch = churn.Churn(1, live=4, pages=2)
    ch.lifecycle(0)
    with pytest.raises(RuntimeError, match=r"^spill found no host block: nothing evictable$"):
        ch.lifecycle(1)
    meta = ch.conn.build_connector_meta()
    assert meta is not None
    assert (meta.seq, meta.transfers, meta.since, meta.epoch) == (1, (), (0,), (0,))
    assert [(r.request_id, r.page_index, r.host_block) for r in meta.replacements] == [
        ("r0", 1, 0)]


def test_the_oldest_request_finishes_only_once_more_than_live_run() -> None:
    # live 2: after 4 lifecycles r0 and r1 are finished (head 2), r2 and r3 run. With
    # live raised to 3, the fifth lifecycle leaves three running: nothing more finishes
    # (kills bench/churn.py:135:arith:10, which counted the finished ones as running too
    # and finished r2)
    ch = churn.Churn(3, live=2, pages=2)
    for i in range(4):
        ch.lifecycle(i)
    assert (ch.head, ch.running) == (2, ["r0", "r1", "r2", "r3"])
    ch.live = 3
    ch.lifecycle(4)
    assert ch.head == 2
    assert sorted(ch.coordinator.machine.state.req) == ["r2", "r3", "r4"]
