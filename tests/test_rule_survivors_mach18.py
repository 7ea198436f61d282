"""Rules the eighteenth mutation pass found unstated (``spec/machine.py``).

Each rule is checked in every state the protocol's stateful tests reach (one rank, two
ranks with private pools or one shared pool); each test names the mutants it kills, and
docs/mutation-survivors.md ("eighteenth pass") says why each rule matters.
"""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import Phase, settings
from hypothesis.stateful import invariant, rule

from hisparse.spec.errors import UnknownTransfer
from hisparse.spec.machine import ProtocolMachine
from hisparse.spec.state import EMPTY, GARBAGE, Meta
from tests.protocol_helpers import make_machine
from tests.test_protocol_stateful import GPU, HOST, ProtocolStateful

_RANK_ONLY = ("ConsumeMeta", "WorkerReport", "WorkerRead", "WorkerReadsDone", "WorkerLoss",
              "LoseMeta")
_REQUEST_ONLY = ("Arrive", "Finish", "Abort", "Retire")


def expected_args(m: ProtocolMachine, action: str, args: tuple[Any, ...]) -> dict[str, Any]:
    """What a recording machine must record for ``action(*args)``, read before the call
    (a transfer's source and destination are those of the command the rank holds)."""
    if action in _RANK_ONLY:
        return {"rank": args[0]}
    if action in _REQUEST_ONLY:
        return {"request": args[0]}
    if action == "StartSpill":
        return {"page": [args[0][0], args[0][1]], "host_block": args[1]}
    if action == "EvictHost":
        return {"host_block": args[0]}
    if action == "WorkerComplete":
        return {"host_block": args[0], "rank": args[1]}
    if action == "IgnoreReplay":
        return {"src": args[0], "dst": args[1], "rank": args[2]}
    if action in ("WorkerEnqueue", "WorkerDrop", "LoseCommand"):
        t = m.state.down[args[1]][args[0]]
        return {"src": t.src, "dst": t.dst, "rank": args[1]}
    return {}  # add_request: not an action of the spec, nothing recorded


class RecordsWhatItDid(ProtocolStateful):
    """A recording machine: every accepted action is recorded once, under its name, with
    the arguments it was called with."""

    def __init__(self) -> None:
        super().__init__()
        self.m = make_machine(gpu_blocks=GPU, host_pool_bytes=2 * HOST + 1, ranks=self.RANKS,
                              backing=self.BACKING, record=True)

    def take(self, action: str, args: tuple[Any, ...]) -> None:
        """The action, and what the machine recorded of it."""
        steps = self.m.steps
        assert steps is not None
        n = len(steps)
        want = expected_args(self.m, action, args) if self._may_run(action, args) else {}
        getattr(self.m, action)(*args)
        if action == "add_request":
            assert len(steps) == n
            return
        assert len(steps) == n + 1, f"{action}{args} recorded {len(steps) - n} steps"
        name, got, _ = steps[-1]
        assert name == action
        for k, v in want.items():
            assert got[k] == v, f"{action}{args} recorded {k}={got[k]!r}, expected {v!r}"

    def _may_run(self, action: str, args: tuple[Any, ...]) -> bool:
        """Whether a transfer action's command is at its rank (else it is refused)."""
        if action in ("WorkerEnqueue", "WorkerDrop", "LoseCommand"):
            tid, w = args
            return 0 <= w < len(self.m.state.down) and tid in self.m.state.down[w]
        return True


class RepeatedEnqueuedAckRefused(ProtocolStateful):
    """A channel that duplicates messages: a worker meta carrying an enqueued ack rank w
    gave already (consumed: w is in the transfer's ``enq``) is refused whole by
    ConsumeMeta, typed, and nothing changes."""

    @rule(data=st.data())
    def repeat_an_enqueued_ack(self, data: st.DataObject) -> None:
        s = self.m.state
        repeats = [(w, sp.transfer_id) for sp in s.spill if sp is not None
                   for w in sorted(sp.enq) if not s.up[w] and not s.lost[w]]
        if not repeats:
            return
        w, tid = data.draw(st.sampled_from(repeats))
        s.up[w].append(Meta((tid,), ()))
        before = s.clone()
        with pytest.raises(UnknownTransfer, match="ack out of order"):
            self.m.ConsumeMeta(w)
        assert s == before
        s.up[w].clear()


class EveryReachedState(ProtocolStateful):
    """Two facts of every reached state."""

    @invariant()
    def freed_host_blocks_hold_no_page(self) -> None:
        """A host block handed back to the pool is overwritten by unrelated work at once
        (tla/HiSparse.tla: ``Scribble``): in every pool a free host block holds no page's
        bytes, so a later read of it before a copy lands is caught."""
        s = self.m.state
        for b, pool in s.host_data.items():
            for h, st_ in enumerate(s.host_state):
                if st_ == "free":
                    assert pool[h] in (EMPTY, GARBAGE), (
                        f"free host block {h} holds {pool[h]!r} in pool {b}")

    @invariant()
    def gpu_entries_only_while_running(self) -> None:
        """A page has a GPU block-table entry only while its request runs (what lets
        ``check_spill`` take its fast path for a running request's page alone)."""
        s = self.m.state
        for p, where in s.loc.items():
            if where is not None and where[0] == "gpu":
                assert s.req[p[0]] == "running", (p, where, s.req[p[0]])


_SETTINGS = settings(max_examples=60, stateful_step_count=50, deadline=None,
                     phases=[Phase.explicit, Phase.reuse, Phase.generate])  # no shrinking


def in_each_config(base: type[ProtocolStateful]) -> tuple[Any, Any, Any]:
    """``base``'s test case with one rank, two ranks sharing one pool, two private pools."""
    shared: type[ProtocolStateful] = type(f"{base.__name__}TwoRanksShared", (base,),
                                          {"RANKS": 2, "BACKING": "shared"})
    private: type[ProtocolStateful] = type(f"{base.__name__}TwoRanksPrivate", (base,),
                                           {"RANKS": 2})
    cases = tuple(c.TestCase for c in (base, shared, private))
    for case in cases:
        case.settings = _SETTINGS
    return cases[0], cases[1], cases[2]


# kills spec/machine.py:1297:var:107 (WorkerComplete recorded its rank as its host block)
TestRecordsOneRank, TestRecordsTwoRanksShared, TestRecordsTwoRanksPrivate = in_each_config(
    RecordsWhatItDid)
# kills spec/machine.py:591:bool:76 (a rank's repeated enqueued ack was taken while the
# transfer waited for another rank's)
TestRepeatOneRank, TestRepeatTwoRanksShared, TestRepeatTwoRanksPrivate = in_each_config(
    RepeatedEnqueuedAckRefused)
# kills spec/machine.py:659:call:9 (a discarded destination kept the bytes copied into it)
# (and states why spec/machine.py:412:cmp:157 is equivalent)
TestReachedOneRank, TestReachedTwoRanksShared, TestReachedTwoRanksPrivate = in_each_config(
    EveryReachedState)
