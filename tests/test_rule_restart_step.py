"""Rule: after a worker restart the re-sent connector metadata is the step's own
(``hisparse/simulate.py``): the metrics see it at the step being run, as every other
metadata, so a host block's lifetime is measured from the step its spill was sent.

Kills ``simulate.py:709:var:15``: the re-sent metadata was bound with the restarted
rank's index (0 with one rank) in place of the step, and the metrics dated its spills
at step 0.
"""

from __future__ import annotations

from hisparse.metrics import HiSparseMetrics
from hisparse.simulate import SimulateOptions, Simulation
from hisparse.spec.messages import HiSparseConnectorMetadata


def test_metadata_re_sent_after_a_restart_reaches_the_metrics_at_its_step() -> None:
    sim = Simulation(SimulateOptions(requests=16, steps=120, seed=0, worker_restarts=6))
    seen: list[tuple[int, int, bool]] = []  # (step given, step run, sent by a restart)
    restarting = False

    class Recording(HiSparseMetrics):
        def on_connector_meta(self, meta: HiSparseConnectorMetadata, step: int) -> None:
            seen.append((step, sim._t, restarting))
            super().on_connector_meta(meta, step)

    lose = sim._lose_worker

    def losing(t: int, rank: int) -> None:
        nonlocal restarting
        restarting = True
        try:
            lose(t, rank)
        finally:
            restarting = False

    sim._lose_worker = losing  # type: ignore[method-assign]
    sim.metrics = Recording(sim.config)
    rep = sim.run()
    assert rep.violations == 0 and rep.worker_restarts == 6
    assert [(given, run) for given, run, _ in seen if given != run] == []
    resent = [run for _, run, by_restart in seen if by_restart]
    assert resent  # (not vacuous: restarts re-sent metadata mid-run)
