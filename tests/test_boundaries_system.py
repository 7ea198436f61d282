"""Coordinator, worker and connector refusals at their boundaries, and host eviction.

Every refusal is typed and leaves the protocol state, HMA's pool, the worker's tables,
queued copies and counters as they were. Host eviction is asserted directly: the
victim is the least recently published unreferenced page, never a referenced one.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

from hisparse.blockpool import BlockPool
from hisparse.config import HiSparseConfig
from hisparse.connector import HiSparseConnector, KVConnectorRole, MalformedMetadata
from hisparse.coordinator import HiSparseCoordinator, RequestNeverFits
from hisparse.executor.reference import ReferenceExecutor
from hisparse.spec.errors import ActionNotEnabled, ProtocolError, UnknownTransfer
from hisparse.spec.messages import (
    BlockTableReplacement,
    HiSparseConnectorMetadata,
    HiSparseWorkerMeta,
    SparseKVPageTransfer,
)
from hisparse.worker import HiSparseWorker, WorkerError
from tests.protocol_helpers import attributes

BT, ROW = 4, 16  # block tokens, row bytes


def config(host_blocks: int, layers: int = 1, leaders: tuple[int, ...] | None = None) -> HiSparseConfig:
    return HiSparseConfig(
        host_pool_blocks=host_blocks, block_tokens=BT, row_bytes=ROW,
        top_k=4, layers=layers, index_leaders=leaders,
    )


def coordinator(host_blocks: int = 2, gpu_blocks: int = 4) -> HiSparseCoordinator:
    c = HiSparseCoordinator(config(host_blocks), BlockPool(gpu_blocks), gpu_blocks=gpu_blocks,
                            check=True)
    for r in ("a", "b", "c", "d"):
        c.add_request(r, [f"k{r}"])
    c.add_request("ab", ["ka", "kb2"])
    return c


def snap(c: HiSparseCoordinator) -> Any:
    """The protocol state, HMA's pool and every bookkeeping field of the coordinator."""
    kv = c.kv
    assert isinstance(kv, BlockPool)
    own = {k: v for k, v in attributes(c).items() if k not in ("kv", "config", "machine")}
    return (
        c.state.clone(),
        sorted(kv._free), list(kv._is_free), set(kv._pinned),
        copy.deepcopy(own),
    )


def refused(c: HiSparseCoordinator, call: Any, error: type[Exception] = ProtocolError) -> None:
    before = snap(c)
    with pytest.raises(error):
        call()
    assert snap(c) == before


def ack(c: HiSparseCoordinator, enq: tuple[int, ...] = (), done: tuple[int, ...] = ()) -> None:
    c.take_commands()
    c.on_worker_meta(HiSparseWorkerMeta(enqueued=enq, completed=done))


def spilled(c: HiSparseCoordinator, r: str) -> int:
    """Admit r, spill its first page and ack it fully; returns the host block."""
    assert c.admit(r) is not None
    tid = c.spill((r, 1))
    assert tid is not None
    h = c.state.transfer_dst[tid]
    ack(c, (tid,), (tid,))
    assert tid not in c.state.transfer_dst  # a closed transfer leaves the table
    return h


# --- coordinator -----------------------------------------------------------------------------


def test_admit_unknown_request_is_typed() -> None:
    c = coordinator()
    refused(c, lambda: c.admit("nobody"))


def test_admit_without_blocks_changes_nothing() -> None:
    c = coordinator(gpu_blocks=2)
    assert c.admit("c") is not None
    before = snap(c)
    assert c.admit("ab") is None  # needs two, one free now (two would fit an empty pool)
    assert snap(c) == before
    assert c.admit("a") is not None  # needs exactly the one free block


def test_admit_never_fits_is_typed_and_changes_nothing() -> None:
    c = coordinator(gpu_blocks=1)
    refused(c, lambda: c.admit("ab"), RequestNeverFits)  # two pages, a one-block pool
    assert c.admit("a") is not None  # one page: exactly the pool


def test_admit_refused_by_the_machine_hands_the_blocks_back() -> None:
    c = coordinator()
    c.admit("a")
    refused(c, lambda: c.admit("a"), ActionNotEnabled)  # already running


def test_admit_reports_prefix_hits() -> None:
    c = coordinator()
    h = spilled(c, "a")
    c.finish("a")
    adm = c.admit("ab")
    assert adm is not None and adm.prefix_hits == 1 and c.prefix_hits == 1
    assert adm.table == (("host", h), ("gpu", 0))


def _open_spill(c: HiSparseCoordinator, r: str = "a") -> int:
    c.admit(r)
    tid = c.spill((r, 1))
    assert tid is not None
    return tid


@pytest.mark.parametrize(
    ("enq", "done"),
    [((7,), ()), ((), (7,)), ((), (0,)), ((0,), (1,)), ((-1,), ())],
)
def test_worker_meta_with_bad_ids_is_refused(enq: tuple[int, ...], done: tuple[int, ...]) -> None:
    c = coordinator()
    assert _open_spill(c) == 0
    c.take_commands()
    meta = HiSparseWorkerMeta.model_construct(enqueued=enq, completed=done)
    refused(c, lambda: c.on_worker_meta(meta), UnknownTransfer)


@pytest.mark.parametrize(
    ("enq", "done"), [((0, 0), ()), ((0,), (0, 0))], ids=["enqueued", "completed"]
)
def test_duplicate_ids_in_one_direction_are_refused(
    enq: tuple[int, ...], done: tuple[int, ...]
) -> None:
    c = coordinator()
    _open_spill(c)
    c.take_commands()
    meta = HiSparseWorkerMeta.model_construct(enqueued=enq, completed=done)
    refused(c, lambda: c.on_worker_meta(meta), UnknownTransfer)


def test_ack_for_a_transfer_never_handed_to_the_connector_is_refused() -> None:
    c = coordinator()
    tid = _open_spill(c)
    refused(c, lambda: c.on_worker_meta(HiSparseWorkerMeta(enqueued=(tid,))), UnknownTransfer)
    c.take_commands()
    c.on_worker_meta(HiSparseWorkerMeta(enqueued=(tid,)))  # inside: it was sent


def test_acks_in_order_across_metas() -> None:
    c = coordinator()
    tid = _open_spill(c)
    c.take_commands()
    h = c.state.transfer_dst[tid]
    c.on_worker_meta(HiSparseWorkerMeta(enqueued=(tid,)))
    refused(c, lambda: c.on_worker_meta(HiSparseWorkerMeta(enqueued=(tid,))), UnknownTransfer)
    c.on_worker_meta(HiSparseWorkerMeta(completed=(tid,)))
    refused(c, lambda: c.on_worker_meta(HiSparseWorkerMeta(completed=(tid,))), UnknownTransfer)
    assert c.state.host_state[h] == "valid"
    _, reps = c.take_commands()
    assert reps == (BlockTableReplacement(request_id="a", page_index=1, host_block=h),)
    assert c.kv.num_free == 4  # the source lease went back at the enqueued ack


def test_empty_meta_is_a_no_op() -> None:
    c = coordinator()
    _open_spill(c)
    before = snap(c)
    c.on_worker_meta(HiSparseWorkerMeta())
    assert snap(c) == before


def test_evicts_the_least_recently_used_unreferenced_page() -> None:
    c = coordinator(host_blocks=2)
    ha = spilled(c, "a")  # published first
    hb = spilled(c, "b")  # published second
    c.finish("b")  # b's page is unreferenced first: it is the least recently used
    c.finish("a")
    assert c.state.host_used == 2
    assert c.admit("c") is not None
    tid = c.spill(("c", 1))
    assert tid is not None
    assert c.state.transfer_dst[tid] == hb
    assert c.state.prefix.get("kb", set()) == set()
    assert c.state.prefix["ka"] == {ha} and c.state.host_state[ha] == "valid"


def test_eviction_order_follows_last_use_not_publish_order() -> None:
    c = coordinator(host_blocks=2)
    ha = spilled(c, "a")
    hb = spilled(c, "b")
    c.finish("a")  # now a's page is the older unreferenced one
    c.finish("b")
    assert c.admit("c") is not None
    tid = c.spill(("c", 1))
    assert tid is not None and c.state.transfer_dst[tid] == ha
    assert c.state.prefix["kb"] == {hb}


def test_never_evicts_a_referenced_page() -> None:
    c = coordinator(host_blocks=2)
    ha = spilled(c, "a")  # older, but a still reads it
    hb = spilled(c, "b")
    c.finish("b")
    assert c.admit("c") is not None
    tid = c.spill(("c", 1))
    assert tid is not None and c.state.transfer_dst[tid] == hb
    assert c.state.host_state[ha] == "valid" and c.state.prefix["ka"] == {ha}
    # nothing unreferenced is left: the spill is declined and changes nothing
    assert c.admit("d") is not None
    before = snap(c)
    assert c.spill(("d", 1)) is None
    assert snap(c) == before
    assert c.reclaim(1) == 0


def test_discarded_page_returns_to_the_free_list() -> None:
    c = coordinator(host_blocks=2)
    tid = _open_spill(c, "a")
    h = c.state.transfer_dst[tid]
    c.abort("a")
    ack(c, (tid,), (tid,))
    assert c.state.host_state[h] == "free" and c.state.host_used == 0
    assert c.kv.num_free == 4
    assert c.admit("b") is not None
    t2 = c.spill(("b", 1))
    assert t2 is not None and c.state.transfer_dst[t2] == h  # lowest free block again


def test_reclaim_stops_at_the_asked_count() -> None:
    c = coordinator(host_blocks=3)
    c.admit("ab")
    c.admit("c")
    assert c.reclaim(0) == 0
    assert c.reclaim(2) == 2
    assert c.spills == 2
    assert c.spillable() == [("c", 1)]  # oldest admission first: ab's pages, then c's


# --- worker ------------------------------------------------------------------------------------


def worker(layers: int = 1, leaders: tuple[int, ...] | None = None) -> HiSparseWorker:
    return HiSparseWorker(config(3, layers, leaders), ReferenceExecutor(), gpu_blocks=4, slots=2)


def wsnap(w: HiSparseWorker) -> Any:
    ex = w.executor
    assert isinstance(ex, ReferenceExecutor)
    pools = [ex.snapshot(h.runtime.pools) for h in w.handles]  # type: ignore[arg-type]
    return (
        copy.deepcopy(w.tables), list(w._enqueued), w.d2h_bytes, ex.queued(),
        list(w._free_slots), [{k: v.tobytes() for k, v in p.items()} for p in pools],
    )


def wrefused(w: HiSparseWorker, call: Any) -> None:
    before = wsnap(w)
    with pytest.raises(WorkerError):
        call()
    assert wsnap(w) == before


def transfer(tid: int, src: int, dst: int) -> HiSparseConnectorMetadata:
    t = SparseKVPageTransfer.model_construct(transfer_id=tid, src_gpu_block=src, dst_host_block=dst)
    return HiSparseConnectorMetadata.model_construct(transfers=(t,), replacements=())


def replacement(r: str, i: int, h: int) -> HiSparseConnectorMetadata:
    rep = BlockTableReplacement.model_construct(request_id=r, page_index=i, host_block=h)
    return HiSparseConnectorMetadata.model_construct(transfers=(), replacements=(rep,))


@pytest.mark.parametrize(("src", "dst"), [(-1, 0), (4, 0), (0, -1), (0, 3)])
def test_worker_transfer_outside(src: int, dst: int) -> None:
    w = worker()
    wrefused(w, lambda: w.apply(transfer(0, src, dst)))


def test_worker_transfer_inside_and_byte_accounting() -> None:
    w = worker(layers=3, leaders=(0, 0, 2))
    w.apply(transfer(5, 3, 2))  # the last GPU block to the last host block
    assert w.executor.queued() == [5]
    assert w.d2h_bytes == BT * ROW * 3  # one block per cache, followers included
    assert w.take_acks() == ((5,), ())
    assert w.take_acks() == ((), ())


@pytest.mark.parametrize(("i", "h"), [(0, 0), (3, 0), (1, -1), (1, 3)])
def test_worker_replacement_outside(i: int, h: int) -> None:
    w = worker()
    w.admit("r", [("gpu", 0), ("gpu", 1)])
    wrefused(w, lambda: w.apply(replacement("r", i, h)))


def test_worker_replacement_into_an_empty_table_is_refused() -> None:
    """A request admitted with no pages has no page a replacement can name: refused
    like any other misfit, nothing changed (worker.py:227:none:14 read the empty table
    as absent and failed later with an IndexError, its transfers already enqueued)."""
    w = worker()
    w.admit("r", [])
    meta = HiSparseConnectorMetadata.model_construct(
        transfers=transfer(0, 0, 0).transfers, replacements=replacement("r", 1, 0).replacements)
    wrefused(w, lambda: w.apply(meta))
    assert w.tables.tables["r"] == []


def test_worker_replacement_inside() -> None:
    w = worker()
    w.admit("r", [("gpu", 0), ("gpu", 1)])
    w.apply(replacement("r", 2, 2))
    assert w.tables.tables["r"] == [("gpu", 0), ("host", 2)]
    w.apply(replacement("gone", 9, 9))  # a finished request's entry needs no update
    assert "gone" not in w.tables.tables


def test_restart_drops_unreported_acks_and_keeps_running_copies() -> None:
    w = worker()
    w.apply(transfer(5, 3, 2))
    w.apply(transfer(6, 2, 1))
    ex = w.executor
    assert isinstance(ex, ReferenceExecutor)
    ex.release(1)  # 5 landed; neither ack was reported
    assert w.restart() == (6,)  # the stream still copies 6
    assert w.take_acks() == ((), ())  # both enqueued acks and 5's completion are gone
    ex.release()
    assert w.take_acks() == ((), (6,))  # a copy that was running reports as usual


def test_worker_slots() -> None:
    w = worker()
    assert w.admit("r", [("gpu", 0)]) == 0
    wrefused(w, lambda: w.admit("r", [("gpu", 1)]))
    assert w.admit("s", [("gpu", 1)]) == 1
    wrefused(w, lambda: w.admit("t", [("gpu", 2)]))  # both slots taken
    w.release("r")
    assert "r" not in w.tables.tables and "r" not in w.tables.slots
    w.release("r")  # releasing twice is harmless
    assert w.admit("t", [("gpu", 2)]) == 0
    assert w.tables.slots == {"s": 1, "t": 0}


def test_batch_maps_resident_and_host_pages_to_rows() -> None:
    w = worker()
    w.admit("r", [("gpu", 0), ("host", 2), ("gpu", 3)])
    pos = np.array([0, BT - 1, BT, 2 * BT + 1, -1], np.int32)
    b = w.batch({"r": pos}, step=0)
    spec = w.layout
    assert b.resident_row.tolist() == [[
        spec.resident_row(0, 0), spec.resident_row(0, BT - 1), -1, spec.resident_row(3, 1), -1
    ]]
    assert b.host_row.tolist() == [[-1, -1, spec.host_row(2, 0), -1, -1]]
    assert b.slots.tolist() == [0] and b.step == 0


def test_a_reused_slot_starts_clean() -> None:
    w = worker()
    w.admit("r", [("host", 0)])
    w.decode({0: {"r": np.arange(BT, dtype=np.int32)}}, step=0)
    pools = w.handles[0].runtime.pools
    assert (pools.hot_tag[0] != -1).any()
    w.release("r")
    assert w.admit("s", [("host", 1)]) == 0
    assert (pools.hot_tag[0] == -1).all() and (pools.hot_stamp[0] == -1).all()


def test_followers_replay_their_leaders_plan() -> None:
    w = worker(layers=2, leaders=(0, 0))
    lead, follow = (h.runtime.pools for h in w.handles)
    follow.host[:] = 9  # the follower's own bytes, unlike the leader's zeros
    w.admit("r", [("host", 0)])
    res = w.decode({0: {"r": np.arange(BT, dtype=np.int32)}}, step=0)
    plan = res.results[0].plan
    assert len(plan) == BT
    assert (follow.device[plan[:, 0]] == 9).all()
    assert (lead.device[plan[:, 0]] == 0).all()


def test_follower_h2d_bytes_count_every_replay() -> None:
    w = worker(layers=3, leaders=(0, 0, 2))
    w.admit("r", [("host", 0)])
    topk = {"r": np.arange(BT, dtype=np.int32)}
    res = w.decode({0: topk, 2: topk}, step=0)
    assert res.misses == 2 * BT  # two leaders, every position a miss
    assert res.followers == {0: 1}
    assert res.h2d_bytes == BT * ROW * (2 + 1)  # leader 0 + its follower, leader 2
    assert res.resident_hits == 0 and res.hot_hits == 0


# --- connector ---------------------------------------------------------------------------------


def test_connector_roles() -> None:
    c = coordinator()
    w = worker()
    with pytest.raises(ValueError):
        HiSparseConnector(KVConnectorRole.SCHEDULER)
    with pytest.raises(ValueError):
        HiSparseConnector(KVConnectorRole.WORKER)
    with pytest.raises(ValueError):
        HiSparseConnector(KVConnectorRole.SCHEDULER, coordinator=c, worker=w)
    sched = HiSparseConnector(KVConnectorRole.SCHEDULER, coordinator=c)
    work = HiSparseConnector(KVConnectorRole.WORKER, worker=w)
    with pytest.raises(RuntimeError):
        sched.bind_connector_metadata(HiSparseConnectorMetadata())
    with pytest.raises(RuntimeError):
        sched.get_worker_meta()
    with pytest.raises(RuntimeError):
        work.build_connector_meta()
    with pytest.raises(RuntimeError):
        work.update_connector_output(HiSparseWorkerMeta())
    sched.bind_connector_metadata(None)  # nothing to bind is no call on either side
    work.update_connector_output(None)


@pytest.mark.parametrize(
    "raw",
    [b"", b"{", b'{"enqueued": [-1]}', b'{"enqueued": [1, 1]}', b'{"extra": 1}',
     b'{"completed": ["1"]}'],
)
def test_malformed_worker_meta_bytes(raw: bytes) -> None:
    c = coordinator()
    _open_spill(c)
    conn = HiSparseConnector(KVConnectorRole.SCHEDULER, coordinator=c)
    refused(c, lambda: conn.update_connector_output(raw), MalformedMetadata)


@pytest.mark.parametrize(
    "raw",
    [b"[]", b'{"transfers": [{"transfer_id": 0, "src_gpu_block": -1, "dst_host_block": 0}]}',
     b'{"replacements": [{"request_id": "", "page_index": 1, "host_block": 0}]}',
     b'{"replacements": [{"request_id": "r", "page_index": 0, "host_block": 0}]}'],
)
def test_malformed_connector_metadata_bytes(raw: bytes) -> None:
    w = worker()
    conn = HiSparseConnector(KVConnectorRole.WORKER, worker=w)
    before = wsnap(w)
    with pytest.raises(MalformedMetadata):
        conn.bind_connector_metadata(raw)
    assert wsnap(w) == before


def test_connector_round_trip_through_bytes() -> None:
    c = coordinator()
    w = worker()
    sched = HiSparseConnector(KVConnectorRole.SCHEDULER, coordinator=c)
    work = HiSparseConnector(KVConnectorRole.WORKER, worker=w)
    assert work.get_worker_meta() is None
    adm = c.admit("a")
    assert adm is not None
    w.admit("a", adm.table)
    tid = c.spill(("a", 1))
    assert tid is not None
    meta = sched.build_connector_meta()
    assert meta is not None
    work.bind_connector_metadata(meta.model_dump_json().encode())
    up = work.get_worker_meta()
    assert up is not None and up.enqueued == (tid,) and up.completed == ()
    sched.update_connector_output(up.model_dump_json().encode())
    assert c.kv.num_free == 4
    meta = sched.build_connector_meta()  # the replacement goes down
    assert meta is not None and meta.transfers == () and len(meta.replacements) == 1
    work.bind_connector_metadata(meta)
    assert w.tables.tables["a"] == [("host", c.state.transfer_dst[tid])]


# --- messages built without validation, and oversized bytes ----------------------------------


@pytest.mark.parametrize(
    ("enq", "done"),
    [(5, ()), ((), 3), ("0", ()), (None, ()), (([0],), ()), ((0.0,), ()), ((True,), ()),
     ((), (False,)), ((0, "1"), ()), ((), ((0,),))],
    ids=["int-ids", "int-done", "str-ids", "none-ids", "list-as-id", "float-id", "bool-id",
         "bool-done", "str-id", "tuple-as-id"],
)
def test_worker_meta_of_wrong_types_is_refused_typed(enq: Any, done: Any) -> None:
    """model_construct skips validation: an int where the IDs go, a list, float or bool as
    an ID (``0.0`` and ``True`` equal a real transfer's ID) are the library's typed
    refusal, with nothing changed; before, a bare TypeError or a float accepted."""
    from hisparse.spec.errors import MalformedMessage

    c = coordinator()
    assert _open_spill(c) == 0
    c.take_commands()
    meta = HiSparseWorkerMeta.model_construct(enqueued=enq, completed=done)
    refused(c, lambda: c.on_worker_meta(meta), MalformedMessage)
    c.on_worker_meta(HiSparseWorkerMeta(enqueued=(0,), completed=(0,)))  # still works
    assert c.state.open_spills == set()


def _t(**kw: Any) -> SparseKVPageTransfer:
    fields = {"transfer_id": 0, "src_gpu_block": 0, "dst_host_block": 0, "ranks": None, **kw}
    return SparseKVPageTransfer.model_construct(**fields)


def _rep(**kw: Any) -> BlockTableReplacement:
    return BlockTableReplacement.model_construct(**{"request_id": "r", "page_index": 1,
                                                    "host_block": 0, **kw})


@pytest.mark.parametrize(
    "fields",
    [
        {"transfers": 5}, {"transfers": ("x",)}, {"transfers": (_t(transfer_id=[0]),)},
        {"transfers": (_t(transfer_id=0.0),)}, {"transfers": (_t(src_gpu_block=True),)},
        {"transfers": (_t(dst_host_block="0"),)}, {"transfers": (_t(ranks=5),)},
        # a falsy value is not None (msgshape.py:116:none:8 let ranks=0 through)
        {"transfers": (_t(ranks=0),)},
        {"transfers": (_t(ranks=(0.0,)),)}, {"replacements": 5},
        {"replacements": (_rep(request_id=5),)}, {"replacements": (_rep(page_index=1.0),)},
        {"replacements": (_rep(host_block=None),)}, {"replacements": (_t(),)},
        {"seq": "1", "since": (0,), "epoch": (0,)}, {"seq": 1, "since": 0, "epoch": (0,)},
        {"seq": 1, "since": (0,), "epoch": (0.0,)}, {"seq": 1, "since": (0,), "epoch": None},
    ],
    ids=["int-transfers", "str-transfer", "list-id", "float-id", "bool-src", "str-dst",
         "int-ranks", "zero-ranks", "float-rank", "int-replacements", "int-request", "float-page",
         "none-host", "transfer-as-replacement", "str-seq", "int-since", "float-epoch",
         "seq-without-epoch"],
)
def test_connector_metadata_of_wrong_types_is_refused_by_the_worker(fields: dict[str, Any]) -> None:
    """The same on the worker side: a WorkerError, no copy enqueued, no table changed."""
    w = worker()
    w.tables.tables["r"] = [("gpu", 0)]  # a live request, so a replacement would apply
    meta = HiSparseConnectorMetadata.model_construct(**{"transfers": (), "replacements": (),
                                                        **fields})
    wrefused(w, lambda: w.apply(meta))
    conn = HiSparseConnector(KVConnectorRole.WORKER, worker=w)
    wrefused(w, lambda: conn.bind_connector_metadata(meta))


def test_oversized_message_bytes_are_refused_before_parsing() -> None:
    """Past MAX_MESSAGE_BYTES, bytes are refused by size (not parsed: invalid JSON of
    that size gets the size refusal); at the limit, a valid message still passes."""
    from hisparse.connector import OversizedMetadata
    from hisparse.spec.messages import MAX_MESSAGE_BYTES

    big = b"[" * (MAX_MESSAGE_BYTES + 1)
    c = coordinator()
    _open_spill(c)
    sched = HiSparseConnector(KVConnectorRole.SCHEDULER, coordinator=c)
    refused(c, lambda: sched.update_connector_output(big), OversizedMetadata)
    w = worker()
    conn = HiSparseConnector(KVConnectorRole.WORKER, worker=w)
    before = wsnap(w)
    with pytest.raises(OversizedMetadata, match=f"over the limit of {MAX_MESSAGE_BYTES}"):
        conn.bind_connector_metadata(big)
    assert wsnap(w) == before
    padded = b"{}" + b" " * (MAX_MESSAGE_BYTES - 2)  # exactly the limit: parsed
    conn.bind_connector_metadata(padded)
    with pytest.raises(MalformedMetadata) as exc:  # one byte less than over, not JSON
        conn.bind_connector_metadata(b"[" * MAX_MESSAGE_BYTES)
    assert not isinstance(exc.value, OversizedMetadata)


def test_a_sequenced_metadata_that_numbers_no_rank_is_refused() -> None:
    # an empty since is a numbering of no rank, not an unsequenced message
    # (worker.py:209:none:10 read it as unsequenced and applied it)
    w = worker()
    before = wsnap(w)
    meta = HiSparseConnectorMetadata(transfers=(), seq=0, since=(), epoch=())
    with pytest.raises(WorkerError, match="connector metadata 0 numbers no epoch for rank 0"):
        w.apply(meta)
    assert wsnap(w) == before


def test_a_transfer_for_some_ranks_is_taken_by_those_ranks_only() -> None:
    # (worker.py:220:var:21 compared the ranks with the bytes copied so far)
    w = HiSparseWorker(config(3, 1, None), ReferenceExecutor(), gpu_blocks=4, slots=2, rank=1)
    mine = SparseKVPageTransfer.model_construct(transfer_id=5, src_gpu_block=0,
                                                dst_host_block=0, ranks=(1,))
    other = SparseKVPageTransfer.model_construct(transfer_id=6, src_gpu_block=1,
                                                 dst_host_block=1, ranks=(0, 2))
    every = SparseKVPageTransfer.model_construct(transfer_id=7, src_gpu_block=2,
                                                 dst_host_block=2, ranks=None)
    w.apply(HiSparseConnectorMetadata.model_construct(transfers=(mine, other, every),
                                                      replacements=()))
    assert w.executor.queued() == [5, 7]
