"""Rules met by the whole mutation run's sixteenth pass (docs/mutation-survivors.md).

An arrival holds at least one page, so a P/D arrival that brings prefill KV brings at
least one token: the simulator's ``tokens is not None`` and ``tokens`` then agree
(``simulate.py:379:none:22``). Before, an empty prompt reached the run and failed there
(the coordinator refused to declare it; in a P/D run the prefiller's arena refused it
with a message about raising its pages)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hisparse.pdimport.sim import PdOptions, PdSide
from hisparse.simulate import SimulateOptions, Simulation
from hisparse.spec.trace import read_trace
from hisparse.workload import Arrival, WorkloadError


@pytest.mark.parametrize("keys", [(), []])
def test_an_arrival_with_no_page_is_refused_where_it_is_made(keys: tuple[str, ...]) -> None:
    with pytest.raises(WorkloadError,
                       match=r"^request 'a' has no page: an empty prompt holds no KV page$"):
        Arrival(0, "a", keys, 3)
    assert Arrival(0, "a", ("k",), 3).page_keys == ("k",)  # one page is a request


@pytest.mark.parametrize("pd_share", [0.0, 1.0])
def test_a_synthetic_workload_that_draws_an_empty_prompt_is_refused_before_the_run(
    pd_share: float,
) -> None:
    # min_pages 0: some request draws no page; the simulation is refused as it is built
    # (before any worker or prefiller exists), with or without P/D import
    opts = SimulateOptions(requests=40, steps=20, min_pages=0, max_pages=1, pd_share=pd_share)
    with pytest.raises(WorkloadError, match=r"^request 'req\d+' has no page"):
        Simulation(opts)


@given(pages=st.integers(1, 12), block=st.sampled_from([1, 2, 16, 64]),
       share=st.floats(0.0, 1.0), seed=st.integers(0, 50))
def test_a_prefill_draw_is_none_or_at_least_one_token_of_the_final_page(
    pages: int, block: int, share: float, seed: int,
) -> None:
    side = PdSide(PdOptions(share=share), seed=seed, layers=1, block_tokens=block,
                  row_bytes=8, capacity_pages=4)
    for _ in range(20):
        tokens = side.draw(pages)
        assert tokens is None or (pages - 1) * block < tokens <= pages * block


def test_an_empty_arrival_list_is_a_run_of_no_request() -> None:
    # only None asks for the options' workload; [] is a workload of no request
    # (simulate.py:195:none:18 took [] for None and ran the synthetic requests)
    sim = Simulation(SimulateOptions(requests=5, steps=30), arrivals=[])
    assert sim.sizes()["requests"] == 0
    report = sim.run()
    assert (report.requests, report.finished, report.decoded_tokens) == (0, 0, 0)


@pytest.mark.parametrize("backing", ["private", "shared"])
def test_a_one_rank_run_records_the_backing_it_ran(backing: str, tmp_path: Path) -> None:
    # with one rank either backing copies on rank 0, yet the trace's header says which
    # ran (simulate.py:259:cmp:37 left a one-rank shared run's config, and so its
    # header, at the private default)
    path = tmp_path / "t.jsonl"
    report = Simulation(SimulateOptions(requests=4, steps=30, backing=backing,
                                        trace=path)).run()
    assert report.violations == 0 and report.data_mismatches == 0
    header = read_trace(path).header
    assert (header.backing, header.ranks, header.writer) == (backing, 1, 0)
