"""Rules the seventeenth mutation pass found unstated (``spec/machine.py``, ``hisparse/report.py``).

Each test names the mutant it kills; docs/mutation-survivors.md ("seventeenth pass")
says why each rule matters.
"""

from __future__ import annotations

import pytest

from hisparse.spec.errors import AckNotOwed, UnknownTransfer
from tests.test_coordinator_tp import ack, everything, handed, make


def test_a_readers_completed_ack_is_refused_even_beside_its_enqueued_ack() -> None:
    # a reader of the shared pool copies nothing: "done" from it is owed to no one, in
    # the meta that also carries its (last, owed) enqueued ack as in a later one
    # kills spec/machine.py:549:var:143 (w in self.copiers -> w in self.everyone)
    c, kv = make(backing="shared")
    tid = handed(c)
    ack(c, 0, enq=(tid,))
    before = everything(c, kv)
    with pytest.raises(AckNotOwed, match="a reader of the shared pool copies nothing"):
        ack(c, 1, enq=(tid,), done=(tid,))
    assert everything(c, kv) == before


def test_a_host_page_released_again_in_one_end_becomes_the_newest_eviction_candidate(
) -> None:
    # a request whose keys repeat (["k", "x", "k"]) reads one host page twice: at its
    # end that page is released twice, the second time after "x" -- it was read last,
    # so it is the most recently used and "x" is evicted first
    # kills hisparse/coordinator.py:277:call:45 (the second release left "k" older)
    c, _ = make(ranks=1)
    c.add_request("a", ["k", "x"])
    c.admit("a")
    t1, t2 = c.spill(("a", 1)), c.spill(("a", 2))
    assert t1 is not None and t2 is not None
    c.take_commands()
    ack(c, 0, enq=(t1, t2), done=(t1, t2))
    c.finish("a")
    hk, hx = (c.state.prefix["k"], c.state.prefix["x"])
    c.add_request("b", ["k", "x", "k"])
    assert c.lookup_prefix("b") == 3
    c.admit("b")
    c.finish("b")
    assert c.evict_published(limit=1) == 1
    assert "x" not in c.state.prefix and c.state.prefix["k"] == hk != hx


def test_a_completed_ack_after_one_whose_copy_runs_is_still_checked() -> None:
    # the first completed ID's copy runs on the rank (acked enqueued earlier: nothing to
    # check); the second's command was never enqueued: the meta is refused whole
    # kills spec/machine.py:546:loop:3 (continue -> break: the check stopped at the
    # first and the second was applied unchecked)
    c, kv = make(ranks=1)
    t1 = handed(c, "a", "a0")
    ack(c, 0, enq=(t1,))
    t2 = handed(c, "b", "b0")
    before = everything(c, kv)
    with pytest.raises(UnknownTransfer, match="completed ack before its enqueued ack"):
        ack(c, 0, done=(t1, t2))
    assert everything(c, kv) == before
