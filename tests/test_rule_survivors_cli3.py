"""Rules of ``hisparse simulate``'s argument handling (an abort rate of 0 is kept; tensor-
parallel ranks each run in a worker process of their own) that survivors of the whole
mutation run showed no test stated (docs/mutation-run7)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import hisparse.simulate as simulate_mod
from hisparse.cli import main
from hisparse.simulate import Simulation
from hisparse.workerport import LocalWorker
from hisparse.workerproc import ProcessWorker

RUN = ["simulate", "--requests", "16", "--steps", "60", "--no-progress"]

SIZES = ("sizes        GPU 56 blocks, host 160 blocks (960.0 KiB), 32 tokens/block, 64 B/row, "
         "3 layers (index leaders 0 0 2), top-K 128, 256 hot rows/request, max running 12, "
         "speculative 0, abort rate {rate}/step, executor reference")


def test_an_abort_rate_of_zero_turns_aborts_off_on_a_synthetic_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # --abort-rate 0 is a rate given, not the synthetic default of 0.03: the header says
    # 0.0/step and no request is aborted, where the default run aborts some
    # (cli.py:473:none:24 took 0 for "not given" and ran with 0.03)
    out = tmp_path / "zero.json"
    assert main([*RUN, "--abort-rate", "0", "--json", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == SIZES.format(rate=0.0)
    doc = json.loads(out.read_text())
    assert (doc["sizes"]["abort_rate"], doc["aborted"]) == (0.0, 0)
    assert ("requests     15 arrived: 8 finished, 0 aborted, 7 still running at the end, "
            "0 never admitted (0 larger than the GPU pool); 1 due after the last step") in lines
    # the same run with the default rate does abort (so the 0 above is the flag's doing)
    default = tmp_path / "default.json"
    assert main([*RUN, "--json", str(default)]) == 0
    assert capsys.readouterr().out.splitlines()[1] == SIZES.format(rate=0.03)
    doc = json.loads(default.read_text())
    assert doc["sizes"]["abort_rate"] == 0.03 and doc["aborted"] > 0


@pytest.mark.parametrize(("flags", "processes"), [
    (["--tp", "2"], 2),  # every tensor-parallel rank in its own process, unasked
    (["--worker-processes"], 1),  # one rank, in a process because it was asked for
    ([], 0),  # one rank, not asked: in this process
])
def test_tensor_parallel_ranks_each_run_in_a_worker_process_of_their_own(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        flags: list[str], processes: int) -> None:
    # --tp W > 1 runs each of the W workers in its own process without --worker-processes;
    # --worker-processes does so for one rank too; neither: the worker runs in this process
    # (cli.py:482:int:3 kept --tp 2 in this process; 482:bool:17 ran workers in processes
    # only with both --worker-processes and --tp > 1)
    made: list[Simulation] = []
    real = simulate_mod.make_simulation

    def recording(o: simulate_mod.SimulateOptions) -> Simulation:
        sim = real(o)
        made.append(sim)
        return sim

    monkeypatch.setattr(simulate_mod, "make_simulation", recording)
    argv = ["simulate", "--requests", "3", "--steps", "10", "--no-progress", *flags]
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith("workload     synthetic: 3 requests, seed 0\n")
    [sim] = made
    assert sim.o.worker_processes is (processes > 0)
    ports = sim.ports
    assert [p.rank for p in ports] == list(range(max(processes, 1)))
    if processes:
        assert all(isinstance(p, ProcessWorker) for p in ports)
        pids = {p.pid for p in ports if isinstance(p, ProcessWorker)}
        assert len(pids) == processes and os.getpid() not in pids and None not in pids
    else:
        assert [type(p) for p in ports] == [LocalWorker]
