"""Rule: the simulator's P/D side counts exactly: every request the prefiller holds is
one arrival, those whose final block is not full are the unaligned ones, a full buffer
holds nothing and counts nothing, and a request ID held again drops its old pages first;
the side is idle only when every worker's import runner is; its options accept a share
of 0 and 1 and one staging slot and refuse past them; its figures document each count
under its own name; ``close`` drains every runner (``hisparse/pdimport/sim.py``).

From the guard survivors of the third guard-phase run (docs/mutation-survivors.md):
``129:arith:0`` (``arrived += 1`` → ``-= 1``), ``187:collection:0`` (``all`` → ``any``:
idle while one runner still imported), ``48:int:0`` (one staging slot refused),
``72:var:21``, ``74:var:24`` (a figure documented under another's name), ``130:cmp:8``
(``!= 0`` → ``== 0``: the aligned ones counted), ``193:call:15`` (``close`` drained no
runner), ``121:var:30`` (``held`` → ``aborted``: a request ID declared again was refused
by the prefiller, its old pages still held).
"""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hisparse.pdimport.sim import PdFigures, PdOptions, PdSide

BLOCK = 4


def _side(capacity_pages: int = 8) -> PdSide:
    return PdSide(PdOptions(share=1.0), seed=0, layers=2, block_tokens=BLOCK, row_bytes=16,
                  capacity_pages=capacity_pages)


@given(holds=st.lists(st.tuples(st.integers(1, 3), st.integers(0, BLOCK - 1)), max_size=6))
def test_each_request_held_is_one_arrival_and_a_partial_final_block_is_unaligned(
    holds: list[tuple[int, int]]
) -> None:
    side = _side(capacity_pages=8)
    arrived = unaligned = 0
    for i, (pages, short) in enumerate(holds):
        tokens = pages * BLOCK - short
        fits = side.prefiller.arena.num_free >= pages
        assert side.hold(f"r{i}", np.arange(pages, dtype=np.int64), tokens) == fits
        arrived += fits
        unaligned += fits and short > 0
        assert (side.figures.arrived, side.figures.unaligned) == (arrived, unaligned)
        assert (f"r{i}" in side.held) == fits


@pytest.mark.parametrize(("states", "idle"), [
    ((), True), ((True,), True), ((True, True), True), ((True, False), False),
    ((False, True), False), ((False,), False),
])
def test_the_side_is_idle_only_when_every_runner_is(states: tuple[bool, ...],
                                                     idle: bool) -> None:
    side = _side()
    side.runners = [SimpleNamespace(idle=s) for s in states]  # type: ignore[misc]
    assert side.idle is idle


def test_the_options_accept_their_edges_and_refuse_past_them() -> None:
    for ok in (PdOptions(share=0.0), PdOptions(share=1.0), PdOptions(staging_slots=1),
               PdOptions(transport="nixl")):
        assert ok.problem() is None
    assert PdOptions(staging_slots=0).problem() == "--staging-slots must be at least 1, got 0"
    assert PdOptions(share=1.5).problem() == "--pd-share must be between 0 and 1, got 1.5"
    assert PdOptions(transport="tcp").problem() == (
        "unknown transport 'tcp'; choose one of loopback, nixl")
    # the side refuses the options whose problem it names (pdimport/sim.py:88:raise:0)
    with pytest.raises(ValueError, match=r"^--pd-share must be between 0 and 1, got 1\.5$"):
        PdSide(PdOptions(share=1.5), seed=0, layers=2, block_tokens=BLOCK, row_bytes=16,
               capacity_pages=8)


def test_the_figures_document_each_count_under_its_own_name() -> None:
    f = PdFigures(arrived=1, device=2, host=3, failed=4, reasons=Counter(b=1, a=2),
                  unaligned=5, staged_bytes=6, direct_bytes=7, staging_slots=4,
                  staging_peak=3, staging_in_use=[2, 4])
    assert f.doc() == {
        "arrived": 1, "device": 2, "host": 3, "failed": 4,
        "failed_by_reason": {"a": 2, "b": 1}, "unaligned_final_block": 5,
        "staged_bytes": 6, "direct_bytes": 7, "staging_slots": 4, "staging_peak": 3,
        "staging_occupancy_mean": 0.75,
    }
    assert list(f.doc()["failed_by_reason"]) == ["a", "b"]  # sorted by reason
    assert PdFigures(staging_slots=4).doc()["staging_occupancy_mean"] == 0.0
    assert PdFigures(staging_in_use=[1]).doc()["staging_occupancy_mean"] == 0.0


class _Runner:
    """A worker's import runner as ``close`` reads it: ``drain`` and its stats."""

    def __init__(self, staged: int, direct: int, peak: int, reasons: Counter[str]) -> None:
        self.drains = 0
        self.stats = SimpleNamespace(staged_bytes=staged, direct_bytes=direct,
                                     staging_peak=peak, reasons=reasons)

    def drain(self) -> None:
        self.drains += 1


def test_close_drains_every_runner_once_and_takes_rank_0s_bytes_and_the_peak() -> None:
    side = _side()
    runners = [_Runner(10, 20, 1, Counter(a=1)), _Runner(30, 40, 3, Counter(a=2, b=1))]
    side.runners = runners  # type: ignore[assignment]
    side.close()
    assert [r.drains for r in runners] == [1, 1]
    f = side.figures
    assert (f.staged_bytes, f.direct_bytes, f.staging_peak) == (10, 20, 3)
    assert f.reasons == Counter(a=3, b=1)


def test_a_request_id_held_again_drops_its_old_pages_first() -> None:
    side = _side(capacity_pages=3)
    assert side.hold("r", np.arange(2, dtype=np.int64), 2 * BLOCK)
    assert side.hold("r", np.arange(3, dtype=np.int64), 3 * BLOCK)  # its 2 rows came back
    assert side.prefiller.arena.held == {"r": [0, 1, 2]}
    assert side.figures.arrived == 2 and side.prompt_tokens["r"] == 3 * BLOCK


def test_blocks_of_two_tokens_still_draw_prompts_that_end_inside_their_final_block() -> None:
    # a block of 2 has one unaligned length (1 token in its last block); only a block of
    # 1 has none (pdimport/sim.py:115:int:2 took 2 for 1)
    for block in (2, 1):
        side = PdSide(PdOptions(share=1.0), seed=0, layers=1, block_tokens=block, row_bytes=16,
                      capacity_pages=8)
        drawn = [side.draw(3) for _ in range(200)]
        assert set(drawn) == ({3 * block, 3 * block - 1} if block == 2 else {3})


@pytest.mark.parametrize("end", ["failed", "forget"])
def test_a_request_that_ends_gives_its_pages_back_once(end: str) -> None:
    # held no more after it ends, and its pages leave the prefiller
    # (pdimport/sim.py:152:var:33 dropped it from the aborted set instead)
    side = _side(capacity_pages=3)
    assert side.hold("r", np.arange(2, dtype=np.int64), 2 * BLOCK)
    getattr(side, end)("r")
    assert "r" not in side.held and side.prefiller.arena.held == {}
    getattr(side, end)("r")  # a second end finds nothing to drop
    assert "r" not in side.held
