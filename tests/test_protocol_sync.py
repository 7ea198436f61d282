"""The Python machine, the protocol catalogue and tla/HiSparse.tla agree (actions,
arguments, writes, replay, lifecycle triggers, injected bugs), and name the same
invariants and properties; the lifecycle tables agree with the ``transitions`` machines
built from them. Deliberately inconsistent catalogues and spec texts show the check
has teeth."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any, cast

import pytest
from transitions import MachineError

from hisparse.bugs import PROTOCOL_BUGS as BUGS  # the bugs of tla/HiSparse.tla
from hisparse.spec import machine as machine_module
from hisparse.spec.catalogue import (
    ACTION_NAMES,
    CATALOGUE,
    VARIANTS,
    Action,
    NoArgs,
    disagreements,
)
from hisparse.spec.constants import ProtocolConfig
from hisparse.spec.errors import IllegalTransition
from hisparse.spec.invariants import IMPORT_CHECKS, INVARIANTS, PROPERTIES
from hisparse.spec.lifecycle import HOST_PAGE, LIFECYCLES, Lifecycle, mermaid_document
from hisparse.spec.machine import ProtocolMachine
from hisparse.spec.observe import ACTION_WRITES
from hisparse.spec.state import HostState
from tests.protocol_helpers import make_machine

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
        "E", "A", "Requests", "Pages", "HostBlocks", "GpuBlocks", "Ranks", "Transfers",
        "Chunks",
    }


def python_actions() -> set[str]:
    return {n for n in vars(ProtocolMachine) if n[:1].isupper() and callable(getattr(ProtocolMachine, n))}


def test_action_names_match() -> None:
    assert tla_actions() == python_actions() == set(ACTION_WRITES) == set(ACTION_NAMES)


def test_spec_machine_and_catalogue_agree() -> None:
    assert disagreements(SPEC, ProtocolMachine) == []


def _problems_with(catalogue: tuple[Action, ...] = CATALOGUE, spec: str = SPEC) -> str:
    found = disagreements(spec, ProtocolMachine, catalogue)
    assert found, "an inconsistent catalogue/spec pair passed the sync check"
    return "\n".join(found)


def _replace(name: str, **changes: Any) -> tuple[Action, ...]:
    return tuple(dataclasses.replace(a, **changes) if a.name == name else a for a in CATALOGUE)


def test_an_action_missing_from_the_spec_is_found() -> None:
    spec = SPEC.replace("        \\/ WorkerReport(w)\n", "")
    assert spec != SPEC
    assert "spec actions" in _problems_with(spec=spec)


def test_an_action_only_in_the_catalogue_is_found() -> None:
    extra = Action("Pause", NoArgs, "none", ("req",), "Pause")
    problems = _problems_with(catalogue=(*CATALOGUE, extra))
    assert "spec actions" in problems and "machine actions" in problems


def test_wrong_writes_are_found() -> None:
    assert "Retire: catalogue writes" in _problems_with(_replace("Retire", writes=("req", "loc")))
    retired = "    /\\ pg' = SetAt(pg, PagesOf(r), [p \\in PagesOf(r) |-> NoPg])\n"
    spec = SPEC.replace(
        retired + "    /\\ UNCHANGED <<loc, ", retired + "    /\\ UNCHANGED <<req, loc, "
    )
    assert spec != SPEC
    assert "Retire: catalogue writes" in _problems_with(spec=spec)


def test_a_wrong_replay_or_encoding_is_found() -> None:
    bad = _replace("StartSpill", replay="StartSpill(e.args.page)")
    assert "replay passes 1 arguments" in _problems_with(bad)
    bad = _replace("EvictHost", tla_args=(("block", "host"),))
    assert "EvictHost: replay reads" in _problems_with(bad)


def test_a_wrong_trigger_or_variant_is_found() -> None:
    bad = _replace("Finish", triggers=(("request", "finnish"),))
    assert "undeclared lifecycle trigger" in _problems_with(bad)
    bad = _replace("Finish", triggers=(("request", "finish"), ("request", "retire")))
    assert "the machine's Finish never fires 'retire'" in _problems_with(bad)
    retire = next(a for a in CATALOGUE if a.name == "Retire")
    moved = dataclasses.replace(retire.variants[0], step="_no_such_step")
    assert "no step _no_such_step" in _problems_with(
        _replace("Retire", variants=(moved, *retire.variants[1:]))
    )
    # a bug the spec tests in another action than the catalogue says
    evict = next(a for a in CATALOGUE if a.name == "EvictHost")
    bad = _replace("Retire", variants=(*retire.variants, evict.variants[0]))
    assert "does not test Bug for evict_keeps_index" in _problems_with(bad)
    assert "WorkerDrop: injected_only=False" in _problems_with(
        _replace("WorkerDrop", injected_only=False)
    )
    spec = SPEC.replace('"round_up_pool"', '"round_up_pool_renamed"')
    assert "spec bugs" in _problems_with(spec=spec)


def test_a_production_rule_naming_a_bug_is_found() -> None:
    class Branchy(ProtocolMachine):
        def _spill_capacity(self) -> int:
            return 0 if self.bug == "round_up_pool" else super()._spill_capacity()

    class Plain(ProtocolMachine):
        def _spill_capacity(self) -> int:
            return super()._spill_capacity()

    assert "production rules name injected bugs" in "\n".join(
        disagreements(SPEC, Branchy)
    )
    assert "production rules" not in "\n".join(disagreements(SPEC, Plain))


def test_invariant_names_match() -> None:
    without_imports = [i for i in INVARIANTS if i not in IMPORT_CHECKS]
    for model in ("small", "ci", "deep"):
        assert _cfg_names(TLA / f"MC_{model}.cfg", "INVARIANTS") == without_imports
    assert _cfg_names(TLA / "MC_pd.cfg", "INVARIANTS") == list(INVARIANTS)
    defined = set(re.findall(r"^(\w+) ==", SPEC, re.M))
    assert set(INVARIANTS) <= defined


def test_property_names_match() -> None:
    for model in ("small", "ci"):
        assert _cfg_names(TLA / f"MC_{model}_live.cfg", "PROPERTIES") == [
            p for p in PROPERTIES if p not in IMPORT_CHECKS
        ]
    assert set(_cfg_names(TLA / "MC_pd_live.cfg", "PROPERTIES")) == set(PROPERTIES)


def test_every_bug_is_in_the_spec_and_a_variant_of_the_machine() -> None:
    """Each bug is a registered variant: a machine whose config names it runs the
    variant's step; the production rules never name it."""

    where = Path(str(machine_module.__file__))  # (a compiled build: the .py beside the .so)
    machine_src = where.with_name(where.name.split(".")[0] + ".py").read_text()
    plain = make_machine()
    assert type(plain) is ProtocolMachine
    for bug in BUGS:
        assert f'"{bug.name}"' in SPEC, bug.name
        assert f'"{bug.name}"' not in machine_src, bug.name
        _, v = VARIANTS[bug.name]
        buggy = make_machine(bug.name)
        assert type(buggy).__bases__ == (ProtocolMachine,), bug.name  # its own subclass
        assert vars(type(buggy))[v.step] is v.impl, bug.name  # ... that holds the variant
        assert getattr(getattr(buggy, v.step), "__func__", None) is v.impl, bug.name
    assert set(re.findall(r'Bug [=#] "(\w+)"', SPEC)) == {b.name for b in BUGS}


def test_the_plain_class_refuses_a_config_that_names_a_bug() -> None:
    """``ProtocolMachine(config)`` would run the production rules under a bug's name:
    it is refused with the way to build the bug's machine; ``create`` builds it."""
    cfg = ProtocolConfig(gpu_blocks=3, host_pool_bytes=9, host_block_bytes=2,
                         bug="retire_inflight")
    with pytest.raises(ValueError, match=r"ProtocolMachine\.create"):
        ProtocolMachine(cfg)
    assert ProtocolMachine.create(cfg).injected == "retire_inflight"
    with pytest.raises(KeyError, match="unknown injected bug"):
        ProtocolMachine.create(cfg.model_copy(update={"bug": "no_such_bug"}))


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
                with pytest.raises(IllegalTransition) as err:
                    lc.next(state, trigger)
                # the refusal names the lifecycle, the state and the trigger, each in its
                # own field (errors.py:72:var:11 stored the state as the lifecycle)
                assert (err.value.machine, err.value.state, err.value.trigger) == \
                    (lc.name, state, trigger)
                assert str(err.value) == f"{lc.name}: no transition {trigger!r} from state {state!r}"
            else:
                assert lc.next(state, trigger) == expected


def test_lifecycle_doc_is_generated() -> None:
    doc = Path(__file__).resolve().parents[1] / "docs" / "lifecycles.md"
    assert doc.read_text() == mermaid_document() + "\n" or doc.read_text() == mermaid_document()


@pytest.mark.parametrize(("state", "trigger"), [("free", "publish"), ("free", "evict"),
                                                ("leased", "lease"), ("valid", "discard")])
def test_the_machine_fires_no_host_page_trigger_its_lifecycle_lacks(state: str,
                                                                   trigger: str) -> None:
    """The machine moves a host page only along HOST_PAGE's table; any other trigger
    raises and changes nothing, not even the in-use count (machine.py:256:bool:8 read a
    missing transition as a move to no state). Driven through the one helper every host
    transition goes through: the actions never fire an undeclared one."""
    m = make_machine()
    s = m.state
    s.host_state[0] = cast(HostState, state)
    s.host_used = sum(1 for x in s.host_state if x != "free")
    before = (list(s.host_state), s.host_used)
    with pytest.raises(IllegalTransition) as err:
        m._host_to(0, trigger)
    assert (err.value.machine, err.value.state, err.value.trigger) == \
        (HOST_PAGE.name, state, trigger)
    assert (list(s.host_state), s.host_used) == before
