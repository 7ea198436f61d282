"""Hypothesis drives ProtocolMachine through random legal and illegal sequences.

Every rule tries an action with arguments drawn from the whole universe, so many
attempts are illegal: those must raise a typed error and change nothing. Requests
retire and their IDs are declared again; the worker may be lost at any moment. All
invariants are checked after every step (the machine checks inside each action,
and the @invariant re-checks independently). At teardown the fair actions are
drained and the liveness twins must hold. The same machine runs with one rank and
with two tensor-parallel ranks, private host pools or one shared pool; rank-indexed
actions draw their rank too (one past the last is refused).
"""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from hisparse.spec.errors import ActionNotEnabled, ProtocolError, UnknownRank, UnknownTransfer
from hisparse.spec.invariants import INVARIANTS, PROPERTIES
from hisparse.spec.state import Meta
from tests.protocol_helpers import UNIVERSE, index_problems, legal_moves, make_machine

REQUESTS = sorted(UNIVERSE)
PAGES = [(r, i) for r in REQUESTS for i in range(1, len(UNIVERSE[r]) + 1)]
GPU, HOST = 3, 4


class ProtocolStateful(RuleBasedStateMachine):
    RANKS = 1
    BACKING = "private"

    def __init__(self) -> None:
        super().__init__()
        self.m = make_machine(
            gpu_blocks=GPU, host_pool_bytes=2 * HOST + 1, ranks=self.RANKS, backing=self.BACKING
        )
        self.accepted = 0
        self.refused = 0

    def take(self, action: str, args: tuple[Any, ...]) -> None:
        """Call one action on the machine (a subclass may check around the call)."""
        getattr(self.m, action)(*args)

    def attempt(self, action: str, *args: Any) -> None:
        before = self.m.state.clone()
        try:
            self.take(action, args)
        except (ActionNotEnabled, UnknownTransfer, UnknownRank):
            self.refused += 1
            assert self.m.state == before, f"refused {action}{args} changed the state"
        else:
            self.accepted += 1

    def legal_moves(self) -> list[tuple[str, tuple[Any, ...]]]:
        return legal_moves(self.m)

    @rule(data=st.data(), n=st.integers(1, 8))
    def legal(self, data: st.DataObject, n: int) -> None:
        """Up to n enabled actions in a row: each must be accepted."""
        for _ in range(n):
            moves = self.legal_moves()
            if not moves:
                return
            action, args = data.draw(st.sampled_from(moves))
            self.take(action, args)
            self.accepted += 1

    @rule(
        action=st.sampled_from(
            ["Arrive", "Finish", "Abort", "StartSpill", "EvictHost", "WorkerEnqueue",
             "WorkerComplete", "WorkerReport", "ConsumeMeta", "Retire", "add_request",
             "IgnoreReplay", "LoseCommand", "LoseMeta"]
        ),
        r=st.sampled_from(REQUESTS),
        p=st.sampled_from(PAGES),
        n=st.integers(-1, HOST + 1),
        w=st.integers(-1, 2),
    )
    def anything(self, action: str, r: str, p: tuple[str, int], n: int, w: int) -> None:
        """Any action with arbitrary arguments: accepted, or refused with no change."""
        args: dict[str, tuple[Any, ...]] = {
            "Arrive": (r,), "Finish": (r,), "Abort": (r,), "StartSpill": (p, n),
            "EvictHost": (n,), "WorkerEnqueue": (n, w), "WorkerComplete": (n, w),
            "WorkerReport": (w,), "ConsumeMeta": (w,), "Retire": (r,),
            "add_request": (r, UNIVERSE[r]),
            # the channels' faults: a replay (of a command sent or not), a loss
            "IgnoreReplay": (n % GPU, n, w), "LoseCommand": (n, w), "LoseMeta": (w,),
        }
        self.attempt(action, *args[action])

    @rule(tid=st.integers(0, 40), completed=st.booleans(), w=st.integers(0, 1))
    def forged_ack(self, tid: int, completed: bool, w: int) -> None:
        """A duplicated, stale or unknown ack: refused unless it names an open transfer
        in the right phase, which the forging below rules out."""
        s = self.m.state
        w = min(w, self.RANKS - 1)
        h = s.transfer_dst.get(tid)
        open_ = h is not None and (sp := s.spill[h]) is not None and sp.transfer_id == tid
        if open_ or s.up[w] or s.lost[w]:  # (after a gap every meta is refused anyway)
            return
        s.up[w].append(Meta((), (tid,)) if completed else Meta((tid,), ()))
        before = s.clone()
        try:
            self.m.ConsumeMeta(w)
        except UnknownTransfer:
            assert s == before
        else:
            raise AssertionError(f"forged ack for transfer {tid} was accepted")
        s.up[w].clear()

    @rule(tid=st.integers(0, 40), w=st.integers(0, 1), completed=st.booleans())
    def repeated_or_unowed_ack(self, tid: int, w: int, completed: bool) -> None:
        """An ack a rank already gave, or does not owe, for an OPEN transfer: refused
        whole by check_report (what the coordinator asks first) and nothing changes."""
        s = self.m.state
        w = min(w, self.RANKS - 1)
        h = s.transfer_dst.get(tid)
        if h is None:
            return
        sp = s.spill[h]
        if sp is None or sp.transfer_id != tid or s.up[w] or s.w_enq[w] or s.w_done[w] or (
            s.lost[w]
        ):
            return
        if completed and (s.copying_tid[w].get(h) == tid or tid in s.down[w]):
            return  # owed (running) or merely early: not this rule's case
        if not completed and tid in s.down[w]:
            return  # owed
        before = s.clone()
        try:
            if completed:
                self.m.check_report((), (tid,), w)
            else:
                self.m.check_report((tid,), (), w)
        except (UnknownTransfer, ActionNotEnabled):
            assert s == before
        else:
            raise AssertionError(f"rank {w}'s ack of transfer {tid} was not owed but passed")

    @invariant()
    def invariants_hold(self) -> None:
        for name, check in INVARIANTS.items():
            assert check(self.m.state) == [], name
        assert index_problems(self.m.state) == []  # the hot-path indexes

    def teardown(self) -> None:
        self.m.drain()
        for name, check in PROPERTIES.items():
            assert check(self.m.state) == [], name


ProtocolStateful.TestCase.settings = settings(
    max_examples=150, stateful_step_count=60, deadline=None
)
TestProtocolStateful = ProtocolStateful.TestCase


class TwoRanksPrivate(ProtocolStateful):
    RANKS = 2


class TwoRanksShared(ProtocolStateful):
    RANKS = 2
    BACKING = "shared"


for _tp in (TwoRanksPrivate, TwoRanksShared):
    _tp.TestCase.settings = settings(max_examples=100, stateful_step_count=60, deadline=None)
TestTwoRanksPrivate = TwoRanksPrivate.TestCase
TestTwoRanksShared = TwoRanksShared.TestCase


def test_refusals_are_typed() -> None:
    m = make_machine()
    for call in (
        lambda: m.Finish("r0"),
        lambda: m.Arrive("nope"),
        lambda: m.StartSpill(("r0", 1), 0),
        lambda: m.WorkerEnqueue(3),
        lambda: m.WorkerComplete(99),
        lambda: m.ConsumeMeta(),
        lambda: m.EvictHost(0),
    ):
        before = m.state.clone()
        try:
            call()
        except ProtocolError:
            assert m.state == before
        else:
            raise AssertionError("an illegal action was accepted")
