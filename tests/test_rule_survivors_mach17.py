"""Rules the seventeenth mutation pass found unstated (``spec/machine.py``, ``hisparse/report.py``).

Each test names the mutant it kills; docs/mutation-survivors.md ("seventeenth pass")
says why each rule matters.
"""

from __future__ import annotations

import pytest

from hisparse.spec.errors import AckNotOwed
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
