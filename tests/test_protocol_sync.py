"""The Python machine and tla/HiSparse.tla name the same actions, invariants and
properties; the lifecycle tables agree with the ``transitions`` machines built from them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from transitions import MachineError

from hisparse.bugs import BUGS
from hisparse.spec.errors import IllegalTransition
from hisparse.spec.invariants import INVARIANTS, PROPERTIES
from hisparse.spec.lifecycle import LIFECYCLES, Lifecycle, mermaid_document
from hisparse.spec.machine import ProtocolMachine
from hisparse.spec.observe import ACTION_WRITES

TLA = Path(__file__).resolve().parents[1] / "tla"
SPEC = (TLA / "HiSparse.tla").read_text()


def _definition(name: str) -> str:
    """The body of a top-level TLA+ definition, up to the next blank line."""
    m = re.search(rf"^{name} ==\n(.*?)(?:\n\n|\Z)", SPEC, re.S | re.M)
    assert m, f"{name} not defined in HiSparse.tla"
    return m.group(1)


def _cfg_names(path: Path, section: str) -> list[str]:
    text = path.read_text()
    m = re.search(rf"^{section}\n((?:\s+\w+\n?)+)", text, re.M)
    assert m, f"no {section} in {path.name}"
    return m.group(1).split()


def tla_actions() -> set[str]:
    body = _definition("SchedulerNext") + _definition("WorkerNext")
    return set(re.findall(r"\b([A-Z][A-Za-z]+)\b(?!\s*==)", body)) - {
        "E", "A", "Requests", "Pages", "HostBlocks", "GpuBlocks",
    }


def python_actions() -> set[str]:
    return {n for n in vars(ProtocolMachine) if n[:1].isupper() and callable(getattr(ProtocolMachine, n))}


def test_action_names_match() -> None:
    assert tla_actions() == python_actions() == set(ACTION_WRITES)


def test_invariant_names_match() -> None:
    for model in ("small", "ci", "deep"):
        assert _cfg_names(TLA / f"MC_{model}.cfg", "INVARIANTS") == list(INVARIANTS)
    defined = set(re.findall(r"^(\w+) ==", SPEC, re.M))
    assert set(INVARIANTS) <= defined


def test_property_names_match() -> None:
    for model in ("small", "ci"):
        assert _cfg_names(TLA / f"MC_{model}_live.cfg", "PROPERTIES") == list(PROPERTIES)


def test_every_bug_is_in_the_spec_and_the_machine() -> None:
    machine_src = (Path(__file__).resolve().parents[1] / "spec" / "machine.py").read_text()
    for bug in BUGS:
        assert f'"{bug.name}"' in SPEC, bug.name
        assert f'"{bug.name}"' in machine_src, bug.name
    assert set(re.findall(r'Bug [=#] "(\w+)"', SPEC)) == {b.name for b in BUGS}


@pytest.mark.parametrize("lc", LIFECYCLES, ids=lambda lc: lc.name)
def test_compiled_table_agrees_with_transitions(lc: Lifecycle) -> None:
    triggers = {t for t, _, _ in lc.rows}
    for state in lc.states:
        for trigger in triggers:

            class Model:
                pass

            model = Model()
            lc.machine(model)
            model.state = state  # type: ignore[attr-defined]
            try:
                getattr(model, trigger)()
                expected: str | None = model.state  # type: ignore[attr-defined]
            except MachineError:
                expected = None
            if expected is None:
                with pytest.raises(IllegalTransition):
                    lc.next(state, trigger)
            else:
                assert lc.next(state, trigger) == expected


def test_lifecycle_doc_is_generated() -> None:
    doc = Path(__file__).resolve().parents[1] / "docs" / "lifecycles.md"
    assert doc.read_text() == mermaid_document() + "\n" or doc.read_text() == mermaid_document()
