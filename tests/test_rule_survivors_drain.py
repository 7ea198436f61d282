"""Rules of the simulator's end-of-run import drain (P/D imports in flight when the last
step ends) that survivors of the whole mutation run showed (docs/mutation-run7)."""

from __future__ import annotations

import pytest

from hisparse.simulate import SimulateOptions, Simulation
from hisparse.workload import Arrival
from tests.test_rule_survivors_sys2 import left_held


class ImportDrainWatched(Simulation):
    """A run that notes, as its imports drain at the end, the imports in flight and the
    copies each rank's stream still runs before, and the copies, acks and spills left
    after."""

    importing_before: list[str]
    queued_before: list[tuple[int, ...]]
    queued_after: list[tuple[int, ...]]
    open_spills_after: int
    imports_unacked_after: bool

    def _drain_imports(self) -> None:
        self.importing_before = sorted(self.importing)
        self.queued_before = [port.queued() for port in self.ports]
        super()._drain_imports()
        self.queued_after = [port.queued() for port in self.ports]
        self.open_spills_after = len(self.coordinator.state.open_spills)
        self.imports_unacked_after = self.coordinator.awaiting_acks()


def test_an_import_aborted_as_the_run_ends_is_stopped_on_the_worker_by_the_abort() -> None:
    # "r" (eight pages) arrives with prefill KV and is admitted to import at the only step;
    # the worker has landed four of its pages when the run ends. The drain sees it still
    # importing and aborts it (abort rate 1): the abort goes down in the next connector
    # metadata, the worker stops the import there, copies no further page and fails it
    # by its reason, "aborted"; nothing is left held or declared (kills
    # simulate.py:745:call:44, which never sent the abort: the worker copied all eight
    # pages and reported no reason)
    keys = tuple(f"k{i}" for i in range(8))
    sim = ImportDrainWatched(SimulateOptions(pd_share=1.0, gpu_blocks=16, host_blocks=16,
                                             steps=1, abort_rate=1.0),
                             [Arrival(0, "r", keys, 3)])
    rep = sim.run()
    assert rep.violations == 0 and rep.data_mismatches == 0, rep.notes
    assert sim.importing_before == ["r"]
    assert rep.imports == {
        "arrived": 1, "device": 0, "host": 0, "failed": 1, "failed_by_reason": {"aborted": 1},
        "unaligned_final_block": 0, "staged_bytes": 0, "direct_bytes": 24576,  # 4 pages
        "staging_slots": 4, "staging_peak": 0, "staging_occupancy_mean": 0.0,
    }
    assert (rep.requests, rep.aborted, rep.finished, rep.still_running) == (1, 1, 0, 0)
    assert sim.pd is not None and sim.pd.held == set() and sim.importing == {}
    assert sim.running == {} and "r" not in sim.coordinator.state.req
    assert left_held(sim.coordinator) == {}
    arena = sim.pd.prefiller.arena
    assert arena.num_free == arena.num_pages


@pytest.mark.parametrize(("seed", "steps"), [(1, 37), (1, 60), (2, 60)])
def test_the_import_drain_lands_every_copy_and_takes_its_ack_before_the_rest_drains(
        seed: int, steps: int) -> None:
    # the run ends with imports in flight and spill copies still on the stream. Each round
    # of the import drain is a whole step's end: every queued copy lands and its ack goes
    # up, so when the imports are done no copy is left on the stream and no transfer
    # open before the running requests are stopped (kills simulate.py:748:call:75, which
    # left the copies queued for the final drain)
    sim = ImportDrainWatched(SimulateOptions(pd_share=0.7, seed=seed, steps=steps,
                                             requests=24, abort_rate=0.0))
    rep = sim.run()
    assert rep.violations == 0 and rep.data_mismatches == 0, rep.notes
    assert sim.importing_before and any(sim.queued_before)
    assert sim.queued_after == [()]
    assert sim.open_spills_after == 0 and not sim.imports_unacked_after
    assert sim.importing == {}
