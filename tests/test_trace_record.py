"""Recording only changes loses nothing: the changes rebuild every variable exactly.

A Hypothesis-driven recording machine (legal and refused actions mixed) is checked
after every recorded step: the initial state with every recorded change applied in
order equals the full encoding (``spec.observe.encode``) of the machine's state, for
all sixteen variables. Defaults (a request ``new``, a page with no location, a key
with no host copy) are the spec's Init values, which a retired request returns to.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from hypothesis import settings

from hisparse.spec.machine import ProtocolMachine
from hisparse.spec.observe import DELTA_VARS, ENCODERS, NESTED, RANKED, encode
from hisparse.spec.record import machine_trace
from hisparse.spec.state import ProtocolState
from hisparse.spec.trace import FORMAT, WRITES
from tests.protocol_helpers import make_machine
from tests.test_protocol_stateful import ProtocolStateful

JSON = dict[str, Any]


def _canon(var: str, value: Any) -> Any:
    """A full value with its Init-valued entries dropped (absent = Init value)."""
    if var == "req":
        return {r: s for r, s in value.items() if s != "new"}
    if var == "loc":
        return {tuple(p): w for p, w in value if w is not None}
    if var == "prefix":
        return {k: hs for k, hs in value.items() if hs}
    if var == "imp":
        return {r: x for r, x in value.items() if x != NO_IMP}
    if var == "pg":
        return {tuple(p): y for p, y in value if y != NO_PG}
    return value


NO_IMP: dict[str, Any] = {"target": "none", "phase": "none"}
NO_PG: dict[str, Any] = {"host": None, "landed": [], "staged": [], "slot": False}


def full_state(s: ProtocolState) -> JSON:
    return {v: _canon(v, encode(s, v)) for v in ENCODERS}


def apply(state: JSON, post: JSON) -> None:
    """Apply one recorded step's changes to a canonical full state."""
    for var, change in post.items():
        if var not in DELTA_VARS:
            state[var] = copy.deepcopy(change)
        elif var == "loc":
            for p, w in change:
                state["loc"][tuple(p)] = w
            state["loc"] = {p: w for p, w in state["loc"].items() if w is not None}
        elif var in ("req", "prefix", "imp"):
            state[var] = _canon(var, {**state[var], **change})
        elif var == "pg":
            merged = {**state["pg"], **{tuple(p): y for p, y in change}}
            state["pg"] = {p: y for p, y in merged.items() if y != NO_PG}
        elif var in NESTED:  # per changed rank, its changed host blocks
            for w, entries in change.items():
                for i, value in entries.items():
                    state[var][w][i] = value
        elif var in RANKED:  # per changed rank, its whole value
            for w, value in change.items():
                state[var][w] = copy.deepcopy(value)
        else:
            for i, value in change.items():
                state[var][i] = value


class StepChecked(ProtocolMachine):
    """Calls ``on_step`` after each recorded step (a subclass, not a patched instance:
    the compiled build's machine has no instance dictionary)."""

    on_step: Callable[[ProtocolMachine], None]

    def _done(self, action: str, args: dict[str, Any]) -> None:
        super()._done(action, args)
        self.on_step(self)


class RecordingRebuilds(ProtocolStateful):
    def __init__(self) -> None:
        super().__init__()
        m = make_machine(gpu_blocks=3, host_pool_bytes=9, record=True, machine_class=StepChecked)
        assert isinstance(m, StepChecked)

        def on_step(seen: ProtocolMachine) -> None:  # (a function: deepcopy shares it)
            if seen is m:  # not a copy that legal_moves probes an action on
                self.check_step(seen)

        m.on_step = on_step
        self.m = m
        self.rebuilt = full_state(m.state)
        self.checked = 0

    def check_step(self, m: ProtocolMachine) -> None:
        assert m.steps is not None
        action, _, post = m.steps[-1]
        assert WRITES[action] <= set(post), f"{action} omitted a written variable"
        apply(self.rebuilt, post)
        self.checked += 1
        assert self.rebuilt == full_state(m.state), f"step {len(m.steps)} ({action})"

    def teardown(self) -> None:
        super().teardown()
        assert self.m.steps is not None
        assert self.checked == len(self.m.steps)
        if self.m.steps:  # the public trace validates and keeps the changes as recorded
            trace = machine_trace(self.m)
            assert trace.header.format == FORMAT
            assert len(trace.steps) == len(self.m.steps)


RecordingRebuilds.TestCase.settings = settings(
    max_examples=150, stateful_step_count=60, deadline=None, database=None
)
TestRecordingRebuilds = RecordingRebuilds.TestCase


def test_a_step_records_only_its_changes() -> None:
    m = make_machine(gpu_blocks=3, host_pool_bytes=9, record=True, universe={"r0": ("a", "b")})
    m.Arrive("r0")
    assert m.steps is not None
    action, _, post = m.steps[-1]
    assert action == "Arrive"
    # two pages arrive on two of three GPU blocks: two entries each, not three
    assert len(post["gpuOwner"]) == len(post["gpuData"]) == 2
    assert post["req"] == {"r0": "running"}
    assert sorted(p for p, _ in post["loc"]) == [["r0", 1], ["r0", 2]]
