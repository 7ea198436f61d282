"""Traces recorded from the Python machine are behaviours of tla/HiSparse.tla.

- at least 200 Hypothesis-generated traces (legal and refused actions mixed; only
  accepted actions are recorded) are validated by TLC in one batch and accepted;
- a trace recorded from the machine with an injected invariant bug, declared as
  such in its header, is rejected by TLC because of the same invariant the Python
  twin names: the Python bug and the TLA+ bug are the same defect;
- the same trace declared bug-free is rejected too (the spec does not allow it).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import settings

from hisparse.bugs import PROTOCOL_BUGS as BUGS  # the bugs of tla/HiSparse.tla
from hisparse.spec.record import machine_trace
from hisparse.spec.trace import read_trace, write_trace
from hisparse.tlc import TlcInstall
from hisparse.tracecheck.check import check_traces
from tests.protocol_helpers import make_machine
from tests.test_protocol_bugs import SCENARIOS
from tests.test_protocol_stateful import ProtocolStateful

pytestmark = pytest.mark.tlc
TRACES_NEEDED = 200


def _record(tmp_path: Path, examples: int, steps: int, ranks: int = 1,
            backing: str = "private") -> list[Path]:
    """Run the stateful protocol test with a recording machine; one trace file per run
    that took a step (each ends quiescent: teardown drains first)."""
    recorded: list[Path] = []

    class Recording(ProtocolStateful):
        RANKS = ranks
        BACKING = backing

        def __init__(self) -> None:
            super().__init__()
            self.m = make_machine(gpu_blocks=3, host_pool_bytes=9, record=True,
                                  ranks=ranks, backing=backing)

        def teardown(self) -> None:
            super().teardown()  # drains: the trace ends quiescent
            assert self.m.steps is not None
            if self.m.steps:
                path = tmp_path / f"t{len(recorded):04d}.jsonl"
                write_trace(path, machine_trace(self.m))
                recorded.append(path)

    Recording.TestCase.settings = settings(
        max_examples=examples, stateful_step_count=steps, deadline=None, database=None
    )
    Recording.TestCase().runTest()
    return recorded


def test_hypothesis_traces_are_accepted(tmp_path: Path, tlc: TlcInstall) -> None:
    recorded = _record(tmp_path, examples=400, steps=80)
    assert len(recorded) >= TRACES_NEEDED
    result = check_traces(recorded, install=tlc)
    bad = [v.line() for v in result.rejected]
    assert result.accepted and not bad, bad
    assert result.steps >= 10 * TRACES_NEEDED  # mean length of at least ten steps
    print(f"{len(recorded)} traces, {result.steps} steps, longest {result.longest}, TLC {result.tlc_seconds:.1f} s")


@pytest.mark.parametrize("backing", ["private", "shared"])
def test_two_rank_traces_are_accepted(tmp_path: Path, tlc: TlcInstall, backing: str) -> None:
    """Traces of two tensor-parallel ranks (every rank-indexed step names its rank)."""
    recorded = _record(tmp_path, examples=100, steps=60, ranks=2, backing=backing)
    assert len(recorded) >= 40
    ranked = {s.args.rank for p in recorded for s in read_trace(p).steps if hasattr(s.args, "rank")}
    assert ranked == {0, 1}  # both ranks took part
    result = check_traces(recorded, install=tlc)
    bad = [v.line() for v in result.rejected]
    assert result.accepted and not bad, bad
    print(f"{backing}: {len(recorded)} traces, {result.steps} steps, TLC {result.tlc_seconds:.1f} s")


INVARIANT_BUGS = [b for b in BUGS if b.kind == "invariant"]


@pytest.mark.parametrize("bug", INVARIANT_BUGS, ids=lambda b: b.name)
def test_buggy_machine_traces_are_rejected_by_the_same_invariant(
    tmp_path: Path, tlc: TlcInstall, bug: object
) -> None:
    from hisparse.bugs import InjectedBug
    from hisparse.spec.errors import InvariantViolation

    assert isinstance(bug, InjectedBug)
    import tests.protocol_helpers as helpers

    made: list[object] = []
    original = helpers.make_machine

    def recording(*args: object, **kw: object) -> object:
        m = original(*args, record=True, **kw)  # type: ignore[arg-type]
        made.append(m)
        return m

    import tests.test_protocol_bugs as scen

    scen.make_machine = recording  # type: ignore[assignment]
    try:
        with pytest.raises(InvariantViolation):
            SCENARIOS[bug.name](bug.name)
    finally:
        scen.make_machine = original
    (m,) = made
    trace = machine_trace(m)  # type: ignore[arg-type]
    declared = tmp_path / "declared.jsonl"
    write_trace(declared, trace)
    result = check_traces([declared], install=tlc, allow_bug=True)
    (verdict,) = result.files
    assert verdict.bug == bug.name
    assert verdict.verdict == "rejected"
    assert verdict.step == len(trace.steps), verdict.line()  # the step Python caught
    assert verdict.reason is not None
    if bug.name == "host_id_as_gpu_index":
        # JSON block IDs carry no type: the trace shows a GPU location, which no
        # successor of the spec (whose buggy entry holds a host block) matches
        assert "`loc`" in verdict.reason, verdict.line()
    else:
        assert f"invariant {bug.catches} " in verdict.reason, verdict.line()

    undeclared = tmp_path / "undeclared.jsonl"
    write_trace(
        undeclared,
        trace.model_copy(update={"header": trace.header.model_copy(update={"bug": "none"})}),
    )
    (verdict,) = check_traces([undeclared], install=tlc).files
    assert verdict.verdict == "rejected", verdict.line()


def long_universe(n: int) -> dict[str, tuple[str, ...]]:
    """n requests over a few shared prefixes, one to three pages each."""
    return {f"q{i}": tuple(f"p{i % 3}k{j}" for j in range(1 + i % 3)) for i in range(n)}


def test_long_random_walks_are_accepted(tmp_path: Path, tlc: TlcInstall) -> None:
    from tests.protocol_helpers import random_walk

    paths = []
    for seed in range(6):
        m = make_machine(
            gpu_blocks=4, host_pool_bytes=13, record=True, universe=long_universe(120)
        )
        random_walk(m, 600, seed)
        m.drain()
        path = tmp_path / f"walk{seed}.jsonl"
        write_trace(path, machine_trace(m))
        paths.append(path)
    result = check_traces(paths, install=tlc)
    assert result.accepted, [v.line() for v in result.rejected]
    assert result.longest >= 300
    print(f"{len(paths)} walks, {result.steps} steps, longest {result.longest}, "
          f"TLC {result.tlc_seconds:.1f} s")


def test_import_traces_are_accepted(tmp_path: Path, tlc: TlcInstall) -> None:
    """Random walks with P/D imports (both targets, failures, aborts, worker loss) mixed
    into the other actions, recorded and replayed by TLC (docs/pd-import.md)."""
    from tests.protocol_helpers import random_walk

    paths: list[Path] = []
    for seed in range(40):
        m = make_machine(gpu_blocks=2, host_pool_bytes=9, chunks=2, staging_slots=1,
                         record=True, imports={"i1": ("k1", "k2"), "i2": ("k2",)},
                         universe={"r1": ("k1",), "r2": ("k3",)})
        random_walk(m, 60, seed)
        m.drain()
        path = tmp_path / f"i{seed:03d}.jsonl"
        write_trace(path, machine_trace(m))
        paths.append(path)
    actions = {s.action for p in paths for s in read_trace(p).steps}
    assert {"AdmitImport", "MirrorPage", "CompleteImport", "FailImport", "ImportError"} <= actions
    result = check_traces(paths, install=tlc)
    bad = [v.line() for v in result.rejected]
    assert result.accepted and not bad, bad
