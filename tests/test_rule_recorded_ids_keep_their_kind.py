"""Rule: while a trace is recorded, a request ID keeps the kind it was first declared
with (ordinary, or an import that arrives with prefill KV), since the trace's header
names each kind once; declaring it as the other kind is refused, by name, and the
refusal changes nothing: not the state, not the recorder's registry of declared IDs
(``spec/machine.py`` ``add_request`` / ``add_import``).

From the sampled whole-suite run's survivor ``spec/machine.py:134:reorder:2``: the
request was declared before the check that refuses it (a refusal that changed state).
"""

from __future__ import annotations

from typing import Any

import pytest

from hisparse.spec.errors import ActionNotEnabled
from hisparse.spec.machine import ProtocolMachine
from tests.protocol_helpers import make_machine


def _snapshot(m: ProtocolMachine) -> tuple[Any, ...]:
    s = m.state
    return (dict(s.page_keys), dict(s.req), set(s.imports), set(s.keys_seen),
            dict(m.declared or {}), set(m.declared_imports or ()))


def test_an_import_id_is_refused_as_an_ordinary_request() -> None:
    m = make_machine(record=True, universe={}, imports={"r1": ("k1", "k2")})
    before = _snapshot(m)
    with pytest.raises(ActionNotEnabled) as err:
        m.add_request("r1", ["k1", "k2"])
    assert (err.value.action, err.value.reason) == (
        "add_request", "request id 'r1' was an import while recording a trace: add_import")
    assert _snapshot(m) == before


def test_an_ordinary_id_is_refused_as_an_import() -> None:
    m = make_machine(record=True, universe={"r1": ("k1", "k2")})
    before = _snapshot(m)
    with pytest.raises(ActionNotEnabled) as err:
        m.add_import("r1", ["k1", "k2"])
    assert (err.value.action, err.value.reason) == (
        "add_import", "request id 'r1' was an ordinary request while recording a trace")
    assert _snapshot(m) == before


def test_without_recording_a_declared_id_is_refused_as_already_declared() -> None:
    m = make_machine(universe={}, imports={"r1": ("k1",)})
    before = _snapshot(m)
    with pytest.raises(ActionNotEnabled, match=r"^add_request is not enabled: request 'r1' already declared$"):
        m.add_request("r1", ["k1"])
    assert _snapshot(m) == before
