"""Rules of the simulator's P/D imports and message faults, the prefiller process and the
sizing replay's top-K that survivors of the whole mutation run showed (docs/mutation-run7):
each line ran, but no test asserted its effect."""

from __future__ import annotations

import multiprocessing as mp
import re
import signal
from dataclasses import asdict
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

import hisparse.transport.nixlpeer as nixlpeer
from hisparse.metrics import HiSparseMetrics
from hisparse.msgfaults import MessageFaults
from hisparse.pdimport.sim import PdOptions, PdSide
from hisparse.simulate import SimulateOptions, SimulateReport, Simulation
from hisparse.sizing.replay import SizingSimulation
from hisparse.spec.messages import HiSparseConnectorMetadata
from hisparse.transport.errors import TransportError
from hisparse.transport.nixlpeer import NixlPrefiller
from hisparse.workload import Arrival


def arrival(step: int, name: str, pages: int, decode_steps: int) -> Arrival:
    """Request ``name`` arriving at ``step`` with ``pages`` pages of its own keys."""
    return Arrival(step, name, tuple(f"{name}{i}" for i in range(pages)), decode_steps)


# --- the P/D side's figures ----------------------------------------------------------------


def test_a_completed_import_is_counted_under_the_target_it_landed_in() -> None:
    # device imports count as device, host imports as host, and either way the prefiller
    # gives the pages back (kills pdimport/sim.py:135:cmp:9, which swapped the two)
    side = PdSide(PdOptions(share=1.0), seed=0, layers=1, block_tokens=4, row_bytes=16,
                  capacity_pages=4)
    assert side.hold("d", np.arange(2, dtype=np.int64), 8)
    assert side.hold("h", np.arange(2, dtype=np.int64), 6)
    side.completed("d", "device")
    f = side.figures
    assert (f.device, f.host, f.failed) == (1, 0, 0)
    assert side.held == {"h"} and set(side.prefiller.arena.held) == {"h"}
    side.completed("h", "host")
    assert (f.device, f.host, f.failed) == (1, 1, 0)
    assert side.held == set() and side.prefiller.arena.num_free == 4


# --- an import that does not fit yet ---------------------------------------------------------


class ImportLog(Simulation):
    """A run that notes each import admission it tries: (step, request, admitted, free GPU
    blocks before, spills started by it)."""

    def __init__(self, opts: SimulateOptions, arrivals: list[Arrival]) -> None:
        super().__init__(opts, arrivals)
        self.tried: list[tuple[int, str, bool, int, int]] = []

    def _admit_import(self, r: str) -> bool:
        free, spills = self.kv.num_free, self.coordinator.spills
        ok = super()._admit_import(r)
        self.tried.append((self._t, r, ok, free, self.coordinator.spills - spills))
        return ok


def test_an_import_that_does_not_fit_yet_waits_in_order_and_asks_back_only_what_it_lacks(
) -> None:
    # "a" (5 pages) lands on the device; "b" (6 pages, 5 GPU blocks free) gets the host
    # target: 6 host blocks and one GPU block for its final page. "c" (6 pages) also gets
    # the host target, and 6 + 6 host blocks do not fit a pool of 10 until "b" ends: it
    # is refused at every step it waits, counted each time, and "d" (one page, which would
    # fit) waits behind it. "c" lacks no GPU block (4 are free): each refusal asks back one
    # block, the least, so one of "a"'s pages is spilled per step while "a" runs
    # (kills simulate.py:469:loop:4, which let "d" pass "c"; simulate.py:522:arith:18,
    # which counted the refusals down; simulate.py:525:arith:43, which asked back the
    # free blocks too and spilled all of "a" at once)
    arrivals = [arrival(0, "a", 5, 3), arrival(2, "b", 6, 6), arrival(2, "c", 6, 6),
                arrival(2, "d", 1, 2)]
    sim = ImportLog(SimulateOptions(pd_share=1.0, gpu_blocks=10, host_blocks=10, steps=40,
                                    abort_rate=0.0), arrivals)
    rep = sim.run()
    assert rep.violations == 0 and rep.data_mismatches == 0, rep.notes
    assert sim.tried == [
        (0, "a", True, 10, 0), (2, "b", True, 5, 0),
        (2, "c", False, 4, 0),  # "a" still imports: nothing to spill yet
        (3, "c", False, 4, 1), (4, "c", False, 4, 1), (5, "c", False, 6, 1),
        (6, "c", False, 8, 1),  # "a" ended: its spilled pages came back to the GPU pool
        (7, "c", False, 10, 0), (8, "c", False, 10, 0), (9, "c", False, 10, 0),
        (10, "c", False, 10, 0),
        (11, "c", True, 10, 0), (11, "d", True, 9, 0),  # "b" ended: "c", then "d"
    ]
    refusals = [t for t in sim.tried if not t[2]]
    assert rep.admissions_refused == len(refusals) == 9
    assert rep.spills == 4
    # the rule the log shows: no admission is tried after a refusal in the same step
    for (t, _, ok, _, _), (t2, _, _, _, _) in zip(sim.tried, sim.tried[1:], strict=False):
        assert ok or t2 != t


# --- message faults ----------------------------------------------------------------------------


def test_a_fault_rate_of_zero_is_accepted_and_delivers_every_message_as_sent() -> None:
    # the rate's range is closed at 0 (kills msgfaults.py:31:cmp:1, which refused 0)
    f = MessageFaults(0.0, seed=0, ranks=1)
    for i in range(50):
        raw = f"m{i}".encode()
        assert f.route("up" if i % 2 else "down", 0, raw) == [raw]
    assert set(f.counts.values()) == {0}
    assert f.flush("up", 0) == [] and f.flush("down", 0) == []
    with pytest.raises(ValueError, match=r"^message fault rate -0\.01 is not in \[0, 1/3\]$"):
        MessageFaults(-0.01, seed=0, ranks=1)


def _small(seed: int, message_faults: float = 0.0) -> SimulateOptions:
    return SimulateOptions(seed=seed, requests=12, steps=40, message_faults=message_faults)


def _without_options_and_faults(rep: SimulateReport) -> dict[str, Any]:
    doc = asdict(rep)
    del doc["sizes"], doc["message_faults"]  # (the options as given, and the faults drawn)
    return doc


@pytest.mark.parametrize("seed", [1, 2])
def test_a_faulty_channel_that_happened_to_deliver_everything_gives_the_perfect_run(
        seed: int) -> None:
    # at a rate of 1%, these seeds draw no fault at all: every worker meta goes up the
    # faulty path as sent, and the run is the run of a perfect channel, acks, spills and
    # host-tier reads included (kills simulate.py:668:call:91, whose coordinator never
    # took a worker meta from the faulty path)
    faulty = Simulation(_small(seed, message_faults=0.01)).run()
    assert set(faulty.message_faults.values()) == {0}  # (the premise: nothing was faulted)
    perfect = Simulation(_small(seed)).run()
    assert perfect.spills > 0 and perfect.hot_hits > 0 and perfect.misses > 0
    assert _without_options_and_faults(faulty) == _without_options_and_faults(perfect)


class StepStamps(HiSparseMetrics):
    """Metrics that note, for each connector metadata, the step it is stamped with and the
    step the run is in."""

    def __init__(self, sim: Simulation) -> None:
        super().__init__(sim.config)
        self.sim = sim
        self.stamps: list[tuple[int, int]] = []

    def on_connector_meta(self, meta: HiSparseConnectorMetadata, step: int) -> None:
        self.stamps.append((step, self.sim._t))
        super().on_connector_meta(meta, step)


def test_the_metadata_a_recovery_resends_is_stamped_with_the_step_it_is_sent_in() -> None:
    # a lost message makes the worker restart (a gap) and the coordinator re-sends its
    # metadata: the metrics see it at the step of the recovery, like every other
    # (kills simulate.py:708:var:12, which stamped it with the rank, 0)
    sim = Simulation(SimulateOptions(message_faults=0.2, seed=0, requests=20, steps=60))
    rec = StepStamps(sim)
    sim.metrics = rec
    rep = sim.run()
    assert rep.message_faults["gaps"] == 2 and rep.worker_restarts == 2
    assert len(rec.stamps) > 2
    assert [s for s in rec.stamps if s[0] != s[1]] == []
    steps = [s for s, _ in rec.stamps]
    assert steps == sorted(steps) and steps[-1] > 0


# --- the prefiller process --------------------------------------------------------------------


def _closes_its_pipe_and_waits(name: str, conn: Connection) -> None:
    """A prefiller child that hangs up before it reads its pages, and stays alive."""
    conn.close()
    while True:
        signal.pause()


def test_a_prefiller_that_hangs_up_starting_up_is_killed_reaped_and_reported(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the parent reads end of file: it kills and reaps the child (which would else live
    # on), and says the prefiller died starting up (kills transport/nixlpeer.py:78:call:17)
    monkeypatch.setattr(nixlpeer, "_serve", _closes_its_pipe_and_waits)
    before = set(mp.active_children())
    try:
        with pytest.raises(TransportError, match=re.escape(
                "prefiller 'hangs-up' died starting up")) as err:
            NixlPrefiller("hangs-up", np.zeros((2, 64), np.uint8))
        assert isinstance(err.value.__cause__, (EOFError, OSError))
        assert set(mp.active_children()) == before  # killed and reaped
    finally:
        for child in set(mp.active_children()) - before:  # (only on a failure above)
            child.kill()
            child.join()


# --- the sizing replay's top-K ------------------------------------------------------------------


class TopkLog(SizingSimulation):
    """A sizing replay that notes each top-K it draws, and what it still keeps after
    each schedule."""

    def __init__(self, opts: SimulateOptions, arrivals: list[Arrival], drift: float) -> None:
        super().__init__(opts, arrivals, drift)
        self.drawn: dict[str, list[list[int]]] = {}
        self.kept_not_running: list[str] = []

    def _schedule(self) -> None:
        super()._schedule()
        self.kept_not_running += [r for r in self._current if r not in self.running]

    def _topk_one(self, r: str) -> NDArray[np.int32]:
        out = super()._topk_one(r)
        self.drawn.setdefault(r, []).append(out.tolist())
        return out


def test_a_running_requests_top_k_drifts_from_its_last_and_is_forgotten_when_it_ends(
) -> None:
    # with no drift a request reads the same k positions at every step it decodes, and
    # once it stops running its top-K is no longer kept (kills sizing/replay.py:116:cmp:2,
    # which forgot the running requests' top-K, so each step drew a new one, and kept
    # the ended ones')
    opts = SimulateOptions(requests=2, steps=40, concurrency=2, top_k=8, block_tokens=4,
                           layers=1, row_bytes=16, gpu_blocks=16, host_blocks=16,
                           abort_rate=0.0, executor="accounting")
    arrivals = [arrival(0, "a", 4, 6), arrival(2, "b", 4, 5)]
    sim = TopkLog(opts, arrivals, drift=0.0)
    rep = sim.run()
    assert rep.finished == 2 and rep.violations == 0
    assert set(sim.drawn) == {"a", "b"}
    for r, drawn in sim.drawn.items():
        assert len(drawn) >= 5, r
        assert all(d == drawn[0] for d in drawn), r
        assert len(set(drawn[0])) > 1  # (k random positions of 16 tokens, not all alike)
    assert sim.kept_not_running == [] and sim._current == {}
