"""Rules of the simulator's checks and counts that the fifteenth group of survivors of the
whole mutation run showed (docs/mutation-run7): each line ran, but no test asserted its
effect."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from hisparse.simulate import SimulateOptions, SimulateReport, Simulation, simulate
from hisparse.workerport import DecodeRows, LocalWorker
from hisparse.workload import Arrival

# two requests sharing their first page, every page on the GPU (no aborts): both admitted
ARRIVALS = [Arrival(0, "a", ("p0", "a1"), 6), Arrival(2, "b", ("p0", "b1", "b2"), 6)]
SMALL = SimulateOptions(steps=20, abort_rate=0.0, gpu_blocks=8, host_blocks=8)


def test_pages_admitted_count_each_admitted_requests_pages_once() -> None:
    """``pages_admitted`` is the pages of the requests admitted (2 + 3 here), never
    less than the prefix hits among them.
    (kills hisparse/simulate.py:500:arith:2, which counted them down; the prefix hit
    rate, their quotient, did not show it)"""
    rep = Simulation(SMALL, ARRIVALS).run()
    assert rep.violations == 0 and rep.data_mismatches == 0, rep.notes
    assert (rep.requests, rep.finished) == (2, 2)
    assert rep.pages_admitted == 5
    assert 0 <= rep.prefix_hits <= rep.pages_admitted


@pytest.mark.parametrize("speculative", [1, 2])
def test_each_decode_resolves_one_top_k_per_verification_step(speculative: int) -> None:
    """With ``num_speculative_tokens`` s, a decode resolves s + 1 top-Ks per request:
    s + 1 times a plain run's lookups per decoded token.
    (kills hisparse/simulate.py:406:cmp:47 and 406:int:9, which resolved one)"""
    base = SimulateOptions(seed=3, steps=40, abort_rate=0.0)
    plain, spec = simulate(base), simulate(replace(base, num_speculative_tokens=speculative))

    def per_token(rep: SimulateReport) -> float:
        assert rep.decoded_tokens > 0 and rep.data_mismatches == 0
        return (rep.resident_hits + rep.hot_hits + rep.misses) / rep.decoded_tokens

    assert per_token(spec) == (speculative + 1) * per_token(plain)


def test_a_wrong_row_at_position_zero_is_a_data_mismatch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The checker compares every resolved position, 0 included (only -1, an empty
    slot, is masked). Each request here is shorter than top-K, so its top-K starts at
    position 0; the row read back there is altered in layer 0, and each altered row is
    one mismatch.
    (kills hisparse/simulate.py:448:int:3 and 448:cmp:14, which masked position 0)"""
    decode = LocalWorker.decode
    altered = 0

    def wrong_first_row(self: LocalWorker, topk: Any, step: int) -> DecodeRows:
        nonlocal altered
        res = decode(self, topk, step)
        k = SMALL.top_k
        for e, ts in enumerate(np.atleast_2d(t) for t in topk.values()):
            assert ts.shape[0] == 1 and ts[0][0] == 0  # one step, position 0 first
            res.seen[0][e * k] ^= 0xFF
            altered += 1
        return res

    monkeypatch.setattr(LocalWorker, "decode", wrong_first_row)
    rep = Simulation(SMALL, ARRIVALS).run()
    assert altered > 0 and rep.data_mismatches == altered


def test_the_churn_bench_reports_every_shape_figure_for_each_ack_shape() -> None:
    """``by_acks`` sets each ack shape's figures side by side: all six of them, and the
    headline shape's are the figures at the top of the report.
    (kills hisparse/bench/churn.py:251:drop:2 to 251:drop:7, each of which left one
    figure out)"""
    from hisparse.bench.churn import ACK_SHAPES, run

    figures = {"requests_per_cpu_s", "per_request_cpu_us_by_decile", "last_over_first_decile",
               "cpu_seconds", "rss_growth_after_first_decile_mib", "retired"}
    doc = run(40, host_blocks=128, eviction_pools=(128,), acks=ACK_SHAPES)
    assert list(doc["by_acks"]) == list(ACK_SHAPES)
    for shape in ACK_SHAPES:
        assert set(doc["by_acks"][shape]) == figures
    assert doc["by_acks"][ACK_SHAPES[0]] == {k: doc[k] for k in figures}
