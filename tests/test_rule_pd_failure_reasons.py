"""Rule: a P/D run's ``failed_by_reason`` accounts for every failed import
(``hisparse/pdimport/sim.py``).

The workers count the failures they see (refused, transport, worker lost, aborted); an
import the coordinator ends before its worker started it (the request aborted, or the
worker lost, before the command arrived) is counted as ``not_started``. Found while
arguing the whole mutation run's survivors (docs/mutation-run7, thirteenth pass): the
report said ``failed: 1`` with no reason at all.
"""

from __future__ import annotations

import pytest

from hisparse.simulate import SimulateOptions, Simulation
from hisparse.workload import Arrival


@pytest.mark.parametrize(("seed", "restarts", "abort_rate"), [
    (0, 2, 0.05), (10, 2, 0.05), (11, 2, 0.05), (1, 2, 0.05), (0, 0, 0.1), (2, 0, 0.1)])
def test_the_failure_reasons_sum_to_the_failed_imports(seed: int, restarts: int,
                                                        abort_rate: float) -> None:
    o = SimulateOptions(seed=seed, pd_share=0.7, worker_restarts=restarts, requests=16,
                        steps=60, abort_rate=abort_rate)
    rep = Simulation(o).run()
    assert rep.violations == 0 and rep.data_mismatches == 0, rep.notes
    imports = rep.imports
    assert imports["failed"] > 0  # (not vacuous: imports failed)
    assert sum(imports["failed_by_reason"].values()) == imports["failed"], imports
    assert all(n > 0 for n in imports["failed_by_reason"].values()), imports


@pytest.mark.parametrize("seed", [4, 5])
def test_an_import_whose_command_was_lost_with_its_worker_failed_not_started(seed: int) -> None:
    # "a" arrives with prefill KV at step 1; at that step the worker is lost and the
    # step's metadata (the import command) with it: the worker never started the import
    arrivals = [Arrival(1, "a", ("a0", "a1"), 3)]
    o = SimulateOptions(seed=seed, pd_share=1.0, worker_restarts=1, gpu_blocks=16,
                        host_blocks=16, steps=20, abort_rate=0.0)
    rep = Simulation(o, arrivals).run()
    assert rep.violations == 0 and (rep.worker_restarts, rep.metas_lost) == (1, 1)
    assert (rep.imports["arrived"], rep.imports["failed"]) == (1, 1)
    assert rep.imports["failed_by_reason"] == {"not_started": 1}
    assert rep.imports["staged_bytes"] == rep.imports["direct_bytes"] == 0
