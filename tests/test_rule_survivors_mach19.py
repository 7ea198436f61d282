"""Rules the nineteenth mutation pass found unstated (``spec/machine.py``).

Each stateful rule is checked in every state the protocol's stateful tests reach (one
rank, two ranks with private pools or one shared pool); each test names the mutants it
kills, and docs/mutation-survivors.md ("nineteenth pass") says why each rule matters.
"""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis.stateful import invariant, rule

from hisparse.spec.errors import ActionNotEnabled, UnknownRank, UnknownTransfer
from tests.protocol_helpers import make_machine
from tests.test_protocol_stateful import GPU, HOST, ProtocolStateful
from tests.test_rule_survivors_mach18 import in_each_config

_REFUSALS = (ActionNotEnabled, UnknownTransfer, UnknownRank)


class RecordsWithoutChecking(ProtocolStateful):
    """Checking and recording are independent: a machine that records a trace without
    checking invariants (``hisparse simulate --no-check --trace``) takes and refuses the
    same actions and records the same steps as one that checks too."""

    def __init__(self) -> None:
        super().__init__()
        shape: dict[str, Any] = dict(gpu_blocks=GPU, host_pool_bytes=2 * HOST + 1,
                                     ranks=self.RANKS, backing=self.BACKING, record=True)
        self.m = make_machine(**shape)
        self.shadow = make_machine(**shape, check=False)

    def take(self, action: str, args: tuple[Any, ...]) -> None:
        """The action on both machines: both take it, or both refuse it alike."""
        try:
            getattr(self.m, action)(*args)
        except _REFUSALS as e:
            with pytest.raises(type(e)):
                getattr(self.shadow, action)(*args)
            raise
        getattr(self.shadow, action)(*args)

    @invariant()
    def the_same_steps_recorded(self) -> None:
        assert self.shadow.invariant_checks == 0
        assert self.m.steps is not None and self.shadow.steps == self.m.steps


class EmptyBlocksAreNotTheDefault(ProtocolStateful):
    """``Arrive(r, blocks=[])`` asks for no GPU block; only ``blocks=None`` asks for the
    lowest free ones. A request that needs blocks is refused, and nothing changes."""

    @rule(data=st.data())
    def arrive_with_no_blocks(self, data: st.DataObject) -> None:
        s = self.m.state
        new = sorted(r for r, st_ in s.req.items() if st_ == "new" and r not in s.imports)
        if not new:
            return
        r = data.draw(st.sampled_from(new))
        need = len(s.page_keys[r]) - self.m.hit_len(r)
        if not need:
            return  # a whole hit: no block asked for, none needed
        before = s.clone()
        with pytest.raises(ActionNotEnabled, match=rf"blocks \[\] are not {need} distinct"):
            self.m.Arrive(r, blocks=[])
        assert s == before


class EndedRequestsHaveNoEntries(ProtocolStateful):
    """A finished or aborted request has no block-table entry on either tier: ending
    clears them all and no action sets one again, so ``retire_refusal``'s entries check
    never refuses (the spec's Retire precondition, mirrored)."""

    @invariant()
    def no_entries_once_ended(self) -> None:
        s = self.m.state
        for r, st_ in s.req.items():
            if st_ in ("finished", "aborted"):
                held = [(i, s.loc[(r, i)]) for i in range(1, len(s.page_keys[r]) + 1)
                        if s.loc[(r, i)] is not None]
                assert not held, f"{st_} request {r} still has entries {held}"


def test_a_request_with_one_empty_key_among_others_is_refused() -> None:
    # kills spec/machine.py:145:collection:0 (all -> any: only a request whose keys were
    # all empty was refused)
    m = make_machine(universe={})
    before = m.state.clone()
    with pytest.raises(ActionNotEnabled, match=r"reserved or empty keys \[''\]"):
        m.add_request("rx", ("kx", ""))
    assert m.state == before


# kills spec/machine.py:110:var:3, 112:var:5 and 113:var:6 (a machine that records
# without checking kept no steps: its observer, its step list or its "observed" flag
# followed ``check`` instead of ``record``)
TestNoCheckOneRank, TestNoCheckTwoRanksShared, TestNoCheckTwoRanksPrivate = in_each_config(
    RecordsWithoutChecking)
# kills spec/machine.py:314:none:6 (``not blocks``: an empty list took the lowest free
# blocks as if none had been given)
TestNoBlocksOneRank, TestNoBlocksTwoRanksShared, TestNoBlocksTwoRanksPrivate = in_each_config(
    EmptyBlocksAreNotTheDefault)
# states why spec/machine.py:772:arith:22 is equivalent (the entries check cannot refuse)
TestEndedOneRank, TestEndedTwoRanksShared, TestEndedTwoRanksPrivate = in_each_config(
    EndedRequestsHaveNoEntries)
