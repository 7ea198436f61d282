"""Rule: every trace a recording machine writes, the reader accepts and reads back equal,
with one rank and with tensor-parallel ranks, private host pools or one shared pool
whose writer is any rank.

The reader's per-step check (``spec/trace.py`` ``step_problem``) must not refuse what
the machine can do: a shared pool's ``hostData`` is the writer's (a reader that took
no rank for the writer's pool, mutant ``arith``, refused every copy into it). Checked
at the end of every run the protocol's stateful tests make, on the written file.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import settings

from hisparse.spec.record import machine_trace
from hisparse.spec.trace import read_trace, write_trace
from tests.protocol_helpers import make_machine
from tests.test_protocol_stateful import GPU, HOST, ProtocolStateful


class _ReadsBack(ProtocolStateful):
    WRITER = 0

    def __init__(self) -> None:
        super().__init__()
        self.m = make_machine(gpu_blocks=GPU, host_pool_bytes=2 * HOST + 1, ranks=self.RANKS,
                              backing=self.BACKING, writer=self.WRITER, record=True)

    def teardown(self) -> None:
        super().teardown()  # (drained: the copies have landed, hostData written)
        trace = machine_trace(self.m)
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "run.jsonl"
            write_trace(path, trace)
            assert read_trace(path) == trace


class ReadsBackPrivate(_ReadsBack):
    pass


class ReadsBackTwoRanks(_ReadsBack):
    RANKS = 2


class ReadsBackSharedWriter1(_ReadsBack):
    RANKS = 2
    BACKING = "shared"
    WRITER = 1


for _case in (ReadsBackPrivate, ReadsBackTwoRanks, ReadsBackSharedWriter1):
    _case.TestCase.settings = settings(max_examples=25, stateful_step_count=40,
                                       deadline=None, database=None)
TestReadsBackPrivate = ReadsBackPrivate.TestCase
TestReadsBackTwoRanks = ReadsBackTwoRanks.TestCase
TestReadsBackSharedWriter1 = ReadsBackSharedWriter1.TestCase


def test_a_shared_pool_copy_is_recorded_and_read_back(tmp_path: Path) -> None:
    # the property above is not vacuous: a shared run's trace carries hostData
    m = make_machine(ranks=2, backing="shared", writer=1, record=True)
    m.Arrive("r0")
    m.StartSpill(("r0", 1), 0)
    m.drain()
    assert m.steps is not None
    assert any("hostData" in post for _, _, post in m.steps)
    trace = machine_trace(m)
    write_trace(tmp_path / "t.jsonl", trace)
    assert read_trace(tmp_path / "t.jsonl") == trace
