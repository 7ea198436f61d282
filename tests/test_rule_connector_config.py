"""Rule: ``hisparse_config_from`` finds the one HiSparseConnector of a KV transfer config,
alone or as one child of a MultiConnector (at most 64 children, none itself a
MultiConnector), and refuses anything else with a ``ConnectorError`` that names where the
input went wrong; the input is never changed (``hisparse/connectors/config.py``).

A Hypothesis property over MultiConnector child lists (any mix of other connectors and
HiSparse children, at any positions) states the "exactly one" rule; a table states each
refusal's exact message.

From the guard survivors of the first mutation run of the file (docs/mutation-survivors.md,
"Files run for the first time").
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hisparse.config import HiSparseConfig
from hisparse.connectors.base import ConnectorError
from hisparse.connectors.config import MAX_CHILDREN, hisparse_config_from


def _hs(blocks: int) -> dict[str, Any]:
    return {"kv_connector": "HiSparseConnector",
            "kv_connector_extra_config": {"host_pool_blocks": blocks, "block_tokens": 16}}


def _multi(children: Any) -> dict[str, Any]:
    return {"kv_connector": "MultiConnector", "kv_connector_extra_config": {"connectors": children}}


OTHER = {"kv_connector": "OffloadingConnector", "kv_connector_extra_config": {"x": 1}}
BARE = {"kv_connector": "NixlConnector"}  # no extra config: taken as {}


def _found(doc: Any) -> HiSparseConfig | str:
    """The config found, or the refusal's message; the input must come back unchanged."""
    before = copy.deepcopy(doc)
    try:
        out: HiSparseConfig | str = hisparse_config_from(doc)
    except ConnectorError as e:
        out = str(e)
    assert doc == before
    return out


children = st.lists(
    st.one_of(st.just(OTHER), st.just(BARE), st.integers(1, 1000).map(_hs)),
    min_size=1, max_size=MAX_CHILDREN,
)


@settings(max_examples=150, deadline=None)
@given(children)
def test_exactly_one_hisparse_child_is_found_wherever_it_is(kids: list[dict[str, Any]]) -> None:
    ours = [c for c in kids if c["kv_connector"] == "HiSparseConnector"]
    got = _found(_multi(kids))
    if len(ours) == 1:
        assert got == HiSparseConfig.model_validate(ours[0]["kv_connector_extra_config"])
    else:
        assert got == f"expected one HiSparseConnector, found {len(ours)}"


def test_alone_and_as_a_child_give_the_same_config() -> None:
    want = HiSparseConfig(host_pool_blocks=7, block_tokens=16)
    assert _found(_hs(7)) == want
    assert _found(_multi([OTHER, _hs(7), BARE])) == want


def test_at_most_64_children() -> None:
    assert MAX_CHILDREN == 64
    assert _found(_multi([_hs(5)] + [OTHER] * 63)) == HiSparseConfig(host_pool_blocks=5,
                                                                      block_tokens=16)
    assert _found(_multi([_hs(5)] + [OTHER] * 64)) == "MultiConnector: 65 children, at most 64"


BAD_CONFIG = "bad HiSparse config: 1 validation error for HiSparseConfig"


@pytest.mark.parametrize(("doc", "message"), [
    ([1, 2], "kv_transfer_config: expected an object, got list"),
    ("HiSparseConnector", "kv_transfer_config: expected an object, got str"),
    ({}, "kv_transfer_config: kv_connector must name a connector"),
    ({"kv_connector": 3}, "kv_transfer_config: kv_connector must name a connector"),
    ({"kv_connector": ""}, "kv_transfer_config: kv_connector must name a connector"),
    ({"kv_connector": "HiSparseConnector", "kv_connector_extra_config": [1]},
     "kv_transfer_config: kv_connector_extra_config must be an object"),
    ({"kv_connector": "NixlConnector"},
     "NixlConnector is neither HiSparseConnector nor a MultiConnector with it"),
    ({"kv_connector": "MultiConnector"},
     "MultiConnector: kv_connector_extra_config.connectors must be a non-empty list"),
    (_multi([]), "MultiConnector: kv_connector_extra_config.connectors must be a non-empty list"),
    (_multi("HiSparseConnector"),
     "MultiConnector: kv_connector_extra_config.connectors must be a non-empty list"),
    (_multi({"0": _hs(4)}),
     "MultiConnector: kv_connector_extra_config.connectors must be a non-empty list"),
    (_multi([OTHER, "x"]), "MultiConnector child 1: expected an object, got str"),
    (_multi([OTHER, {"kv_connector": None}]),
     "MultiConnector child 1: kv_connector must name a connector"),
    (_multi([{"kv_connector": "HiSparseConnector", "kv_connector_extra_config": 5}]),
     "MultiConnector child 0: kv_connector_extra_config must be an object"),
    (_multi([_hs(4), _multi([_hs(4)])]),
     "MultiConnector child 1: a MultiConnector cannot nest another"),
    (_multi([OTHER, BARE]), "expected one HiSparseConnector, found 0"),
])
def test_each_refusal_says_where(doc: Any, message: str) -> None:
    assert _found(doc) == message


@pytest.mark.parametrize(("doc", "where"), [
    ({"kv_connector": "HiSparseConnector"}, "kv_transfer_config"),
    ({"kv_connector": "HiSparseConnector", "kv_connector_extra_config": {"bogus": 1}},
     "kv_transfer_config"),
    (_multi([OTHER, {"kv_connector": "HiSparseConnector"}]), "MultiConnector child 1"),
])
def test_a_bad_hisparse_config_is_refused_where_it_is(doc: Any, where: str) -> None:
    assert _found(doc) == f"{where}: {BAD_CONFIG}"
