"""Rules of the churn bench (``hisparse bench churn``) that survivors of the whole mutation
run showed: the run's size and pool as reported, the pool it churns through, its clocks on
a collected heap, the eviction cost and the RSS growth as differences (docs/mutation-run7)."""

from __future__ import annotations

import gc
import types
import weakref
from collections.abc import Iterator
from typing import Any

import pytest

import hisparse.bench.churn as churn


def _clock(step: float) -> Iterator[float]:
    """A stand-in clock: each read ``step`` seconds on from the last, from 1000 s."""
    k = 0
    while True:
        yield 1000.0 + step * k
        k += 1


def test_the_churn_report_states_the_requests_and_the_host_pool_asked_for() -> None:
    # 150 requests through a pool of 120 host blocks: the report names each as given,
    # not one for the other (kills bench/churn.py:235:var:17, which reported the pool as
    # the requests, and bench/churn.py:236:var:18, which reported the requests as the pool)
    doc = churn.run(150, host_blocks=120, eviction_pools=(), acks=("pipelined",))
    assert (doc["requests"], doc["host_blocks"]) == (150, 120)
    assert (doc["live_requests"], doc["pages_per_request"]) == (churn.Churn.live,
                                                                churn.Churn.pages)
    assert doc["retired"] == 150 and doc["left_after_drain"] == []


def test_one_churn_run_fills_the_host_pool_it_was_given_then_evicts() -> None:
    # 150 lifecycles, one spill each, through a pool of 120 blocks: the pool fills and
    # stays full, so at the end 119 pages are published and one spill is still open
    # (kills bench/churn.py:182:var:6, which sized the pool by the request count: 150
    # blocks, no eviction, 149 published)
    doc = churn.churn(150, 120, "pipelined")
    assert doc["tables_at_end"]["prefix"] == 119
    assert doc["tables_at_end"]["open_spills"] == 1
    assert doc["retired"] == 150 and doc["left_after_drain"] == []


class _Cycle:
    """A reference cycle: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


def test_a_churn_run_starts_its_clocks_on_a_collected_heap(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # garbage that earlier work left in reference cycles is collected before either clock
    # starts, so its collection is not charged to the run's first decile (kills
    # bench/churn.py:186:call:0, which dropped the collection). The automatic collector
    # is off for the test, so only the run's own collection can free the cycle.
    seen: dict[str, bool] = {}
    cpu, wall = _clock(0.5), _clock(2.0)

    def read(name: str, clock: Iterator[float]) -> float:
        seen.setdefault(name, garbage() is None)  # at the first read of each clock
        return next(clock)

    monkeypatch.setattr(churn, "time", types.SimpleNamespace(
        process_time=lambda: read("cpu", cpu), perf_counter=lambda: read("wall", wall)))
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        garbage = weakref.ref(_Cycle())
        assert garbage() is not None  # (not vacuous: the cycle outlives its last name)
        doc = churn.churn(20, 64, "pipelined")
    finally:
        if was_enabled:
            gc.enable()
    assert seen == {"wall": True, "cpu": True}
    assert doc["left_after_drain"] == []


def test_the_eviction_cost_is_the_cpu_time_each_evicting_spill_took(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # with a stand-in CPU clock half a second on at each read, every evicting spill reads
    # it before and after: 0.5 s each, 500000 µs on average, whatever the clock's origin
    # (kills bench/churn.py:118:arith:9, which added the start to the end)
    cpu = _clock(0.5)
    monkeypatch.setattr(churn, "time", types.SimpleNamespace(process_time=lambda: next(cpu)))
    doc = churn.eviction_cost(128, samples=10)
    assert doc == {"host_blocks": 128, "evicting_spills": 10,
                   "evicting_spill_cpu_us": 500_000.0}


def test_the_rss_growth_is_the_end_less_the_first_decile(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # stand-in RSS readings: 100 MiB after the first decile, 103.5 MiB at the end of the
    # run: it grew by 3.5 MiB (kills bench/churn.py:211:arith:12, which added them)
    readings = iter((100 * 2**20, 207 * 2**19))
    reads: list[int] = []

    def rss() -> int:
        reads.append(next(readings))
        return reads[-1]

    monkeypatch.setattr(churn, "_rss_bytes", rss)
    doc: dict[str, Any] = churn.churn(30, 64, "split")
    assert len(reads) == 2  # one after the first decile, one at the end
    assert doc["rss_growth_after_first_decile_mib"] == 3.5
    assert doc["rss_warm_after_requests"] == 3
    assert doc["left_after_drain"] == []
