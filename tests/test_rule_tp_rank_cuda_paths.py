"""Rule: the CUDA-only steps of a tensor-parallel rank, held on a CPU by stand-ins
(``hisparse/tp/run.py``).

- each rank makes its own GPU current before it builds its executor, on that GPU;
- a rank closes only after a barrier (no rank unmaps or destroys events while another
  still uses them), closes its executor, and unmaps its host pool last, once the pools
  that viewed it are collected;
- the one-time probe of a shared-backing reader, on its first step with transfers, fails
  the run when a refused command took commands or changed the reader, and counts both
  refusals otherwise;
- a reader's spill work is timed on its compute stream (it waits there for the writer's
  copy event), a writer's on its copy stream;
- each step the scheduling rank hands a shared writer every reader's read-done record,
  and a reader's wait on a record the writer never announced fails the run.

These were GPU-only mutants that survived the H200 run of ``tests/test_tp_gpu.py`` on one
GPU (docs/mutation-survivors.md, "Fourth pass"): ``410:call:0`` (no device made current:
harmless on one GPU), ``550:call:20`` (no collection before the unmap), ``551:call:21``
(never unmapped), ``544:call:5`` (no closing barrier), ``487:var:0`` (the probe's
no-change check), ``346:cmp:14`` (the streams swapped). The stand-ins replace only CuPy,
the CUDA executor and the shared host arena; the rank's loop, group and oracle are real.
The whole run's GPU-only survivors (thirteenth pass) added ``522:call:51`` (the read-done
records never passed on) and ``485:raise:2`` (the probe's unrefused wait let through).
"""

from __future__ import annotations

import gc
import json
import threading
import weakref
from collections.abc import Callable, Iterator
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from types import SimpleNamespace
from typing import Any

import pytest

import hisparse.executor.cuda as cuda_pkg
import hisparse.executor.cuda.backend as cuda_backend
import hisparse.tp.run as tp_run
from hisparse.executor.cuda.ipc import EventRing
from hisparse.executor.cuda.tp import WriterEventMissing
from hisparse.executor.reference import ReferenceExecutor
from hisparse.spec.messages import (
    CONNECTOR_METADATA,
    BlockTableReplacement,
    HiSparseConnectorMetadata,
    SparseKVPageTransfer,
)
from hisparse.tp.group import PipeGroup
from hisparse.tp.run import RankSide, TpOptions, TpRunFailed, build_executor, run_rank
from tests.test_rule_tp_run import _run as run_ranks_in_threads

# ---------------------------------------------------------------- the device of each rank


class FakeCupy:
    """``load_cupy()``'s stand-in: ``cuda.Device(d).use()`` makes ``d`` current."""

    def __init__(self) -> None:
        self.current: int | None = None
        self.cuda = self

    def Device(self, device: int) -> SimpleNamespace:  # CuPy's name
        def use() -> None:
            self.current = device

        return SimpleNamespace(use=use)


def test_each_rank_makes_its_gpu_current_before_it_builds_its_executor(
        monkeypatch: pytest.MonkeyPatch) -> None:
    cupy = FakeCupy()
    built: list[tuple[dict[str, Any], int | None]] = []

    class FakeCudaExecutor:
        def __init__(self, **shape: Any) -> None:
            built.append((shape, cupy.current))

    monkeypatch.setattr(cuda_backend, "load_cupy", lambda: cupy)
    monkeypatch.setattr(cuda_pkg, "CudaExecutor", FakeCudaExecutor)
    o = TpOptions(ranks=3, gpus=2)
    for rank in range(o.ranks):
        _, role = build_executor(o, PipeGroup(rank, o.ranks, []))
        assert role == "private"
    assert [(shape["device"], current) for shape, current in built] == [(0, 0), (1, 1), (0, 0)]
    assert {shape["top_k"] for shape, _ in built} == {o.top_k}
    assert {shape["max_positions"] for shape, _ in built} == {o.max_pages * o.block_tokens}


# ---------------------------------------------------------------- how a rank closes


class Pool:
    """The pools' stand-in: a view of the host mapping, held in a reference cycle so only
    a collection frees it once the executor lets go."""

    def __init__(self) -> None:
        self.cycle = self


class Arena:
    """The shared host arena's stand-in: its close is the unmap."""

    pinned_bytes = 4096

    def __init__(self, log: list[str], pool: Pool) -> None:
        self.log = log
        self.pool = weakref.ref(pool)

    def close(self) -> None:
        self.log.append("unmap" if self.pool() is None else "unmap with a live view")


class ClosingExecutor(ReferenceExecutor):
    """A reference executor with a host arena and a close, as the CUDA executors have.

    The ranks here are threads of one process, and a ``gc.collect`` that finds another
    thread collecting returns at once: so a rank closes only once the rank before it
    has returned (``after``), as separate processes would not need to."""

    def __init__(self, log: list[str], after: threading.Event | None) -> None:
        super().__init__()
        self.log = log
        self.after = after
        self.pool: Pool | None = Pool()
        self.host_arena = Arena(log, self.pool)

    def close(self) -> None:
        if self.after is not None:
            self.after.wait(timeout=120)  # (only a stuck rank makes this wait long)
        self.pool = None
        self.log.append("close")


class LoggingGroup(PipeGroup):
    def __init__(self, rank: int, world: int, pipes: list[Connection], log: list[str]) -> None:
        super().__init__(rank, world, pipes)
        self.log = log

    def barrier(self) -> None:
        self.log.append("barrier")
        super().barrier()


@pytest.fixture
def no_automatic_gc() -> Iterator[None]:
    """Only an explicit collection frees a cycle: the order under test is then exact."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def test_a_rank_closes_after_a_barrier_and_unmaps_last_with_no_view_left(
        monkeypatch: pytest.MonkeyPatch, no_automatic_gc: None) -> None:
    o = TpOptions(executor="reference", ranks=2, requests=4, steps=12, seed=5)
    logs: list[list[str]] = [[] for _ in range(o.ranks)]
    returned = [threading.Event() for _ in range(o.ranks)]

    def build(o: TpOptions, group: PipeGroup) -> tuple[ClosingExecutor, str]:
        r = group.rank
        return ClosingExecutor(logs[r], returned[r - 1] if r else None), "private"

    monkeypatch.setattr(tp_run, "build_executor", build)
    a, b = Pipe()
    groups = [LoggingGroup(0, 2, [a], logs[0]), LoggingGroup(1, 2, [b], logs[1])]
    reports: dict[int, dict[str, Any]] = {}
    errors: list[BaseException] = []

    def rank(r: int) -> None:
        try:
            reports[r] = run_rank(o, groups[r])
        except BaseException as e:  # reported by the main thread
            errors.append(e)
            (a if r == 0 else b).close()
        finally:
            returned[r].set()

    threads = [threading.Thread(target=rank, args=(r,), daemon=True) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:  # the limit only catches a rank stuck forever; the run takes seconds
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a rank is stuck"
    assert not errors, errors
    for r in range(2):
        assert logs[r] == ["barrier", "close", "unmap"], logs[r]
        assert reports[r]["memory"]["pinned_bytes"] == Arena.pinned_bytes
        assert reports[r]["mismatches"] == 0 and reports[r]["steps"] > 0


# ---------------------------------------------------------------- a writer learns each read


class SharedWriter(ReferenceExecutor):
    """A shared-backing writer's stand-in: it announces no copy events (every rank applies
    the commands to its own reference pools here) and logs each reader's read-done record
    the scheduling rank hands it, as ``SharedWriterExecutor.reads_done`` takes them."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[tuple[int, int]] = []

    def take_announcement(self) -> dict[int, int]:
        return {}

    def reads_done(self, rank: int, record: int) -> None:
        self.reads.append((rank, record))


class SharedReader(ReferenceExecutor):
    """A shared-backing reader's stand-in: each step's read-done event is the next record."""

    def __init__(self) -> None:
        super().__init__()
        self.records = 0

    def learn(self, announcement: dict[int, int]) -> None:
        pass

    def mark_reads(self) -> int:
        self.records += 1
        return self.records


def test_the_writer_learns_every_read_done_record_of_each_reader_every_step(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Before its copies overwrite a host slot, a shared writer waits for the readers'
    announced reads: so each step the scheduling rank passes each reader's read-done
    record to the writer, in order, and none of its own (tp/run.py:522:call:51 never
    passed them: the writer's spills were ordered after no read at all)."""
    o = TpOptions(executor="reference", ranks=2, requests=4, steps=12, seed=5)
    executors = [SharedWriter(), SharedReader()]
    monkeypatch.setattr(tp_run, "SharedWriterExecutor", SharedWriter)
    monkeypatch.setattr(tp_run, "SharedReaderExecutor", SharedReader)
    monkeypatch.setattr(tp_run, "build_executor",
                        lambda o, group: (executors[group.rank], ["writer", "reader"][group.rank]))
    monkeypatch.setattr(tp_run, "_probe_unannounced", lambda side, executor, meta: None)
    reports, _ = run_ranks_in_threads(o)
    writer, reader = executors
    assert isinstance(writer, SharedWriter) and isinstance(reader, SharedReader)
    assert reader.records == reports[1]["steps"] == reports[0]["steps"] > 0
    assert writer.reads == [(1, k) for k in range(1, reader.records + 1)]
    assert [r["role"] for r in (reports[0], reports[1])] == ["writer", "reader"]
    assert reports[0]["mismatches"] == reports[1]["mismatches"] == 0


# ---------------------------------------------------------------- a reader's one-time probe


class FakeReader:
    """A shared-backing reader's stand-in with the state the probe compares. Its view of
    the writer's events is the real host-side ring (records 1..3 announced): a wait on
    an announced record is allowed, one on a later record refused."""

    def __init__(self) -> None:
        self.queue: list[int] = []
        self._writer_record: dict[int, int] = {}
        self.stream = "compute"
        ring = EventRing(4)
        ring.announce(3)

        def wait(stream: Any, record: int) -> None:
            ring.wait_slot(record)  # EventNotRecorded unless announced

        self.writer = SimpleNamespace(ring=ring, wait=wait)

    def queued(self) -> tuple[int, ...]:
        return tuple(self.queue)

    def learn(self, announcement: dict[int, int]) -> None:  # as SharedReaderExecutor's
        if announcement:
            self.writer.ring.announce(max(announcement.values()))
            self._writer_record.update(announcement)


def _side(bind: Any) -> SimpleNamespace:
    return SimpleNamespace(report=SimpleNamespace(refusals_checked=0),
                           worker=SimpleNamespace(_enqueued=[]),
                           wconn=SimpleNamespace(bind_connector_metadata=bind))


def _refuse(_: bytes) -> None:
    raise WriterEventMissing(7)


def test_the_probe_counts_both_refusals_of_a_reader_they_leave_unchanged() -> None:
    # the probed wait names the record after the last announced one (tp/run.py:481:arith:20
    # waited on the one before it: an announced record, not refused, and the run failed)
    side = _side(_refuse)
    reader = FakeReader()
    tp_run._probe_unannounced(side, reader, "{}")  # type: ignore[arg-type]
    assert side.report.refusals_checked == 2
    assert reader.writer.ring.announced == 3  # a refused wait announces nothing


def _meta(transfers: tuple[int, ...] = (), replaced: bool = False) -> str:
    return CONNECTOR_METADATA.dump_json(HiSparseConnectorMetadata(
        transfers=tuple(SparseKVPageTransfer(transfer_id=t, src_gpu_block=t + 1,
                                             dst_host_block=t) for t in transfers),
        replacements=(BlockTableReplacement(request_id="r", page_index=1, host_block=9),)
        if replaced else ())).decode()


def test_a_reader_probes_the_refusals_once_on_the_first_step_with_transfers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A shared-backing reader's step: the writer's announcement arrives, then on the
    first step whose metadata carries transfers (and only then) the probe checks both
    refusals, then the reader learns the announcement and takes the commands
    (tp/run.py:453:not:8 never probed; tp/run.py:463:bool:0 took metadata without
    transfers, or none, for metadata with transfers)."""
    monkeypatch.setattr(tp_run, "SharedReaderExecutor", FakeReader)
    reader = FakeReader()
    refused: list[int] = []
    taken: list[str] = []

    def bind(raw: bytes) -> None:  # the reader's rule: announced copies only
        for t in CONNECTOR_METADATA.validate_json(raw).transfers:
            if t.transfer_id not in reader._writer_record:
                refused.append(t.transfer_id)
                raise WriterEventMissing(t.transfer_id)
        taken.append(raw.decode())

    side = _side(bind)
    side.executor = reader
    side.apply = lambda meta: None if meta is None else bind(meta.encode())
    steps = [(None, {}), (_meta(replaced=True), {}), (_meta((0,)), {0: 4}),
             (_meta((1, 2), replaced=True), {1: 5, 2: 5}), (None, {})]
    checked: list[int] = []
    for meta, announcement in steps:
        group = SimpleNamespace(broadcast=lambda _, a=announcement: json.dumps(a).encode())
        tp_run._take_commands(side, group, meta)  # type: ignore[arg-type]
        checked.append(side.report.refusals_checked)
    assert checked == [0, 0, 2, 2, 2]
    assert refused == [0]  # the probe's one refused take
    assert taken == [m for m, _ in steps if m is not None]
    assert reader.writer.ring.announced == 5 and sorted(reader._writer_record) == [0, 1, 2]
    assert [tp_run._has_transfers(m) for m, _ in steps] == [False, False, True, True, False]


@pytest.mark.parametrize("what", ["queue", "record", "enqueued"])
def test_the_probe_fails_the_run_when_a_refusal_changed_the_reader(what: str) -> None:
    reader = FakeReader()
    side = _side(None)

    def change_then_refuse(_: bytes) -> None:
        if what == "queue":
            reader.queue.append(1)
        elif what == "record":
            reader._writer_record[1] = 1
        else:
            side.worker._enqueued.append(1)
        raise WriterEventMissing(7)

    side.wconn.bind_connector_metadata = change_then_refuse
    with pytest.raises(TpRunFailed, match=r"^a refusal changed the reader: "):
        tp_run._probe_unannounced(side, reader, "{}")  # type: ignore[arg-type]


def test_the_probe_fails_the_run_when_a_reader_took_unannounced_commands() -> None:
    side = _side(lambda raw: None)
    with pytest.raises(TpRunFailed, match="took commands before the writer's events"):
        tp_run._probe_unannounced(side, FakeReader(), "{}")  # type: ignore[arg-type]


def test_the_probe_fails_the_run_when_a_reader_waited_on_an_unannounced_record() -> None:
    # a reader whose wait on a record the writer never announced is not refused would bind
    # to the ring slot's older record (tp/run.py:485:raise:2 let such a run go on)
    reader = FakeReader()
    reader.writer.wait = lambda stream, record: None
    side = _side(_refuse)
    with pytest.raises(TpRunFailed, match=r"^a reader waited on an unannounced record$"):
        tp_run._probe_unannounced(side, reader, "{}")  # type: ignore[arg-type]
    assert side.report.refusals_checked == 1  # the refused take was counted, the wait not


# ---------------------------------------------------------------- the stream a spill is timed on


@pytest.mark.parametrize(("cuda", "role", "stream"), [
    (True, "reader", "compute"), (True, "writer", "copy"), (True, "private", "copy"),
    (False, "reader", None), (False, "private", None),
])
def test_a_reader_times_its_spills_on_its_compute_stream(cuda: bool, role: str,
                                                         stream: str | None) -> None:
    side = SimpleNamespace(cuda=cuda, report=SimpleNamespace(role=role),
                           executor=SimpleNamespace(stream="compute", spill_stream="copy"))
    assert RankSide._spill_stream(side) == stream  # type: ignore[arg-type]


def test_a_timed_decode_reports_its_resolve_time() -> None:
    # on a GPU a rank times each resolve on its compute stream (tp/run.py:297:call:32)
    streams: list[object] = []

    def timer(stream: object) -> Callable[[], float]:
        streams.append(stream)
        return lambda: 7.0

    side = SimpleNamespace(
        worker=SimpleNamespace(config=SimpleNamespace(leaders=[0, 0]),
                               decode=lambda leaders, step: "got"),
        oracle=SimpleNamespace(decode=lambda leaders, step: "want"),
        executor=SimpleNamespace(stream="compute"), _timer=timer,
        report=SimpleNamespace(resolve_us=[], decodes=0),
        _compare=lambda got, want, tk: f"{got}/{want}")
    assert RankSide.decode(side, {"r0": [1, 2]}, 3) == "got/want"  # type: ignore[arg-type]
    assert (side.report.resolve_us, side.report.decodes, streams) == ([7.0], 1, ["compute"])


def test_a_timed_apply_reports_its_spill_time_once_per_step_with_transfers() -> None:
    """On a GPU a rank times each step's spill commands on its spill stream: one
    ``spill_us`` figure per metadata that carries transfers, none for one without, so
    the figures count the timed steps (tp/run.py:283:call:31 never reported them)."""
    streams: list[object] = []
    bound: list[bytes] = []
    applied: list[int] = []

    measured: list[float] = []

    def timer(stream: object) -> Callable[[], float]:
        streams.append(stream)

        def stop() -> float:  # each timed region's figure: a distinct value
            measured.append(7.0 + len(measured))
            return measured[-1]

        return stop

    side = SimpleNamespace(
        _timer=timer, _spill_stream=lambda: "copy",
        wconn=SimpleNamespace(bind_connector_metadata=bound.append),
        oracle=SimpleNamespace(apply=lambda parsed: applied.append(len(parsed.transfers)),
                               executor=SimpleNamespace(release=lambda: None)),
        report=SimpleNamespace(spill_us=[], spills_taken=0))
    metas = [_meta((0, 1)), _meta(replaced=True), None, _meta((2,))]
    for meta in metas:
        RankSide.apply(side, meta)  # type: ignore[arg-type]
    timed = [m for m in metas if tp_run._has_transfers(m)]
    assert side.report.spill_us == measured and len(measured) == len(timed) == 2
    assert streams == ["copy"] * len(timed)
    assert side.report.spills_taken == 3 and applied == [2, 0, 1]
    assert bound == [m.encode() for m in metas if m is not None]
