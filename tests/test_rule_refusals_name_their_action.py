"""Rule: every refusal names what was refused and why (``spec/errors.py``).

Over every attempt the protocol's stateful test makes (legal and illegal, from every
state it reaches), a refused action's ``ActionNotEnabled`` carries the refused action's
name in ``action`` and its reason in ``reason``, and its message is built from exactly
those two; an ``UnknownTransfer`` carries the transfer ID it was given.
"""

from __future__ import annotations

from typing import Any

from hypothesis import settings

from hisparse.spec.errors import ActionNotEnabled, UnknownRank, UnknownTransfer
from tests.test_protocol_stateful import ProtocolStateful


class RefusalsNamed(ProtocolStateful):
    def attempt(self, action: str, *args: Any) -> None:
        before = self.m.state.clone()
        try:
            getattr(self.m, action)(*args)
        except ActionNotEnabled as e:
            assert e.action == action, (e.action, action)
            assert e.reason and str(e) == f"{action} is not enabled: {e.reason}"
            assert self.m.state == before
        except UnknownTransfer as e:
            assert e.reason and str(e) == f"transfer {e.transfer_id}: {e.reason}"
            assert e.transfer_id in args
            assert self.m.state == before
        except UnknownRank:
            assert self.m.state == before
        else:
            self.accepted += 1


RefusalsNamed.TestCase.settings = settings(max_examples=40, stateful_step_count=40,
                                           deadline=None)
TestRefusalsNamed = RefusalsNamed.TestCase
