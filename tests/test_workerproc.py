"""A worker in its own process: frames are checked, the worker's refusals come back as
the same typed errors and change nothing, and a worker that dies or hangs is stopped
with a ``WorkerProcessError`` instead of hanging or orphaning the simulator's child."""

from __future__ import annotations

import multiprocessing
import os
import signal
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

from hisparse.config import HiSparseConfig
from hisparse.connector import MalformedMetadata
from hisparse.simulate import SimulateOptions, Simulation
from hisparse.spec.messages import (
    CONNECTOR_METADATA,
    WORKER_META,
    HiSparseConnectorMetadata,
    SparseKVPageTransfer,
)
from hisparse.worker import WorkerError
from hisparse.workerproc import ProcessWorker, WorkerProcessError
from hisparse.workerwire import FrameError, blob, pack, unpack

CONFIG = HiSparseConfig(host_pool_blocks=4, block_tokens=4, row_bytes=16, top_k=4, layers=1)


def _meta(tid: int, src: int, dst: int) -> bytes:
    t = SparseKVPageTransfer(transfer_id=tid, src_gpu_block=src, dst_host_block=dst)
    return CONNECTOR_METADATA.dump_json(HiSparseConnectorMetadata(transfers=(t,)))


def test_frames_round_trip_and_bad_ones_are_named() -> None:
    arrays: list[NDArray[Any]] = [np.arange(6, dtype=np.int64).reshape(2, 3), blob(b"xyz"), np.zeros(0, np.int32)]
    f = unpack(pack("decode", {"step": 3}, arrays))
    assert f.op == "decode" and f.head == {"step": 3}
    assert all(np.array_equal(a, b) and a.dtype == b.dtype for a, b in zip(f.arrays, arrays,
                                                                            strict=True))
    good = pack("ok", {}, [blob(b"ab")])
    for bad, why in [(b"\x01", "shorter than its length"), (good[:-1], "shorter than its arrays"),
                     (good + b"!", "stray bytes"), (b"\x02\x00\x00\x00{]", "bad frame header")]:
        with pytest.raises(FrameError, match=why):
            unpack(bad)
    with pytest.raises(FrameError, match="not <f8"):
        pack("x", None, [np.zeros(1)])
    # every dimension of an array is checked, not one (workerwire.py:68:collection:0)
    ok = pack("x", {}, [np.zeros((2, 3), np.int64)])
    n = int.from_bytes(ok[:4], "little")
    for shape in (b"[2, -3]", b"[-2, 3]", b'[2, "3"]', b"[2, 3.0]"):
        header = ok[4:4 + n].replace(b"[2, 3]", shape)
        bad = len(header).to_bytes(4, "little") + header + ok[4 + n:]
        with pytest.raises(FrameError, match=r"^bad array in frame: <i8 \["):
            unpack(bad)


def test_a_worker_process_answers_as_bytes_and_refuses_typed() -> None:
    w = ProcessWorker(0, CONFIG, gpu_blocks=4, slots=2, executor="reference", max_positions=16)
    try:
        w.admit("r", [("gpu", 0)])
        with pytest.raises(WorkerError, match="already admitted"):
            w.admit("r", [("gpu", 1)])
        with pytest.raises(MalformedMetadata):
            w.bind(b"{")
        with pytest.raises(WorkerError, match="out-of-range"):
            w.bind(_meta(0, 9, 0))
        assert w.queued() == () and w.d2h_bytes() == 0  # the refusals changed nothing
        w.bind(_meta(0, 0, 1))
        assert w.queued() == (0,) and w.d2h_bytes() == 4 * 16
        first = w.take_meta()
        assert first is not None and WORKER_META.validate_json(first).enqueued == (0,)
        w.land(None)
        done = w.take_meta()
        assert done is not None and WORKER_META.validate_json(done).completed == (0,)
        assert w.take_meta() is None and w.restart() == ()
    finally:
        w.close()
    assert not w._proc.is_alive()
    with pytest.raises(WorkerProcessError, match="stopped"):
        w.queued()


def test_a_dead_worker_process_is_an_error_not_a_hang() -> None:
    w = ProcessWorker(0, CONFIG, gpu_blocks=4, slots=2, executor="reference", max_positions=16)
    assert w.pid is not None
    os.kill(w.pid, signal.SIGKILL)
    w._proc.join()
    with pytest.raises(WorkerProcessError, match="gone"):
        w.queued()
    assert not w._proc.is_alive()
    # the port is closed with it: a later call is refused as stopped (workerproc.py's
    # 213:call:30 left it open, to find the same dead pipe again)
    with pytest.raises(WorkerProcessError, match="the worker process was stopped"):
        w.queued()


def test_a_silent_worker_process_times_out_and_is_stopped() -> None:
    w = ProcessWorker(0, CONFIG, gpu_blocks=4, slots=2, executor="reference", max_positions=16,
                      timeout_s=0.5)
    assert w.pid is not None
    os.kill(w.pid, signal.SIGSTOP)
    with pytest.raises(WorkerProcessError, match=r"no answer to 'queued' within 0\.5 s"):
        w.queued()
    assert not w._proc.is_alive()


def test_a_failing_run_leaves_no_worker_process(monkeypatch: pytest.MonkeyPatch) -> None:
    others = set(multiprocessing.active_children())
    sim = Simulation(SimulateOptions(requests=8, steps=50, seed=0, tp=2, worker_processes=True))
    ours = set(multiprocessing.active_children()) - others
    assert sorted(p.name for p in ours) == ["hisparse-worker-0", "hisparse-worker-1"]
    calls = {"n": 0}
    real = sim.step

    def failing(t: int) -> None:
        calls["n"] += 1
        if calls["n"] == 5:
            raise RuntimeError("engine crashed")
        real(t)

    monkeypatch.setattr(sim, "step", failing)
    with pytest.raises(RuntimeError, match="engine crashed"):
        sim.run()
    assert not any(p.is_alive() for p in ours)


def test_a_closed_worker_process_is_let_exit_on_its_own() -> None:
    # close asks the child to exit and waits for it: a clean exit (0), not a SIGTERM
    # (workerproc.py:137:call:2 terminated the child as soon as it had answered)
    w = ProcessWorker(0, CONFIG, gpu_blocks=4, slots=2, executor="reference", max_positions=16)
    w.admit("r", [("gpu", 0)])
    w.close()
    assert not w._proc.is_alive() and w._proc.exitcode == 0
    w.close()  # a second close does nothing
    assert w._proc.exitcode == 0


def test_a_worker_that_outlives_terminate_is_killed() -> None:
    # (workerproc.py:142:call:8: no real worker ignores SIGTERM, so a stand-in does)
    from hisparse.workerproc import _stop

    calls: list[str] = []

    class Stubborn:
        alive = True

        def join(self, timeout: float | None = None) -> None:
            calls.append(f"join {timeout}")

        def is_alive(self) -> bool:
            return self.alive

        def terminate(self) -> None:
            calls.append("terminate")  # ignored

        def kill(self) -> None:
            calls.append("kill")
            self.alive = False

    class Gone:
        def send_bytes(self, raw: bytes) -> None:
            raise OSError("the pipe is closed")

        def close(self) -> None:
            calls.append("close")

    _stop(Stubborn(), Gone())  # type: ignore[arg-type]
    assert calls == ["close", "join 5", "terminate", "join 5", "kill", "join None"]


def test_a_worker_process_whose_start_fails_is_stopped_at_once() -> None:
    # the refused hello stops the child before the error reaches the caller, while the
    # caller still holds the error (workerproc.py:184:call:28 left it to the finalizer)
    before = {p.pid for p in multiprocessing.active_children()}
    with pytest.raises(Exception, match="executor") as err:
        ProcessWorker(0, CONFIG, gpu_blocks=4, slots=2, executor="abacus", max_positions=16)
    assert err.value is not None
    started = [p for p in multiprocessing.active_children() if p.pid not in before]
    assert started == []


def test_a_call_over_a_closed_pipe_is_refused_as_stopped() -> None:
    # a closed pipe alone refuses, before any send (workerproc.py:203:bool:0 wanted the
    # process stopped too)
    w = ProcessWorker(0, CONFIG, gpu_blocks=4, slots=2, executor="reference", max_positions=16)
    try:
        w._conn.close()
        with pytest.raises(WorkerProcessError, match="the worker process was stopped"):
            w.queued()
    finally:
        w.close()
    assert not w._proc.is_alive()
