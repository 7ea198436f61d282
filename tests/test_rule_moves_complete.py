"""Rule: the drivers' move list (``spec/catalogue.py`` ``arguments``, read by
``tests/protocol_helpers.legal_moves``) holds every move the machine accepts, and names
only ranks of the config.

The stateful tests take their legal steps from that list, so a list that leaves moves
out (the spill destinations drawn from the ranks instead of the host blocks, mutant
``var``) shrinks what they explore without failing anything. Checked over every state
the protocol's stateful tests reach, with one rank and with two sharing a pool: every
arbitrary attempt the machine accepts was in the move list of the state it was made in,
and every ranked argument tuple ends with a rank of the config.
"""

from __future__ import annotations

from typing import Any

from hypothesis import settings
from hypothesis.stateful import invariant

from hisparse.spec.catalogue import CATALOGUE, arguments
from hisparse.spec.errors import ActionNotEnabled, UnknownRank, UnknownTransfer
from tests.protocol_helpers import legal_moves, make_machine
from tests.test_protocol_stateful import ProtocolStateful, TwoRanksShared


class _MovesComplete:
    """Mixed into a stateful test: arbitrary attempts checked against the move list."""

    m: Any
    accepted: int
    refused: int

    def attempt(self, action: str, *args: Any) -> None:
        moves = set(legal_moves(self.m)) if action != "add_request" else set()
        before = self.m.state.clone()
        try:
            getattr(self.m, action)(*args)
        except (ActionNotEnabled, UnknownTransfer, UnknownRank):
            self.refused += 1
            assert self.m.state == before, f"refused {action}{args} changed the state"
        else:
            self.accepted += 1
            if action != "add_request":
                assert (action, args) in moves, f"accepted {action}{args} is no legal move"

    @invariant()
    def ranked_arguments_name_real_ranks(self) -> None:
        s = self.m.state
        for a in CATALOGUE:
            if a.ranked:
                for args in arguments(s, a.domain, True):
                    assert 0 <= args[-1] < s.config.ranks, (a.name, args)


class MovesComplete(_MovesComplete, ProtocolStateful):
    pass


class MovesCompleteShared(_MovesComplete, TwoRanksShared):
    pass


for _case in (MovesComplete, MovesCompleteShared):
    _case.TestCase.settings = settings(max_examples=60, stateful_step_count=40,
                                       deadline=None)
TestMovesComplete = MovesComplete.TestCase
TestMovesCompleteShared = MovesCompleteShared.TestCase


def test_a_spill_to_the_last_host_block_is_a_legal_move() -> None:
    # the property above is not vacuous: a spill's destinations are every host block
    m = make_machine()
    m.Arrive("r0")
    hosts = m.state.config.host_blocks
    assert hosts > m.state.config.ranks
    page = next(p for p in m.state.loc if p[0] == "r0")
    assert ("StartSpill", (page, hosts - 1)) in legal_moves(m)
    m.StartSpill(page, hosts - 1)
