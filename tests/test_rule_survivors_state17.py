"""Rules the seventeenth mutation pass found unstated in the trace vocabulary.

The spec's sentinels are no one's name (``spec/state.py``'s ``SENTINELS``): a request
ID or a page key equal to one of the strings ``tla/HiSparse.tla`` defines as a sentinel
is refused by the machine and by a trace header. The list is read from the spec, not
from ``SENTINELS``: ``state.py:35:drop:3, 4, 6, 7`` each dropped one and a request named
``nopage``, ``nowhere``, ``nokey`` or ``idle`` went through, to alias the spec's value
for "no page", "nowhere", "no key" or "idle" in every trace it made. And each variable
the replay's incremental checks read as entries is recorded as entries
(``spec/observe.py``'s ``DELTA_VARS``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from hisparse.spec.constants import ProtocolConfig
from hisparse.spec.errors import ActionNotEnabled
from hisparse.spec.machine import ProtocolMachine
from hisparse.spec.trace import TraceHeader

SPEC = Path(__file__).resolve().parent.parent / "tla" / "HiSparse.tla"
_DEFS = re.compile(r"^(?:NoPage|NoLoc|NoKey|Idle|Empty|Garbage|NoSpill) == (.*)$", re.M)
SPEC_SENTINELS = sorted({s for d in _DEFS.findall(SPEC.read_text())
                         for s in re.findall(r'"(\w+)"', d)})


def test_the_spec_defines_the_sentinels_read_here() -> None:
    assert SPEC_SENTINELS == ["empty", "garbage", "idle", "nokey", "none", "nopage",
                              "nowhere"]


def _machine() -> ProtocolMachine:
    return ProtocolMachine(ProtocolConfig(gpu_blocks=2, host_pool_bytes=2, host_block_bytes=1))


@pytest.mark.parametrize("name", SPEC_SENTINELS)
def test_a_request_named_as_a_sentinel_is_refused(name: str) -> None:
    m = _machine()
    with pytest.raises(ActionNotEnabled, match=f"request id '{name}' is empty or reserved"):
        m.add_request(name, ["k0"])
    assert m.state.page_keys == {}


@pytest.mark.parametrize("name", SPEC_SENTINELS)
def test_a_page_key_named_as_a_sentinel_is_refused(name: str) -> None:
    m = _machine()
    with pytest.raises(ActionNotEnabled, match=re.escape(f"reserved or empty keys ['{name}']")):
        m.add_request("a", ["k0", name])
    assert m.state.page_keys == {}


@pytest.mark.parametrize("name", SPEC_SENTINELS)
@pytest.mark.parametrize("where", ["request", "key"])
def test_a_trace_header_naming_a_sentinel_is_refused(name: str, where: str) -> None:
    requests = {name: ["k0"]} if where == "request" else {"a": ["k0", name]}
    with pytest.raises(ValidationError, match=f"'{name}' is a sentinel of the spec, not a "
                       "valid name"):
        TraceHeader(kind="header", format="hisparse-trace/3", requests=requests,
                    gpu_blocks=2, host_blocks=2, host_pool_bytes=2, host_block_bytes=1)


def test_each_variable_the_replays_incremental_checks_read_as_entries_is_recorded_as_entries(
) -> None:
    # the incremental invariants take what a step changed from its recorded entries
    # (``TrWrites(e, v)`` is ``TrArgs(e.post[v])``): a variable recorded whole there
    # would hand them a function, not entries
    # kills spec/observe.py:110:drop:8 ("prefix" recorded whole: TrWrote("prefix") read
    # a whole function as a list of changed keys; only TLC could see it)
    from hisparse.spec.observe import DELTA_VARS
    from hisparse.tracecheck.delta import TLA

    read = {*re.findall(r'TrWrote\("(\w+)"\)', TLA), *re.findall(r'TrWrites\(\w+, "(\w+)"\)', TLA)}
    assert read == {"req", "loc", "prefix", "hostState", "hostKey", "imp", "pg"}
    assert read <= set(DELTA_VARS)
