"""The MultiConnector's child order rule: a child that may refuse well-formed bytes when
it applies them (HiSparse) must come first, and at most one may, so a refusal by any
child in any position changes no child's state. Hypothesis draws the children (which
refuse on apply), their order and what each is sent; the real HiSparse and offloading
children are checked in both orders."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hisparse.connectors.base import (
    ChildOrderError,
    ConnectorError,
    KVLayout,
    MalformedChildMessage,
)
from hisparse.connectors.hisparse_child import HiSparseWorkerChild
from hisparse.connectors.multi import MultiConnectorScheduler, MultiConnectorWorker
from hisparse.connectors.wire import MULTI_MESSAGE, ChildBytes, MultiMessage
from hisparse.spec.errors import ProtocolError
from tests.connector_helpers import KV, NamedChild, children

BAD, REFUSE, OK = b"bad", b"refuse", b"ok"


class Refusal(ProtocolError):
    """A well-formed part the child refuses when it applies it (changing nothing)."""


class Child(NamedChild):
    """Both halves at once: ``parse_*`` refuses ``BAD``; ``apply``/``bind`` refuses
    ``REFUSE`` when ``refuses_on_apply`` (else applies it like any part)."""

    def __init__(self, name: str, refuses_on_apply: bool) -> None:
        super().__init__(name)
        self.refuses_on_apply = refuses_on_apply
        self.applied: list[bytes] = []

    def _parse(self, raw: bytes) -> bytes:
        if raw == BAD:
            raise MalformedChildMessage(self._name, "part", "bad")
        return raw

    def _apply(self, parsed: object) -> None:
        assert isinstance(parsed, bytes)
        if self.refuses_on_apply and parsed == REFUSE:
            raise Refusal(f"{self._name} refuses")
        self.applied.append(parsed)

    # scheduler half
    def get_num_new_matched_tokens(self, request_id: str, num_computed_tokens: int
                                   ) -> int | None:
        return 0

    def update_state_after_alloc(self, request_id: str, block_ids: Sequence[int],
                                 num_external_tokens: int) -> None:
        return None

    def build_connector_meta(self) -> bytes | None:
        return None

    def parse_worker_meta(self, raw: bytes) -> object:
        return self._parse(raw)

    def apply_worker_meta(self, parsed: object) -> None:
        self._apply(parsed)

    def request_finished(self, request_id: str, block_ids: Sequence[int]) -> bool:
        return False

    def get_stats(self) -> Mapping[str, int]:
        return {}

    # worker half
    def parse_metadata(self, raw: bytes) -> object:
        return self._parse(raw)

    def bind_metadata(self, parsed: object) -> None:
        self._apply(parsed)

    def get_worker_meta(self) -> bytes | None:
        return None


def _message(parts: Mapping[str, bytes]) -> bytes:
    return MULTI_MESSAGE.dump_json(MultiMessage(
        parts=tuple(ChildBytes(child=k, data=v) for k, v in parts.items())))


# each child: does it refuse on apply (one in four does, so legal orders are common
# too), and what is it sent (None: no part this step)
CHILDREN = st.lists(st.tuples(st.sampled_from([False, False, False, True]),
                              st.sampled_from([None, OK, BAD, REFUSE])),
                    min_size=1, max_size=4)


@settings(max_examples=300, deadline=None)
@given(CHILDREN, st.booleans())
def test_a_refusal_in_any_child_position_changes_no_child(
        drawn: list[tuple[bool, bytes | None]], scheduler_side: bool) -> None:
    children = [Child(f"c{i}", refusing) for i, (refusing, _) in enumerate(drawn)]
    names = [c.name for c in children]
    refusing = [c.name for c in children if c.refuses_on_apply]
    legal = len(refusing) == 0 or (len(refusing) == 1 and names[0] == refusing[0])
    multi: MultiConnectorScheduler | MultiConnectorWorker
    try:
        multi = (MultiConnectorScheduler(children) if scheduler_side
                 else MultiConnectorWorker(children))
    except ChildOrderError as exc:
        assert not legal
        assert str(names) in str(exc)  # the children, named
        if len(refusing) == 1:  # the order required: the refusing child first
            assert str([refusing[0], *(n for n in names if n != refusing[0])]) in str(exc)
        else:
            assert str(refusing) in str(exc)
        return
    assert legal
    parts = {c.name: part for c, (_, part) in zip(children, drawn, strict=True)
             if part is not None}
    refused = any(p == BAD for p in parts.values()) or any(
        p == REFUSE for n, p in parts.items() if multi.child(n).refuses_on_apply)
    raw = _message(parts)
    if refused:
        with pytest.raises(ProtocolError):
            if isinstance(multi, MultiConnectorScheduler):
                multi.update_connector_output(raw)
            else:
                multi.bind_connector_metadata(raw)
        assert all(c.applied == [] for c in children)
    else:
        if isinstance(multi, MultiConnectorScheduler):
            multi.update_connector_output(raw)
        else:
            multi.bind_connector_metadata(raw)
        assert {c.name: c.applied for c in children} == {
            c.name: [parts[c.name]] if c.name in parts else [] for c in children}


def test_the_real_children_compose_only_with_hisparse_first() -> None:
    c = children()
    assert MultiConnectorScheduler([c.hs, c.off]).names == ("hisparse", "offload")
    assert MultiConnectorWorker([c.hs_w, c.off_w]).names == ("hisparse", "offload")
    required = r"'hisparse' may refuse .* must come first: order \['hisparse', 'offload'\]"
    with pytest.raises(ChildOrderError, match=required):
        MultiConnectorScheduler([c.off, c.hs])
    with pytest.raises(ChildOrderError, match=required):
        MultiConnectorWorker([c.off_w, c.hs_w])
    with pytest.raises(ChildOrderError, match=r"\['hisparse', 'hs2'\] do"):
        MultiConnectorWorker([c.hs_w, c.off_w, HiSparseWorkerChild(c.port, KV, name="hs2")])


def test_children_that_disagree_on_the_layout_are_named_before_their_order() -> None:
    # two faults at once: the layout is named, then the order is checked on children
    # that agree (multi.py:71:reorder:0 checked the order first)
    late = Child("late", True)
    odd = Child("odd", False)
    odd._layout = KVLayout(block_tokens=KV.block_tokens * 2)
    with pytest.raises(ConnectorError, match=r"disagree on the KV layout: odd requires"):
        MultiConnectorScheduler([odd, late])
    with pytest.raises(ChildOrderError, match=r"'late' may refuse"):
        MultiConnectorScheduler([Child("first", False), late])
