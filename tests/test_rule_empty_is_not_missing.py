"""Rule: an empty value is not a missing one.

A recording machine that has taken no step yet has an empty step list, not none: its
trace is the header alone (every declared request, no steps), not the refusal meant for
a machine created without ``record=True``. The same holds after requests are declared
and before the first action, with one rank and with two.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from hisparse.spec.constants import ProtocolConfig
from hisparse.spec.machine import ProtocolMachine
from hisparse.spec.record import machine_trace


@pytest.mark.parametrize("ranks", [1, 2])
@pytest.mark.parametrize("declared", [{"r0": ("k1", "k2")}, {"a": ("x",), "b": ("x", "y")}])
def test_a_recording_machine_without_steps_has_a_header_only_trace(
    ranks: int, declared: dict[str, tuple[str, ...]]
) -> None:
    cfg = ProtocolConfig(gpu_blocks=3, host_pool_bytes=9, host_block_bytes=2, ranks=ranks)
    m = ProtocolMachine.create(cfg, record=True)
    for r, keys in declared.items():
        m.add_request(r, keys)
    t = machine_trace(m)
    assert t.steps == ()
    assert t.header.requests == {r: list(ks) for r, ks in declared.items()}
    assert t.header.gpu_blocks == 3


def test_a_machine_without_recording_is_refused() -> None:
    m = ProtocolMachine.create(ProtocolConfig(gpu_blocks=3, host_pool_bytes=9,
                                              host_block_bytes=2))
    with pytest.raises(ValueError, match="record=True"):
        machine_trace(m)


def test_a_recording_machine_with_nothing_declared_is_refused_for_that() -> None:
    # an empty registry is not a missing one (record.py:19:none:1 read it as "not
    # recording"): the refusal is the header's, which needs one request
    m = ProtocolMachine.create(ProtocolConfig(gpu_blocks=3, host_pool_bytes=9,
                                              host_block_bytes=2), record=True)
    with pytest.raises(ValidationError, match=r"requests\n  Dictionary should have at least 1"):
        machine_trace(m)
