"""Rule: an invariant twin reports or stays silent on a malformed state; it never raises.

Checked over every state the protocol's stateful test reaches: each reached state gets
a stray location entry for every request that is not running (a page one past its last,
with no block), and one stray import record, not yet landing, of a request that was never
declared; every safety twin must still return its list of problems. A twin that reads a
page's key before it has checked that the page's request is running
(``spec/invariants.py`` LivePagesReadable, mutant ``reorder``) raises ``IndexError``
there instead; one that reads an import's pages before it has checked that the import
is live (ImportTargetStable, the sampled whole-suite run's ``149:reorder:0``) raises
``KeyError``.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis.stateful import invariant

from hisparse.spec.invariants import INVARIANTS
from hisparse.spec.state import Imp, ProtocolState
from tests.test_protocol_stateful import ProtocolStateful

STRAY_IMPORT = "stray-import"  # declared by no workload


def with_stray_entries(s: ProtocolState) -> tuple[ProtocolState, int]:
    """A copy of ``s`` with one stray, blockless entry per request that is not running,
    and an announced import of a request that was never declared."""
    t = s.clone()
    n = 0
    for r, keys in t.page_keys.items():
        if t.req.get(r) != "running":
            t.loc[(r, len(keys) + 1)] = None
            n += 1
    assert STRAY_IMPORT not in t.page_keys
    t.imp[STRAY_IMPORT] = Imp("host", "announced")
    return t, n


class StrayEntries(ProtocolStateful):
    @invariant()
    def twins_report_without_raising(self) -> None:
        t, _ = with_stray_entries(self.m.state)
        for name, check in INVARIANTS.items():
            assert isinstance(check(t), list), name


StrayEntries.TestCase.settings = settings(max_examples=60, stateful_step_count=40,
                                          deadline=None)
TestStrayEntries = StrayEntries.TestCase


def test_a_stray_entry_of_an_ended_request_is_built() -> None:
    # the property above is not vacuous: an ended request's stray entry is there
    from tests.protocol_helpers import make_machine

    m = make_machine()
    m.Abort("r1")
    t, n = with_stray_entries(m.state)
    assert n >= 1 and (("r1", len(t.page_keys["r1"]) + 1) in t.loc)
    for name, check in INVARIANTS.items():
        assert isinstance(check(t), list), name
