"""Rules of the disabled run's unadmitted count, the simulate command's exit status and
the worker process's Ctrl-C immunity that survivors of the whole mutation run showed
(docs/mutation-run7)."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

import hisparse.simulate as simulate_module
from hisparse.cli import EXIT_OK, EXIT_VIOLATION, main
from hisparse.indexer_sim import IndexerSimulation
from hisparse.simulate import SimulateOptions, Simulation
from hisparse.sizing.baseline import DisabledRun
from hisparse.workerproc import WorkerProcessError
from hisparse.workload import Arrival
from tests.test_rule_survivors_ixsim import NO_PREFILL_ARRIVALS, NO_PREFILL_OPTS, NoPrefillY
from tests.test_rule_survivors_sys2 import process_worker, reap


def test_requests_still_waiting_when_the_disabled_run_ends_count_as_never_admitted() -> None:
    """A request still queued for GPU room at the last step is never admitted: it adds
    one to ``never_admitted`` (kills sizing/baseline.py:100:arith:2, which subtracted)."""
    arrivals = [Arrival(step=0, request_id="a", page_keys=("k0", "k1"), decode_steps=5),
                Arrival(step=0, request_id="b", page_keys=("k2", "k3"), decode_steps=5)]
    rep = DisabledRun(arrivals, gpu_blocks=2, max_running=2).run(2)
    assert (rep.requests, rep.too_large, rep.still_running, rep.never_admitted,
            rep.finished) == (2, 0, 1, 1, 0)
    assert rep.waiting == [1, 1]




@pytest.mark.parametrize(("sim", "status"), [(NoPrefillY, EXIT_VIOLATION),
                                             (IndexerSimulation, EXIT_OK)])
def test_simulate_exits_with_a_violation_on_data_mismatches_even_with_no_violation(
        sim: type[IndexerSimulation], status: int, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Wrong rows read back fail the run as a violation does, though no invariant broke
    (kills cli.py:550:bool:14, which passed a run with either count zero)."""
    made: list[Simulation] = []

    def make(opts: SimulateOptions, metrics: object = None) -> Simulation:
        made.append(sim(NO_PREFILL_OPTS, NO_PREFILL_ARRIVALS))
        return made[-1]

    monkeypatch.setattr(simulate_module, "make_simulation", make)
    assert main(["simulate", "--no-progress"]) == status
    rep = made[0].report
    assert rep.violations == 0 and rep.finished == 2
    assert (rep.data_mismatches > 0) == (status == EXIT_VIOLATION)
    out = capsys.readouterr().out
    assert f"{rep.data_mismatches:,} data mismatches" in out


@pytest.mark.skipif(not hasattr(signal, "SIGINT"), reason="needs SIGINT")
def test_a_worker_process_ignores_ctrl_c_and_answers_on() -> None:
    """Ctrl-C reaches the whole foreground process group; the worker ignores it (the
    parent stops it), so it is still alive and answers the next call (kills
    workerproc.py:54:call:0, where SIGINT killed the child with KeyboardInterrupt).
    No timing: the hello answered, so the handler is installed; the signal is delivered
    before the child reads the next frame."""
    w = process_worker()
    try:
        assert w.pid is not None
        os.kill(w.pid, signal.SIGINT)
        w.admit("r", [("gpu", 0)])
        w.write_rows(np.array([0], np.int64), np.zeros((1, 16), np.uint8))
        assert w._proc.is_alive()
        assert w.queued() == ()
        w.close()
        assert w._proc.exitcode == 0  # stopped politely: it answered close
    finally:
        reap(w)


def test_a_dead_worker_is_reported_as_gone() -> None:
    """Sanity of the above: a worker killed by a signal is reported as gone."""
    w = process_worker()
    try:
        assert w.pid is not None
        os.kill(w.pid, signal.SIGKILL)
        with pytest.raises(WorkerProcessError, match=r"rank 0: the worker process is gone"):
            w.admit("r", [("gpu", 0)])
    finally:
        reap(w)
