"""Rule: a tensor-parallel run asked for a trace writes rank 0's protocol trace, every
step of it (``hisparse/tp/run.py``). Found by the whole mutation run (docs/mutation-run7):
only the TLC-marked test wrote a trace, so no test of the non-TLC suite ran
``write_trace`` (``tp/run.py:542:call:42``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from hisparse.spec.trace import read_trace
from hisparse.tp.launch import launch
from hisparse.tp.run import TpOptions

SMALL = TpOptions(executor="reference", ranks=2, requests=8, steps=30, seed=3)


def test_a_run_asked_for_a_trace_writes_every_step_of_rank_0s_protocol(tmp_path: Path) -> None:
    path = tmp_path / "tp.jsonl"
    reports = launch(replace(SMALL, trace=str(path)), timeout_s=120)
    coord = reports[0]["coordinator"]
    trace = read_trace(path)
    assert trace.header.ranks == 2
    assert len(trace.steps) == coord["trace_steps"] > coord["steps_checked"] > 0
    assert [s.index for s in trace.steps] == list(range(1, len(trace.steps) + 1))
    assert "trace_steps" not in reports[1].get("coordinator", {})  # rank 0 alone records

