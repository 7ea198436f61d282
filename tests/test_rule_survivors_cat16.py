"""Catalogue rules met by the whole mutation run's sixteenth pass
(docs/mutation-survivors.md): the catalogue declares every lifecycle trigger that its
action's machine method fires, not only triggers that some action fires.

``disagreements`` checks that each declared trigger is fired by its method and that
every trigger is fired by some action; ``spec/catalogue.py:166:drop:43`` and ``44``
dropped ConsumeMeta's and WorkerLoss's host-page triggers, and passed, because the
P/D import actions still declare them. Trigger names are unique across lifecycles, so
a trigger's name quoted in a method's reach is that trigger."""

from __future__ import annotations

import dataclasses

import pytest

from hisparse.spec.catalogue import CATALOGUE, Action, _method_reach
from hisparse.spec.lifecycle import LIFECYCLES
from hisparse.spec.machine import ProtocolMachine

TRIGGERS = {(lc.name, t) for lc in LIFECYCLES for t, _, _ in lc.rows}


def undeclared(catalogue: tuple[Action, ...]) -> list[str]:
    """Each trigger an action's machine method (and what it calls) fires that the
    action does not declare."""
    out = []
    for a in catalogue:
        body = _method_reach(ProtocolMachine, a.name)
        for lc, t in sorted(TRIGGERS):
            if f'"{t}"' in body and (lc, t) not in a.triggers:
                out.append(f"{a.name} fires {lc} {t!r}, undeclared")
    return out


def test_trigger_names_are_unique_across_lifecycles() -> None:
    names = [t for _, t in TRIGGERS]
    assert len(names) == len(set(names))


def test_every_action_declares_each_trigger_its_method_fires() -> None:
    assert all(hasattr(ProtocolMachine, a.name) for a in CATALOGUE)
    assert undeclared(CATALOGUE) == []


@pytest.mark.parametrize("name", [a.name for a in CATALOGUE if a.triggers])
def test_a_trigger_left_out_of_an_action_is_named(name: str) -> None:
    # the check can fail: each action that fires a trigger, with its last one left out
    i = next(i for i, a in enumerate(CATALOGUE) if a.name == name)
    a = CATALOGUE[i]
    lc, t = a.triggers[-1]
    less = dataclasses.replace(a, triggers=a.triggers[:-1])
    assert undeclared((*CATALOGUE[:i], less, *CATALOGUE[i + 1:])) == [
        f"{name} fires {lc} {t!r}, undeclared"]
