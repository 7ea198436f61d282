"""Rule: an action is taken exactly when its enabling condition holds.

The drivers' oracle guards (``tests/protocol_helpers.GUARDS``, stated from
``tla/HiSparse.tla`` without asking the machine) are checked in the direction the
stateful tests leave open: in every state the protocol's stateful tests reach (one rank,
two ranks with private pools or one shared pool, and one rank with P/D imports), every
argument tuple of every catalogue action's domain whose guard does not hold is refused,
typed; and every argument just outside a domain (rank -1 and one past the last, host
block -1 and one past the last, chunk 0 and one past the last, page 0 and one past a
request's last, an unknown request) is refused too, a bad rank as ``UnknownRank``; and
all those refusals together leave the state as it was. (The other direction, a guarded
move accepted, is the ``legal`` rule every step.)
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import hypothesis.strategies as st
from hypothesis import Phase, settings
from hypothesis.stateful import invariant, rule

from hisparse.spec.catalogue import CATALOGUE, Domain, arguments
from hisparse.spec.errors import ActionNotEnabled, UnknownRank, UnknownTransfer
from hisparse.spec.machine import ProtocolMachine
from tests.protocol_helpers import (
    GUARDS,
    IMPORT_GUARDS,
    WALK_IMPORTS,
    import_walk,
    make_machine,
)
from tests.test_protocol_stateful import GPU, HOST, ProtocolStateful

REFUSED = (ActionNotEnabled, UnknownTransfer, UnknownRank)
IMPORT_ACTIONS = set(IMPORT_GUARDS)


def refusal(m: ProtocolMachine, action: str, args: tuple[Any, ...]) -> BaseException | None:
    """The typed refusal of ``action(*args)``; None where the machine took it."""
    try:
        getattr(m, action)(*args)
    except REFUSED as e:
        return e
    return None


def outside(m: ProtocolMachine, domain: Domain, ranked: bool) -> list[tuple[Any, ...]]:
    """Argument tuples just outside ``domain`` (each with a valid rank where ranked), and
    for a ranked action the domain's first tuple at a rank just outside."""
    s = m.state
    hosts, chunks = s.config.host_blocks, s.config.chunks
    pages: list[tuple[str, int]] = [("zz", 1)]  # an unknown request's
    for r, keys in list(s.page_keys.items())[:1]:
        pages += [(r, 0), (r, len(keys) + 1)]
    known = next(iter(s.loc), None)  # a page inside, for the other argument
    table: dict[str, list[tuple[Any, ...]]] = {
        "request": [("zz",)],
        "host_block": [(-1,), (hosts,)],
        "page": [(p,) for p in pages],
        "page_host": [(p, 0) for p in pages] + ([(known, -1), (known, hosts)] if known else []),
        "page_chunk": [(p, 1) for p in pages] + ([(known, 0), (known, chunks + 1)] if known
                                                  else []),
        "transfer": [(10**6,)],
        "replay": [],
        "none": [],
    }
    bad = table[domain]
    if not ranked:
        return bad
    inside = arguments(s, domain) if domain not in ("transfer", "replay") else [
        a[:-1] for a in arguments(s, domain, ranked=True)]
    some = [()] if domain == "none" else inside[:1]
    return [(*a, 0) for a in bad] + [(*a, w) for a in some for w in (-1, s.config.ranks)]


def check_enabled_exactly(m: ProtocolMachine, seen: Counter[tuple[str, bool]]) -> None:
    """The rule in one state of ``m`` (``seen`` counts each action's guard outcomes);
    every refusal tried leaves the state as it was."""
    before = m.state.clone()
    for action in CATALOGUE:
        guard = GUARDS[action.name]
        for args in arguments(m.state, action.domain, action.ranked):
            held = bool(guard(m, *args))
            seen[action.name, held] += 1
            if not held:
                assert refusal(m, action.name, args) is not None, (
                    f"{action.name}{args} taken where its guard does not hold")
        for args in outside(m, action.domain, action.ranked):
            e = refusal(m, action.name, args)
            assert e is not None, f"{action.name}{args} taken outside its domain"
            if action.ranked and args[-1] in (-1, m.state.config.ranks) and (
                not action.injected_only  # (refused first for want of its bug)
            ):
                assert isinstance(e, UnknownRank), (action.name, args, e)
    assert m.state == before, "a refusal changed the state"


class EnabledExactly(ProtocolStateful):
    @invariant()
    def refused_where_the_guard_does_not_hold(self) -> None:
        check_enabled_exactly(self.m, Counter())


class EnabledExactlyTwoRanksShared(EnabledExactly):
    RANKS = 2
    BACKING = "shared"


class EnabledExactlyTwoRanksPrivate(EnabledExactly):
    RANKS = 2


class EnabledExactlyWithImports(EnabledExactly):
    """One rank with P/D imports; recording, so that a retired import is declared again
    as an import (the drivers read the declared ones)."""

    def __init__(self) -> None:
        super().__init__()
        self.m = make_machine(gpu_blocks=GPU, host_pool_bytes=2 * HOST + 1, chunks=2,
                              staging_slots=1, imports=WALK_IMPORTS, record=True)

    @rule(data=st.data(), n=st.integers(1, 8))
    def import_moves(self, data: st.DataObject, n: int) -> None:
        """Up to n enabled import steps in a row (ImportError and Abort come through the
        other rules): without it, aborts end most imports before they land."""
        for _ in range(n):
            moves = [(a, args) for a, args in self.legal_moves()
                     if a in IMPORT_ACTIONS and a != "ImportError"]
            if not moves:
                return
            action, args = data.draw(st.sampled_from(moves))
            getattr(self.m, action)(*args)
            self.accepted += 1


_SETTINGS = settings(max_examples=40, stateful_step_count=40, deadline=None,
                     phases=[Phase.explicit, Phase.reuse, Phase.generate])
TestOneRank = EnabledExactly.TestCase
TestTwoRanksShared = EnabledExactlyTwoRanksShared.TestCase
TestTwoRanksPrivate = EnabledExactlyTwoRanksPrivate.TestCase
TestWithImports = EnabledExactlyWithImports.TestCase
TestOneRank.settings = TestTwoRanksShared.settings = _SETTINGS
TestTwoRanksPrivate.settings = TestWithImports.settings = _SETTINGS


def test_every_catalogue_action_has_a_guard() -> None:
    assert {a.name for a in CATALOGUE} <= set(GUARDS)


def test_seeded_import_walks_meet_each_import_action_enabled_and_not() -> None:
    # The rule along seeded walks that favour the imports' own steps, so that every
    # import action is met both enabled and not, whatever Hypothesis draws above (which
    # it may not: ReleaseStaging needs a host-target import staged to its last chunk)
    seen: Counter[tuple[str, bool]] = Counter()
    for seed in range(8):
        for m in import_walk(seed, 60, gpu_blocks=GPU, host_pool_bytes=2 * HOST + 1,
                             chunks=2, staging_slots=1):
            check_enabled_exactly(m, seen)
    assert len(IMPORT_ACTIONS) == 12
    assert sorted(a for a in IMPORT_ACTIONS if not seen[a, True] or not seen[a, False]) == []
