"""The golden trace encodings of ``tests/data/trace_golden/`` and how they are made.

Each case is a recorded trace (``<name>.jsonl``, as ``write_trace`` writes it) and the
replay module and cfg ``hisparse.tracecheck`` generates for it (``<name>.tla``,
``<name>.cfg``). ``tests/test_trace_encoding_rules.py`` checks that today's generator
writes exactly the stored text (no TLC); ``tests/test_trace_golden_tlc.py`` model-checks
the stored text (TLC): a golden file is the encoding TLC checked, not a snapshot.

Regenerate (after an intended change of the encoding, then run both test files)::

    python -m tests.trace_golden --regenerate

The tests never regenerate; they only read.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hisparse.spec.machine import ProtocolMachine
from hisparse.spec.trace import Trace, read_trace
from hisparse.tlc import cfg as cfgfile
from hisparse.tlc.paths import tla_dir
from hisparse.tracecheck import module as gen
from hisparse.tracecheck.check import INVARIANTS_FROM
from hisparse.tracecheck.ints import Ids
from hisparse.tracecheck.window import States

GOLDEN = Path(__file__).parent / "data" / "trace_golden"

# The window case: steps WINDOW_LO+1 .. WINDOW_HI of the shared trace, started from the
# recorded state after step WINDOW_LO and required to end on the one after WINDOW_HI.
WINDOW_OF = "shared"
WINDOW_LO, WINDOW_HI = 12, 24

# The bug case: the scenario's injected bug and the invariant TLC must name.
BUG = "double_allocation"
BUG_CATCHES = "NoDoubleOwnership"


@dataclass(frozen=True)
class Case:
    """One golden case: its trace file, and whether TLC must accept its module."""

    name: str
    accepted: bool
    trace_name: str  # the trace file it is generated from (the window's: the shared one)

    @property
    def trace_path(self) -> Path:
        return GOLDEN / f"{self.trace_name}.jsonl"

    @property
    def module_path(self) -> Path:
        return GOLDEN / f"{self.name}.tla"

    @property
    def cfg_path(self) -> Path:
        return GOLDEN / f"{self.name}.cfg"


CASES = (
    Case("shared", True, "shared"),
    Case("imports", True, "imports"),
    Case("window", True, WINDOW_OF),
    Case("bug", False, "bug"),
)


def invariants() -> list[str]:
    """The spec invariants a replay checks (those ``check_traces`` reads from MC_pd.cfg)."""
    return cfgfile.invariants((tla_dir() / INVARIANTS_FROM).read_text())


def window_part(trace: Trace) -> tuple[Trace, States, States]:
    """The window case's steps, and the recorded states at its two cuts."""
    ids = Ids(trace.header)
    first, last = States(trace.header, ids), States(trace.header, ids)
    for step in trace.steps[:WINDOW_LO]:
        first.apply(step)
    for step in trace.steps[:WINDOW_HI]:
        last.apply(step)
    return Trace(header=trace.header, steps=trace.steps[WINDOW_LO:WINDOW_HI]), first, last


def generate(case: Case) -> tuple[str, str]:
    """Today's module and cfg text for ``case`` (from its stored trace file)."""
    trace = read_trace(case.trace_path)
    if case.name == "window":
        part, first, last = window_part(trace)
        text = gen.module_text(
            [part], start=first.state("TrFirst"), end=last.state("TrLast")
        )
        return text, gen.cfg_text(invariants(), handoff=True)
    return gen.module_text([trace]), gen.cfg_text(invariants())


# --- recording (regeneration only) -----------------------------------------------------


def _shared() -> ProtocolMachine:
    """Two ranks over one shared host pool (rank 1 copies): two pages spilled through
    both ranks' acks, a prefix hit on both host copies, then a seeded walk."""
    from tests.protocol_helpers import full_spill, make_machine, random_walk

    m = make_machine(
        gpu_blocks=3, host_pool_bytes=9, ranks=2, backing="shared", writer=1, record=True,
        universe={"a": ("k1", "k2"), "b": ("k1", "k2", "k3"), "c": ("k4",)},
    )
    m.Arrive("a")
    full_spill(m, ("a", 1), 0)
    full_spill(m, ("a", 2), 2)
    m.Finish("a")
    m.Arrive("b")  # k1, k2 from host blocks 0 and 2, k3 on a GPU block
    random_walk(m, 14, seed=3)
    m.drain()
    return m


def _imports() -> ProtocolMachine:
    """P/D imports (chunks, a staging slot, both targets) among ordinary requests."""
    from tests.protocol_helpers import import_walk

    last: ProtocolMachine | None = None
    for m in import_walk(seed=IMPORT_SEED, steps=45, gpu_blocks=2, host_pool_bytes=9,
                         chunks=2, staging_slots=1):
        last = m
    assert last is not None
    last.drain()
    return last


IMPORT_SEED = 3


def _bug() -> ProtocolMachine:
    """The scenario of ``BUG`` (tests/test_protocol_bugs.py), recorded up to the step its
    Python twin catches; the header declares the bug."""
    import tests.test_protocol_bugs as scenarios
    from hisparse.spec.errors import InvariantViolation
    from tests.protocol_helpers import make_machine

    made: list[ProtocolMachine] = []

    def recording(*args: Any, **kw: Any) -> ProtocolMachine:
        m = make_machine(*args, record=True, **kw)
        made.append(m)
        return m

    with _patched(scenarios, "make_machine", recording):
        try:
            scenarios.SCENARIOS[BUG](BUG)
        except InvariantViolation as exc:
            assert exc.name == BUG_CATCHES, exc
        else:
            raise AssertionError(f"{BUG}'s scenario broke no invariant")
    (m,) = made
    return m


@contextmanager
def _patched(obj: object, name: str, value: object) -> Iterator[None]:
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


RECORDERS: dict[str, Callable[[], ProtocolMachine]] = {
    "shared": _shared, "imports": _imports, "bug": _bug,
}


def regenerate() -> None:
    """Record every trace again, then write each case's module and cfg."""
    from hisparse.spec.record import machine_trace
    from hisparse.spec.trace import write_trace

    GOLDEN.mkdir(parents=True, exist_ok=True)
    for name, record in RECORDERS.items():
        write_trace(GOLDEN / f"{name}.jsonl", machine_trace(record()))
    for case in CASES:
        module, cfg = generate(case)
        case.module_path.write_text(module)
        case.cfg_path.write_text(cfg)
        print(f"{case.name}: {len(read_trace(case.trace_path).steps)} steps, "
              f"module {len(module)} chars")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--regenerate", action="store_true", help="rewrite the golden files")
    args = parser.parse_args(argv)
    if not args.regenerate:
        parser.print_help()
        return 2
    regenerate()
    return 0


if __name__ == "__main__":
    sys.exit(main())
