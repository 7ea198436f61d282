"""MultiConnector: vLLM's composition semantics over any children (fakes, and HiSparse
+ OffloadingConnector end to end), typed construction, per-child bytes both ways,
a bad child message that changes no child, per-child stats and metrics in one
registry, and HiSparse's config found alone or as a child."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from hisparse.connectors.base import ConnectorError, KVLayout, MalformedChildMessage
from hisparse.connectors.config import hisparse_config_from
from hisparse.connectors.multi import MultiConnectorScheduler, MultiConnectorWorker
from hisparse.connectors.offloading import OffloadingScheduler, OffloadingWorker
from hisparse.connectors.wire import MULTI_MESSAGE, ChildBytes, MultiMessage
from hisparse.coordinator import HiSparseCoordinator
from hisparse.workerport import LocalWorker
from tests.connector_helpers import KV, NamedChild, children


class Fake(NamedChild):
    """A scheduler child answering a fixed number of matched tokens."""

    def __init__(self, name: str, matched: int | None, layout: KVLayout = KV,
                 pool: bool = False) -> None:
        super().__init__(name, layout)
        self.matched, self.provides_memory_pool = matched, pool
        self.allocs: list[tuple[str, int]] = []
        self.finished: list[str] = []
        self.applied: list[bytes] = []

    def get_num_new_matched_tokens(self, request_id: str, num_computed_tokens: int
                                   ) -> int | None:
        return self.matched

    def update_state_after_alloc(self, request_id: str, block_ids: Sequence[int],
                                 num_external_tokens: int) -> None:
        self.allocs.append((request_id, num_external_tokens))

    def build_connector_meta(self) -> bytes | None:
        return f"meta-{self._name}".encode()

    def parse_worker_meta(self, raw: bytes) -> object:
        if not raw.startswith(b"ok"):
            raise MalformedChildMessage(self._name, "worker meta", "not ok")
        return raw

    def apply_worker_meta(self, parsed: object) -> None:
        assert isinstance(parsed, bytes)
        self.applied.append(parsed)

    def request_finished(self, request_id: str, block_ids: Sequence[int]) -> bool:
        self.finished.append(request_id)
        return self._name == "slow"

    def get_stats(self) -> Mapping[str, int]:
        return {"allocs": len(self.allocs)}


def test_the_first_child_with_matched_tokens_loads_and_the_others_get_zero() -> None:
    a, b, c = Fake("a", 0), Fake("b", 8), Fake("c", 12)
    m = MultiConnectorScheduler([a, b, c])
    assert m.get_num_new_matched_tokens("r", 0) == 8 and m.loader("r") == "b"
    m.update_state_after_alloc("r", [1, 2], 8)
    assert (a.allocs, b.allocs, c.allocs) == ([("r", 0)], [("r", 8)], [("r", 0)])
    assert m.get_stats() == {"a": {"allocs": 1}, "b": {"allocs": 1}, "c": {"allocs": 1}}


def test_a_child_not_knowing_yet_makes_the_answer_not_known_yet() -> None:
    m = MultiConnectorScheduler([Fake("a", 0), Fake("b", None), Fake("c", 4)])
    assert m.get_num_new_matched_tokens("r", 0) is None and m.loader("r") is None
    # ... unless an earlier child matched already
    m2 = MultiConnectorScheduler([Fake("a", 4), Fake("b", None)])
    assert m2.get_num_new_matched_tokens("r", 0) == 4
    assert MultiConnectorScheduler([Fake("a", 0)]).get_num_new_matched_tokens("r", 0) == 0


def test_every_child_sees_the_end_and_any_may_delay_the_free() -> None:
    a, slow = Fake("a", 0), Fake("slow", 0)
    m = MultiConnectorScheduler([a, slow])
    assert m.request_finished("r", [1]) is True
    assert a.finished == slow.finished == ["r"]
    assert MultiConnectorScheduler([a]).request_finished("q", []) is False


def test_construction_is_checked_with_the_children_named() -> None:
    with pytest.raises(ConnectorError, match=r"a requires 4 tokens/block.*but b \(16"):
        MultiConnectorScheduler([Fake("a", 0), Fake("b", 0, KVLayout(block_tokens=16))])
    with pytest.raises(ConnectorError, match=r"HND"):
        MultiConnectorScheduler([Fake("a", 0), Fake("b", 0, KVLayout(block_tokens=4,
                                                                      cache_layout="HND"))])
    with pytest.raises(ConnectorError, match=r"\['a', 'b'\] do"):
        MultiConnectorScheduler([Fake("a", 0, pool=True), Fake("b", 0, pool=True)])
    with pytest.raises(ConnectorError, match="repeated: \\['a'\\]"):
        MultiConnectorScheduler([Fake("a", 0), Fake("a", 0)])
    with pytest.raises(ConnectorError, match="at least one child"):
        MultiConnectorScheduler([])
    assert MultiConnectorScheduler([Fake("a", 0), Fake("p", 0, pool=True)]
                                   ).memory_pool_provider == "p"


def test_worker_meta_is_per_child_bytes_and_a_bad_part_changes_no_child() -> None:
    a, b = Fake("a", 0), Fake("b", 0)
    m = MultiConnectorScheduler([a, b])
    raw = m.build_connector_meta()
    assert raw is not None
    parts = {p.child: p.data for p in MULTI_MESSAGE.validate_json(raw).parts}
    assert parts == {"a": b"meta-a", "b": b"meta-b"}

    def msg(**parts: bytes) -> bytes:
        return MULTI_MESSAGE.dump_json(MultiMessage(
            parts=tuple(ChildBytes(child=k, data=v) for k, v in parts.items())))

    with pytest.raises(MalformedChildMessage, match="child 'b'"):
        m.update_connector_output(msg(a=b"ok-1", b=b"bad"))
    assert a.applied == [] and b.applied == []  # a's good part was not applied either
    with pytest.raises(MalformedChildMessage, match="no such child"):
        m.update_connector_output(msg(a=b"ok", z=b"ok"))
    with pytest.raises(MalformedChildMessage, match="multi"):
        m.update_connector_output(b"\x00garbage")
    assert a.applied == []
    m.update_connector_output(msg(b=b"ok-2"))  # a child without a part this step
    assert (a.applied, b.applied) == ([], [b"ok-2"])


# --- HiSparse + OffloadingConnector, end to end ---------------------------------------


def _system() -> tuple[HiSparseCoordinator, MultiConnectorScheduler, MultiConnectorWorker,
                       OffloadingScheduler, OffloadingWorker, LocalWorker]:
    c = children()
    multi = MultiConnectorScheduler([c.hs, c.off])
    worker = MultiConnectorWorker([c.hs_w, c.off_w])
    return c.coord, multi, worker, c.off, c.off_w, c.port


def _one_spill_and_one_store(coord: HiSparseCoordinator, multi: MultiConnectorScheduler,
                             off_s: OffloadingScheduler, port: LocalWorker) -> bytes:
    """Admit a one-page request, spill its page and store its block: the step's
    metadata, a part for each child."""
    coord.add_request("r", ("k0",))
    adm = coord.admit("r")
    assert adm is not None
    port.admit("r", list(adm.table))
    assert coord.spill(("r", 1)) is not None
    off_s.save("r", [("h0", 0)])
    raw = multi.build_connector_meta()
    assert raw is not None
    return raw


def test_hisparse_and_offloading_compose_end_to_end() -> None:
    coord, multi, worker, off_s, off_w, port = _system()
    assert multi.memory_pool_provider == "hisparse"
    coord.add_request("r", ("k0", "k1"))
    off_s.add_request("r", ("h0", "h1"))
    adm = coord.admit("r")
    assert adm is not None
    port.admit("r", list(adm.table))
    off_w.gpu[0], off_w.gpu[1] = 7, 9
    off_s.save("r", [("h0", 0), ("h1", 1)])
    assert coord.spill(("r", 1)) is not None  # a HiSparse transfer too
    raw = multi.build_connector_meta()
    assert raw is not None
    assert [p.child for p in MULTI_MESSAGE.validate_json(raw).parts] == ["hisparse", "offload"]
    worker.bind_connector_metadata(raw)
    assert off_w.queued() == 2 and len(port.queued()) == 1
    port.land(None)
    off_w.land(None)
    multi.update_connector_output(worker.get_worker_meta())
    assert off_s.get_num_new_matched_tokens("r", 0) == 8
    stats = multi.get_stats()
    assert stats["offload"]["stores"] == 2 and stats["hisparse"]["spills"] == 1
    assert np.array_equal(off_w.host[:2], np.array([[7] * 8, [9] * 8], np.uint8))


def test_a_bad_offload_part_changes_neither_child() -> None:
    coord, multi, worker, off_s, off_w, port = _system()
    raw = _one_spill_and_one_store(coord, multi, off_s, port)
    msg = MULTI_MESSAGE.validate_json(raw)
    bad = MultiMessage(parts=(msg.parts[0], ChildBytes(child="offload", data=b"{}x")))
    with pytest.raises(MalformedChildMessage, match="child 'offload'"):
        worker.bind_connector_metadata(MULTI_MESSAGE.dump_json(bad))
    assert port.queued() == () and off_w.queued() == 0  # HiSparse's good part not bound
    worker.bind_connector_metadata(raw)
    assert len(port.queued()) == 1 and off_w.queued() == 1
    # a bad HiSparse ack up: the offload child's good acks are not consumed either
    port.land(None)
    off_w.land(None)
    up = MULTI_MESSAGE.validate_json(worker.get_worker_meta() or b"")
    before = copy.deepcopy(off_s.store.__dict__)
    bad_up = MultiMessage(parts=(ChildBytes(child="hisparse", data=b'{"enqueued": [-1]}'),
                                 *up.parts[1:]))
    with pytest.raises(MalformedChildMessage, match="child 'hisparse'"):
        multi.update_connector_output(MULTI_MESSAGE.dump_json(bad_up))
    assert off_s.store.__dict__ == before
    multi.update_connector_output(MULTI_MESSAGE.dump_json(up))
    assert off_s.store.restorable("h0")


def test_metrics_of_hisparse_and_the_children_share_one_registry() -> None:
    from hisparse.connectors.metrics import ConnectorMetrics
    from hisparse.metrics import HiSparseMetrics

    coord, multi, *_ = _system()
    hs = HiSparseMetrics(coord.config)
    cm = ConnectorMetrics(hs.registry)
    cm.observe(multi.get_stats())
    text = cm.text()
    assert 'kv_connector_stat{connector="offload",stat="stores"} 0.0' in text
    assert 'kv_connector_stat{connector="hisparse",stat="spills"} 0.0' in text
    assert "hisparse_host_blocks_total 4.0" in text


# --- HiSparse's config, alone or as a child --------------------------------------------

HS: dict[str, Any] = {"host_pool_blocks": 8, "block_tokens": 16}


def test_hisparse_config_is_found_alone_or_as_a_multiconnector_child() -> None:
    alone = {"kv_connector": "HiSparseConnector", "kv_connector_extra_config": HS}
    multi = {"kv_connector": "MultiConnector", "kv_connector_extra_config": {"connectors": [
        {"kv_connector": "OffloadingConnector", "kv_connector_extra_config": {}},
        {"kv_connector": "HiSparseConnector", "kv_connector_extra_config": HS},
    ]}}
    assert hisparse_config_from(alone) == hisparse_config_from(multi)
    assert hisparse_config_from(multi).host_pool_blocks == 8


@pytest.mark.parametrize(("doc", "match"), [
    ({"kv_connector": "NixlConnector"}, "neither HiSparseConnector"),
    ({"kv_connector": "MultiConnector", "kv_connector_extra_config": {"connectors": []}},
     "non-empty list"),
    ({"kv_connector": "MultiConnector", "kv_connector_extra_config": {"connectors": [
        {"kv_connector": "NixlConnector"}]}}, "found 0"),
    ({"kv_connector": "MultiConnector", "kv_connector_extra_config": {"connectors": [
        {"kv_connector": "HiSparseConnector", "kv_connector_extra_config": HS}] * 2}},
     "found 2"),
    ({"kv_connector": "HiSparseConnector", "kv_connector_extra_config": {"bogus": 1}},
     "bad HiSparse config"),
    ({"kv_connector": "MultiConnector", "kv_connector_extra_config": {"connectors": [
        "x"]}}, "child 0: expected an object"),
    ([1, 2], "expected an object"),
])
def test_bad_connector_configs_are_typed_errors(doc: Any, match: str) -> None:
    with pytest.raises(ConnectorError, match=match):
        hisparse_config_from(doc)


def test_a_hisparse_ack_it_refuses_leaves_the_offload_child_unchanged() -> None:
    """Well-formed bytes that HiSparse's coordinator refuses (an ack for a transfer never
    handed over): the typed refusal comes before the offload child consumes its part,
    and both are unchanged."""
    from hisparse.spec.errors import ProtocolError
    from hisparse.spec.messages import WORKER_META, HiSparseWorkerMeta

    coord, multi, worker, off_s, off_w, _port = _system()
    off_s.save("r", [("h0", 0)])
    worker.bind_connector_metadata(multi.build_connector_meta())
    off_w.land(None)
    up = MULTI_MESSAGE.validate_json(worker.get_worker_meta() or b"")
    bogus = ChildBytes(child="hisparse", data=WORKER_META.dump_json(
        HiSparseWorkerMeta(enqueued=(41,))))
    before = (coord.state.clone(), copy.deepcopy(off_s.store.__dict__))
    with pytest.raises(ProtocolError):
        multi.update_connector_output(MULTI_MESSAGE.dump_json(
            MultiMessage(parts=(bogus, *up.parts))))
    assert (coord.state.clone(), copy.deepcopy(off_s.store.__dict__)) == before


def test_oversized_bytes_are_refused_unparsed_and_change_no_child() -> None:
    """Bytes from the other process are bounded before parsing, as HiSparseConnector's
    own are (MAX_MESSAGE_BYTES): an oversized envelope, or an oversized part for any
    child, is a MalformedChildMessage that names it, and nothing is bound or consumed."""
    from hisparse.spec.messages import MAX_MESSAGE_BYTES

    coord, multi, worker, off_s, off_w, port = _system()
    raw = _one_spill_and_one_store(coord, multi, off_s, port)
    huge = b"[" * (2 * MAX_MESSAGE_BYTES * 2 + 1)
    with pytest.raises(MalformedChildMessage, match=r"multi.*over the limit"):
        worker.bind_connector_metadata(huge)
    msg = MULTI_MESSAGE.validate_json(raw)
    for i, name in enumerate(("hisparse", "offload")):
        parts = list(msg.parts)
        parts[i] = ChildBytes(child=name, data=b" " * (MAX_MESSAGE_BYTES + 1))
        with pytest.raises(MalformedChildMessage, match=rf"child '{name}'.*over the limit"):
            worker.bind_connector_metadata(MULTI_MESSAGE.dump_json(MultiMessage(parts=tuple(parts))))
        assert port.queued() == () and off_w.queued() == 0
    worker.bind_connector_metadata(raw)  # the good message still applies
    assert len(port.queued()) == 1 and off_w.queued() == 1
    port.land(None)
    off_w.land(None)
    up = MULTI_MESSAGE.validate_json(worker.get_worker_meta() or b"")
    before = copy.deepcopy(off_s.store.__dict__)
    state = coord.state.clone()
    for i, part in enumerate(up.parts):
        parts = list(up.parts)
        parts[i] = ChildBytes(child=part.child, data=b" " * (MAX_MESSAGE_BYTES + 1))
        with pytest.raises(MalformedChildMessage, match="over the limit"):
            multi.update_connector_output(MULTI_MESSAGE.dump_json(MultiMessage(parts=tuple(parts))))
        assert off_s.store.__dict__ == before and coord.state == state
    multi.update_connector_output(MULTI_MESSAGE.dump_json(up))
    assert off_s.store.restorable("h0")


def test_empty_metadata_bytes_are_refused_not_taken_for_none() -> None:
    # None means "no metadata this step"; b"" is a malformed envelope
    # (multi.py:191:none:2 took the empty bytes for None)
    coord, multi, worker, off_s, off_w, port = _system()
    raw = _one_spill_and_one_store(coord, multi, off_s, port)
    worker.bind_connector_metadata(None)
    with pytest.raises(MalformedChildMessage, match="multi"):
        worker.bind_connector_metadata(b"")
    assert port.queued() == () and off_w.queued() == 0
    worker.bind_connector_metadata(raw)
    assert len(port.queued()) == 1 and off_w.queued() == 1
    port.land(None)
    off_w.land(None)
