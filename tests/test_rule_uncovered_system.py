"""Rules of the scheduler, worker and import sides that lines no test ran showed: refusals
that change nothing, skipped commands that do not stop the rest, and errors named by type
and message. Found by the whole mutation run (docs/mutation-run7): no test of the
non-TLC, non-GPU suite ran these lines."""

from __future__ import annotations

import copy
import multiprocessing
import re
import signal
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from hisparse.config import HiSparseConfig
from hisparse.connectors.multi import MultiConnectorScheduler, MultiConnectorWorker
from hisparse.coordinator import HiSparseCoordinator
from hisparse.executor.layout import PoolLayout
from hisparse.executor.reference import ReferenceExecutor
from hisparse.executors import make_executor
from hisparse.pdimport import ImportRefused, ImportRunner
from hisparse.spec.errors import ActionNotEnabled, MalformedMessage, UnknownTransfer
from hisparse.spec.machine import ProtocolMachine
from hisparse.spec.messages import (
    HiSparseWorkerMeta,
    ImportCommand,
    ImportFailure,
    ImportLanded,
    PageImport,
)
from hisparse.spec.state import RequestId
from hisparse.transport import LoopbackPrefiller, LoopbackTransport, StagingPool, TransportError
from hisparse.transport.geometry import Announcement
from hisparse.worker import WorkerError
from hisparse.workerport import LocalWorker
from hisparse.workerproc import ProcessWorker, WorkerProcessError, serve
from hisparse.workerwire import Frame, blob, pack, unpack
from tests.connector_helpers import children
from tests.protocol_helpers import checked_coordinator, everything

coordinator = checked_coordinator


def spilled(c: HiSparseCoordinator, r: str) -> int:
    """Admit r (one page) and start spilling it; its transfer ID (not handed over)."""
    c.add_request(r, [f"{r}0"])
    assert c.admit(r) is not None
    tid = c.spill((r, 1))
    assert tid is not None
    return tid


# -- the coordinator: P/D import admission --------------------------------------------------


class ArrivalRefused(ProtocolMachine):
    """A machine that refuses every import arrival (the coordinator's add_import declares
    a fresh request first, so a real machine never does: this one stands in for it)."""

    def ImportArrive(self, r: RequestId) -> None:  # (the spec's action name)
        raise ActionNotEnabled("ImportArrive", f"request {r!r}: injected refusal")


def test_a_refused_import_arrival_undoes_the_declaration_and_raises() -> None:
    # kills coordinator.py:361:call:79, 362:call:80, 363:raise:7
    c, kv = coordinator()
    c.machine = ArrivalRefused(c.machine.state.config, check=True)
    before = everything(c, kv)
    with pytest.raises(ActionNotEnabled, match=r"^ImportArrive is not enabled: request 'x': "
                                                r"injected refusal$"):
        c.add_import("x", ["k1", "k2"], num_tokens=8, block_size=4)
    # aborted and retired: the ID is free again (only the check mode's record of the keys
    # ever declared keeps its keys; it never shrinks)
    assert c.state.keys_seen == {"k1", "k2"}
    c.state.keys_seen.clear()
    assert everything(c, kv) == before
    assert "x" not in c.state.req and "x" not in c.state.page_keys
    c.add_request("x", ["k1"])  # the ID may be declared again
    assert c.state.req["x"] == "new"


def test_admit_import_of_a_request_that_is_no_announced_import_is_refused_by_name() -> None:
    # kills coordinator.py:376:raise:8
    c, kv = coordinator()
    c.add_request("r", ["k1"])  # an ordinary request: no prefill KV announced
    before = everything(c, kv)
    with pytest.raises(ActionNotEnabled, match=r"^ChooseTarget is not enabled: request 'r' is "
                                                r"not an announced import$"):
        c.admit_import("r")
    assert everything(c, kv) == before


def test_an_import_admission_the_protocol_refuses_gives_back_its_gpu_and_host_blocks() -> None:
    # HMA hands out a block the protocol still sees owned (freed behind its back): the
    # AdmitImport refusal returns the GPU block to HMA and the host blocks to the free
    # list, and raises (kills coordinator.py:401:call:81, 402:call:82, 403:raise:10)
    c, kv = coordinator(gpu=2, host=4)
    for r in ("a", "b"):
        c.add_request(r, [f"{r}0"])
        assert c.admit(r) is not None
    c.add_import("x", ["x1", "x2"], num_tokens=8, block_size=4)
    assert c.admit_import("x") is None  # no GPU block for the mirror yet
    assert c.state.imp_of("x").target == "host"  # chosen once: two pages, no free block
    kv.free([0])  # HMA's view parts from the protocol's: "a" still owns block 0 there
    before = everything(c, kv)
    with pytest.raises(ActionNotEnabled, match=r"^AdmitImport is not enabled: host target "
                                                r"needs 1 distinct free GPU blocks, got \[0\]$"):
        c.admit_import("x")
    assert everything(c, kv) == before
    assert kv.num_free == 1 and c._host_free == [0, 1, 2, 3]
    assert c.take_imports() == ((), ())


def test_importing_counts_exactly_the_imports_admitted_and_not_ended() -> None:
    # kills coordinator.py:566:cmp:77
    c, _ = coordinator(gpu=4)
    assert c.importing() == 0
    c.add_import("x", ["x1"], num_tokens=4, block_size=4)
    c.add_import("y", ["y1"], num_tokens=4, block_size=4)
    assert c.importing() == 0  # announced, not admitted
    assert c.admit_import("x") == "device"
    assert c.importing() == 1  # x lands, y waits announced
    cmds, _ = c.take_imports()
    c.on_worker_meta(HiSparseWorkerMeta(
        imports_landed=(ImportLanded(import_id=cmds[0].import_id, pages=(1,)),),
        imports_done=(cmds[0].import_id,)))
    assert c.state.req["x"] == "running" and c.importing() == 0


# -- the coordinator: commands handed over -----------------------------------------------


def test_a_command_no_longer_in_flight_is_skipped_and_the_next_still_goes() -> None:
    # one rank: the first transfer's command was lost before it was handed over; the
    # second still goes (kills coordinator.py:588:loop:1)
    c, _ = coordinator(gpu=4)
    t0, t1 = spilled(c, "a"), spilled(c, "b")
    c.machine.LoseCommand(t0, 0)
    transfers, _ = c.take_commands()
    assert [(t.transfer_id, t.ranks) for t in transfers] == [(t1, None)]
    assert c._sent == [{t1}]


def test_with_ranks_a_command_no_rank_holds_is_skipped_and_the_next_still_goes() -> None:
    # two ranks: t0 lost on both (skipped), t1 on rank 0 only (goes to rank 1), t2 held by
    # both (kills coordinator.py:601:loop:2)
    c, _ = coordinator(gpu=8, ranks=2)
    t0, t1, t2 = spilled(c, "a"), spilled(c, "b"), spilled(c, "c")
    c.machine.LoseCommand(t0, 0)
    c.machine.LoseCommand(t0, 1)
    c.machine.LoseCommand(t1, 0)
    transfers, _ = c.take_commands()
    assert [(t.transfer_id, t.ranks) for t in transfers] == [(t1, (1,)), (t2, None)]
    assert c._sent == [{t2}, {t1, t2}]


def test_a_reader_rank_reporting_a_copy_still_running_is_refused_and_changes_nothing() -> None:
    # with a shared pool only rank 0 copies: rank 1's loss report naming a running copy
    # is refused (kills coordinator.py:761:raise:17)
    c, kv = coordinator(gpu=8, ranks=2, backing="shared")
    tid = spilled(c, "a")
    transfers, _ = c.take_commands()
    assert [t.transfer_id for t in transfers] == [tid]
    before = everything(c, kv)
    with pytest.raises(UnknownTransfer, match=rf"^transfer {tid}: reported copying by rank 1, "
                                              r"which copies nothing$"):
        c.on_worker_lost([tid], rank=1)
    assert everything(c, kv) == before


# -- worker meta shape -------------------------------------------------------------------


def imported(c: HiSparseCoordinator) -> int:
    """A two-page device-target import handed over; its import ID."""
    c.add_import("x", ["x1", "x2"], num_tokens=8, block_size=4)
    assert c.admit_import("x") == "device"
    cmds, _ = c.take_imports()
    return cmds[0].import_id


def unchecked_meta(**fields: Any) -> HiSparseWorkerMeta:
    base: dict[str, Any] = dict(enqueued=(), completed=(), rank=0, seq=None, since=None,
                                epoch=None, imports_landed=(), imports_done=(),
                                imports_failed=())
    return HiSparseWorkerMeta.model_construct(**{**base, **fields})


def test_a_landed_ack_whose_import_id_is_not_an_int_is_refused_and_changes_nothing() -> None:
    # False would be taken for import 0 (False == 0): refused by shape first
    # (kills msgshape.py:200:raise:4)
    c, kv = coordinator()
    iid = imported(c)
    assert iid == 0
    forged = ImportLanded.model_construct(import_id=False, pages=(1,))
    before = everything(c, kv)
    shown = "ImportLanded(import_id=False, pages=(1,)... (ImportLanded)"  # (cut at 50)
    with pytest.raises(MalformedMessage,
                       match=f"^{re.escape(f'imports_landed holds {shown}, not an ImportLanded')}$"):
        c.on_worker_meta(unchecked_meta(imports_landed=(forged,)))
    assert everything(c, kv) == before


def test_a_failed_ack_whose_import_id_is_not_an_int_is_refused_and_changes_nothing() -> None:
    # False would fail import 0 (kills msgshape.py:207:raise:6)
    c, kv = coordinator()
    iid = imported(c)
    assert iid == 0
    forged = ImportFailure.model_construct(import_id=False, reason="transport", detail="")
    before = everything(c, kv)
    shown = "ImportFailure(import_id=False, reason='t... (ImportFailure)"  # (cut at 50)
    with pytest.raises(MalformedMessage,
                       match=f"^{re.escape(f'imports_failed holds {shown}, not an ImportFailure')}$"):
        c.on_worker_meta(unchecked_meta(imports_failed=(forged,)))
    assert everything(c, kv) == before


# -- the MultiConnector -----------------------------------------------------------------


def test_a_multiconnector_asked_for_a_child_it_lacks_names_its_children() -> None:
    # kills connectors/multi.py:121:raise:6
    ch = children()
    sched = MultiConnectorScheduler([ch.hs, ch.off])
    worker = MultiConnectorWorker([ch.hs_w, ch.off_w])
    assert sched.child(ch.off.name) is ch.off and worker.child(ch.hs_w.name) is ch.hs_w
    names = [ch.hs.name, ch.off.name]
    for multi in (sched, worker):
        with pytest.raises(KeyError, match=re.escape(f"no child 'lmcache'; children: {names!r}")):
            multi.child("lmcache")


# -- the P/D import runner --------------------------------------------------------------

LAYERS, TOKENS, ROW = 2, 4, 16
PAGE = LAYERS * TOKENS * ROW
LAYOUT = PoolLayout(gpu_blocks=8, host_blocks=8, block_tokens=TOKENS, row_bytes=ROW,
                    hot_rows=4, slots=1)


def runner() -> tuple[ImportRunner, LoopbackPrefiller, StagingPool]:
    executor = ReferenceExecutor()
    pools = [executor.allocate(LAYOUT) for _ in range(LAYERS)]
    staging = StagingPool(4 * PAGE, 4, PAGE)
    peer = LoopbackPrefiller("p", np.zeros((16, PAGE), np.uint8))
    transport = LoopbackTransport(staging, 1, 1)
    transport.connect(peer)
    return ImportRunner(transport, executor, pools, LAYOUT, peer, "p"), peer, staging


def host_command(iid: int, req: str, hosts: Sequence[int], block_size: int = TOKENS
                 ) -> ImportCommand:
    return ImportCommand(
        import_id=iid, request_id=req, target="host", num_tokens=len(hosts) * block_size,
        block_size=block_size,
        pages=tuple(PageImport(page_index=i + 1, key=f"{req}:{i}", gpu_block=None,
                               host_block=h, valid_rows=block_size)
                    for i, h in enumerate(hosts)))


def runner_state(r: ImportRunner) -> Any:
    return (dict(r.live), copy.deepcopy(r.stats), copy.deepcopy(r._landed), list(r._done),
            list(r._failed), r.transport.pool.in_use, dict(r.transport.live))


def test_an_import_id_already_in_flight_is_refused_and_changes_nothing() -> None:
    # kills pdimport/runner.py:133:raise:2
    r, peer, staging = runner()
    peer.put("a", np.full((2, PAGE), 7, np.uint8))
    r.start(host_command(0, "a", [0, 1]))
    before = runner_state(r)
    with pytest.raises(ImportRefused, match=r"^import 0 is already in flight$"):
        r.start(host_command(0, "a", [0, 1]))
    assert runner_state(r) == before
    r.drain()
    assert r.take_acks()[1:] == ((0,), ()) and staging.in_use == 0


def test_blocks_of_another_size_than_the_caches_are_refused_and_change_nothing() -> None:
    # kills pdimport/runner.py:135:raise:3
    r, peer, _ = runner()
    peer.put("a", np.full((1, PAGE), 7, np.uint8))
    before = runner_state(r)
    with pytest.raises(ImportRefused, match=r"^import 3 has blocks of 8 tokens, the caches 4$"):
        r.start(host_command(3, "a", [0], block_size=8))
    assert runner_state(r) == before and r.stats.started == 0


def test_a_host_block_out_of_range_is_refused_and_changes_nothing() -> None:
    # kills pdimport/runner.py:142:raise:5
    r, peer, _ = runner()
    peer.put("a", np.full((2, PAGE), 7, np.uint8))
    before = runner_state(r)
    with pytest.raises(ImportRefused, match=r"^import 0 page 2: host block 8 out of range$"):
        r.start(host_command(0, "a", [7, LAYOUT.host_blocks]))
    assert runner_state(r) == before and r.stats.started == 0


class UnreachablePrefiller:
    """An announcement source whose prefiller does not answer."""

    def announce(self, req_id: str, num_tokens: int, row_bytes: int, block_size: int,
                 layers: int = 1) -> Announcement:
        raise TransportError(f"prefiller holding {req_id!r} does not answer")


def test_a_prefiller_that_cannot_announce_fails_the_import_as_prefiller_lost() -> None:
    # reported failed at once, nothing held (kills pdimport/runner.py:161:call:30)
    r, _, staging = runner()
    r.source = UnreachablePrefiller()
    r.start(host_command(5, "a", [0, 1]))
    landed, done, failed = r.take_acks()
    assert landed == () and done == ()
    assert failed == (ImportFailure(import_id=5, reason="prefiller_lost",
                                    detail="prefiller holding 'a' does not answer"),)
    assert r.stats.started == 1 and r.stats.failed == 1
    assert r.stats.reasons == {"prefiller_lost": 1}
    assert r.idle and staging.in_use == 0 and not r.transport.live


# -- the worker port and the worker process ------------------------------------------------

CONFIG = HiSparseConfig(host_pool_blocks=4, block_tokens=4, row_bytes=16, top_k=4, layers=1)


def test_prefill_rows_for_another_number_of_layers_are_refused_and_write_nothing() -> None:
    # kills workerport.py:113:raise:0
    port = LocalWorker(0, CONFIG, make_executor("reference", CONFIG, 16), gpu_blocks=4,
                       slots=2)
    devices = [h.runtime.pools.device for h in port.worker.handles]
    before = [d.copy() for d in devices]
    rows = np.arange(4, dtype=np.int64)
    with pytest.raises(ValueError, match=r"^prefill for 2 layers, the worker has 1$"):
        port.write_rows(rows, np.full((2, 4, CONFIG.row_bytes), 9, np.uint8))
    assert all(np.array_equal(d, b) for d, b in zip(devices, before, strict=True))


def served(frames: Sequence[bytes]) -> list[Frame]:
    """The worker child's answers to ``frames`` then ``close``, its loop run here."""
    parent, child = multiprocessing.Pipe()
    for raw in [*frames, pack("close")]:
        parent.send_bytes(raw)
    handler = signal.getsignal(signal.SIGINT)
    try:
        serve(child)  # returns after answering close
    finally:
        signal.signal(signal.SIGINT, handler)  # serve ignores SIGINT (the child's rule)
        child.close()
    answers = [unpack(parent.recv_bytes()) for _ in range(len(frames) + 1)]
    with pytest.raises(EOFError):  # one answer a frame, nothing more
        parent.recv_bytes()
    parent.close()
    return answers


def test_a_worker_child_refuses_work_before_hello_and_unknown_operations_by_name() -> None:
    # kills workerproc.py:70:raise:7 and workerproc.py:121:raise:8
    hello = {"rank": 0, "gpu_blocks": 4, "slots": 2, "executor": "reference",
             "max_positions": 16, "shared": None, "writer": True, "skip_writer_wait": False}
    answers = served([
        pack("queued"),
        pack("hello", hello, [blob(CONFIG.model_dump_json().encode())]),
        pack("defragment"),
        pack("queued"),
    ])
    assert [(a.op, a.head) for a in answers] == [
        ("error", {"type": WorkerError.__name__, "message": "'queued' before hello"}),
        ("ok", {}),
        ("error", {"type": "FrameError", "message": "unknown operation 'defragment'"}),
        ("ok", {"queued": []}),  # the refusals changed nothing
        ("ok", {}),  # close
    ]


def test_a_worker_error_of_no_known_type_comes_back_as_a_worker_process_error() -> None:
    # a decode of a request the worker never admitted fails in the child with a KeyError:
    # the parent names rank, type and message, and the worker answers on
    # (kills workerproc.py:224:raise:6)
    w = ProcessWorker(0, CONFIG, gpu_blocks=4, slots=2, executor="reference", max_positions=16)
    try:
        with pytest.raises(WorkerProcessError, match=r"^rank 0: KeyError: 'ghost'$"):
            w.decode({"ghost": np.zeros(4, np.int32)}, 0)
        assert w.queued() == () and w.d2h_bytes() == 0
    finally:
        w.close()
