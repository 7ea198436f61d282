"""Rule: the sync check (``spec/catalogue.py`` ``disagreements``) reports each defect on
its own line, under the name of what is wrong, and nothing else.

``tests/test_protocol_sync.py`` looks for a phrase anywhere in the joined report; a
check that files its finding in the list of bug names instead of the report (mutants
``var``: ``out.append`` -> ``bugs.append``) still shows the phrase, inside the "spec
bugs ... != catalogue variants ..." line it causes. Here one defect at a time must give
exactly the lines that name it. Also: a spec bug without a catalogue variant is found
(not only the reverse), a spec whose ``vars`` tuple differs is found, a catalogue action
may write every variable without being told it names unknown ones, and the source
reader's fallback for a compiled build (no source for ``inspect``) reads the right
class and method.
"""

from __future__ import annotations

import dataclasses
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from hisparse.spec import catalogue
from hisparse.spec.catalogue import CATALOGUE, VARIABLES, Action, disagreements
from hisparse.spec.machine import ProtocolMachine
from tests.protocol_helpers import make_machine

SPEC = (Path(__file__).resolve().parents[1] / "tla" / "HiSparse.tla").read_text()


def _replace(name: str, **changes: Any) -> tuple[Action, ...]:
    return tuple(dataclasses.replace(a, **changes) if a.name == name else a for a in CATALOGUE)


def _action(name: str) -> Action:
    return next(a for a in CATALOGUE if a.name == name)


def test_the_unchanged_pair_agrees() -> None:
    assert disagreements(SPEC, ProtocolMachine) == []


def _retire_without_a_step() -> tuple[Action, ...]:
    retire = _action("Retire")
    moved = dataclasses.replace(retire.variants[0], step="_no_such_step")
    return _replace("Retire", variants=(moved, *retire.variants[1:]))


# (a catalogue with one defect, the start of every line it must give, a phrase in one)
ONE_DEFECT: dict[str, tuple[tuple[Action, ...], str, str]] = {
    "replay names no definition": (
        _replace("Finish", replay="NoSuchOperator(e.args.request)"),
        "Finish: ", "Finish: replay 'NoSuchOperator(e.args.request)' names no spec definition",
    ),
    "replay arity": (
        _replace("Finish", replay="Finish(e.args.request, e.args.request)"),
        "Finish: ", "Finish: replay passes 2 arguments to Finish",
    ),
    "undeclared trigger": (
        _replace("Finish", triggers=(("request", "finnish"),)),
        "", "Finish: fires undeclared lifecycle trigger ('request', 'finnish')",
    ),
    "trigger never fired": (
        _replace("Finish", triggers=(("request", "finish"), ("request", "retire"))),
        "Finish: ", "Finish: the machine's Finish never fires 'retire'",
    ),
    # a trigger that no action fires any more (spec/catalogue.py:674:collection:0 only
    # reported triggers fired beyond the declared ones)
    "trigger fired by no action": (
        _replace("Finish", triggers=()), "lifecycle triggers no action fires: ",
        "lifecycle triggers no action fires: [('request', 'finish')]",
    ),
    "variant without a step": (
        _retire_without_a_step(), "retire_inflight: ",
        "retire_inflight: machine has no step _no_such_step",
    ),
}


@pytest.mark.parametrize("case", sorted(ONE_DEFECT))
def test_one_defect_gives_exactly_its_own_lines(case: str) -> None:
    cat, prefix, line = ONE_DEFECT[case]
    found = disagreements(SPEC, ProtocolMachine, cat)
    assert line in found, found
    assert all(f.startswith(prefix) for f in found), found
    assert not any(f.startswith("spec bugs") for f in found), found


def test_an_undeclared_trigger_is_one_line_and_no_bug_mismatch() -> None:
    # the undeclared trigger also leaves "finish" unfired: exactly those two lines
    cat, _, line = ONE_DEFECT["undeclared trigger"]
    found = disagreements(SPEC, ProtocolMachine, cat)
    assert found == [line, "lifecycle triggers no action fires: [('request', 'finish')]"]


def test_a_production_rule_naming_a_bug_is_its_own_line() -> None:
    class Branchy(ProtocolMachine):
        def _spill_capacity(self) -> int:
            return 0 if self.bug == "round_up_pool" else super()._spill_capacity()

    found = disagreements(SPEC, Branchy)  # (a subclass declares no actions of its own)
    line = "production rules name injected bugs ['round_up_pool']: register them as variants"
    assert line in found, found
    assert not any(f.startswith("spec bugs") for f in found), found


def test_a_spec_bug_without_a_variant_is_found() -> None:
    # evict_keeps_index writes nothing beyond EvictHost's own writes: dropping it from
    # the catalogue leaves the spec's bug unregistered and changes nothing else
    evict = _action("EvictHost")
    kept = tuple(v for v in evict.variants if v.bug != "evict_keeps_index")
    found = disagreements(SPEC, ProtocolMachine, _replace("EvictHost", variants=kept))
    assert len(found) == 1 and found[0].startswith("spec bugs "), found
    assert "evict_keeps_index" in found[0]


def test_a_spec_with_other_variables_is_found() -> None:
    old = "vars == <<req, "
    assert old in SPEC
    spec = SPEC.replace(old, "vars == <<extra, req, ", 1)
    found = disagreements(spec, ProtocolMachine)
    assert any(f.startswith("spec variables ('extra', 'req'") for f in found), found


def test_writing_every_variable_is_not_an_unknown_variable() -> None:
    found = disagreements(SPEC, ProtocolMachine, _replace("Retire", writes=VARIABLES))
    assert any(f.startswith("Retire: catalogue writes") for f in found), found
    assert not any("unknown variables" in f for f in found), found
    found = disagreements(SPEC, ProtocolMachine, _replace("Retire", writes=("req", "nope")))
    assert "Retire: writes name unknown variables" in found


def _text_block(lines: list[str], head: str, indent: int) -> str:
    """The lines from the one starting ``head`` (at ``indent``) to the next statement at
    that indent or less, less trailing blanks, comments and decorators: the oracle of
    ``_source``, by line reading rather than by ``ast`` (a compiled build has no
    ``inspect`` source to compare with)."""
    start = next(i for i, line in enumerate(lines) if line.startswith(" " * indent + head))
    end = next((i for i in range(start + 1, len(lines))
                if lines[i].strip() and len(lines[i]) - len(lines[i].lstrip()) <= indent),
               len(lines))
    block = lines[start:end]
    while block and (not block[-1].strip() or block[-1].lstrip().startswith(("#", "@"))):
        block.pop()
    return "\n".join(block)


def test_the_source_fallback_reads_the_named_class_and_method(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A compiled build gives ``inspect`` no source: ``_source`` reads the ``.py``."""
    where = Path(str(sys.modules[ProtocolMachine.__module__].__file__))
    lines = where.with_name("machine.py").read_text().splitlines()
    cls_real = _text_block(lines, "class ProtocolMachine", 0)
    method_real = _text_block(lines, "def Retire(", 4)

    def no_source(obj: object) -> str:
        raise OSError("no source (as for native code)")

    monkeypatch.setattr(catalogue.inspect, "getsource", no_source)
    cls_read = catalogue._source(ProtocolMachine)
    assert cls_read.startswith("class ProtocolMachine")
    assert cls_read.rstrip() == cls_real.rstrip()
    method_read = catalogue._source(ProtocolMachine.Retire)
    assert method_read.startswith("def Retire(")
    assert method_read.strip() == method_real.strip()


def test_a_class_with_no_source_anywhere_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    """No ``inspect`` source and no ``.py`` beside the module's file: one ``OSError``
    naming the class (the sync check's message), never the file system's own error.
    (From the sampled whole-suite run's survivor ``spec/catalogue.py:573:reorder:0``:
    the file was read before its existence was checked.)"""
    module = types.ModuleType("hisparse_native_only")
    module.__file__ = str(tmp_path / "hisparse_native_only.cpython-311-x86_64-linux-gnu.so")
    exec("class Native:\n    pass\n", module.__dict__)  # a class defined from no file
    monkeypatch.setitem(sys.modules, module.__name__, module)
    native = module.Native
    with pytest.raises(OSError) as err:
        catalogue._source(native)
    assert type(err.value) is OSError
    assert str(err.value) == f"no source for {native!r}"


def test_a_catalogue_entry_that_writes_too_little_is_found() -> None:
    # fewer writes than the spec's is a disagreement too, not only more
    # (catalogue.py:651:collection:1 weakened the equality to a subset test)
    retire = _action("Retire")
    fewer = tuple(sorted(retire.writes))[1:]
    found = disagreements(SPEC, ProtocolMachine, _replace("Retire", writes=fewer))
    assert any(f.startswith("Retire: catalogue writes") for f in found), found


def test_a_class_missing_from_its_modules_source_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    """``inspect`` finds no source and the ``.py`` beside the module does not define the
    class: one ``OSError`` naming the class and the file (catalogue.py:581:raise:0: no
    test asked for one)."""
    py = tmp_path / "hisparse_moved.py"
    py.write_text("class Other:\n    pass\n")
    module = types.ModuleType("hisparse_moved")
    module.__file__ = str(py)
    exec("class Moved:\n    pass\n", module.__dict__)  # defined from no file
    monkeypatch.setitem(sys.modules, module.__name__, module)
    moved = module.Moved
    with pytest.raises(OSError) as err:
        catalogue._source(moved)
    assert str(err.value) == f"no source for {moved!r} in {py}"


def test_the_method_reach_takes_each_method_once() -> None:
    # a diamond of calls: d is reached twice and read once (catalogue.py:591:bool:3 read a
    # method again each time it was reached, and would loop on a cycle)
    class Diamond:
        def a(self) -> None:
            self.b()
            self.c()

        def b(self) -> None:
            self.d()

        def c(self) -> None:
            self.d()

        def d(self) -> None:
            self.steps = 1  # an attribute, not a method: not followed

    text = catalogue._method_reach(Diamond, "a")
    assert [line.strip() for line in text.splitlines() if line.strip().startswith("def ")] == \
        ["def a(self) -> None:", "def c(self) -> None:", "def d(self) -> None:",
         "def b(self) -> None:"]


def test_a_command_still_on_its_way_is_not_replayable() -> None:
    """Replayable(w): an open transfer's command once it left rank w's channel, never
    while it is still on its way (catalogue.py:470:bool:5 offered both)."""
    m = make_machine()
    m.Arrive("r0")
    src = m.state.loc[("r0", 1)]
    assert src is not None
    tid = m.StartSpill(("r0", 1), 1)
    s = m.state
    assert tid in s.down[0] and (src[1], 1) not in catalogue.replayable(s, 0)
    m.WorkerEnqueue(tid, 0)  # the worker took it: a replay of it can now arrive
    assert tid not in s.down[0] and (src[1], 1) in catalogue.replayable(s, 0)


def test_an_action_listed_twice_is_named() -> None:
    twice = (*CATALOGUE, _action("Finish"))
    found = disagreements(SPEC, ProtocolMachine, twice)
    assert found[0].startswith("catalogue names an action twice: ['Arrive'"), found


def test_an_argument_model_that_differs_from_the_encoding_is_named() -> None:
    # (catalogue.py:644:var:19 filed it with the bug mismatches instead)
    finish = _action("Finish")
    other = _action("StartSpill").args  # page and host block, not a request
    found = disagreements(SPEC, ProtocolMachine, _replace("Finish", args=other))
    assert any(f.startswith("Finish: argument model ") and "!= encoded fields ['request']" in f
               for f in found), found
    assert not any(f.startswith("spec bugs") for f in found), found
    assert finish.args is not other
