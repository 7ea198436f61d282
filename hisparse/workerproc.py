"""One worker in its own process: the ``WorkerPort`` of a ``LocalWorker`` over a pipe.

The child is started with ``spawn`` (a fresh interpreter, nothing inherited but the
pipe) and is told everything else in bytes: its configuration as the config's JSON,
then one frame (``hisparse.workerwire``) per call. Every read of an answer has a
timeout; a worker that does not answer in time, or whose process died, is stopped and
the call fails with ``WorkerProcessError``. A child whose parent went away reads end
of file and exits, so no worker outlives its simulator.
"""

from __future__ import annotations

import multiprocessing
import signal
import weakref
from collections.abc import Mapping, Sequence
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
from numpy.typing import NDArray

from hisparse.config import HiSparseConfig
from hisparse.connector import MalformedMetadata
from hisparse.executor.base import Executor
from hisparse.executor.errors import BadBatch, BadHostRead, BadPlan, BadTransfer
from hisparse.executors import make_executor
from hisparse.sharedpool import ReadBeforeWriterEvent, SharedHostExecutor, SharedHostPool
from hisparse.spec.errors import MessageGap
from hisparse.spec.state import Loc, RequestId
from hisparse.worker import WorkerError
from hisparse.workerport import DecodeRows, LocalWorker
from hisparse.workerwire import Frame, FrameError, blob, pack, unpack

ANSWER_TIMEOUT_S = 60.0  # a step's call takes milliseconds
START_TIMEOUT_S = 120.0  # a fresh interpreter importing NumPy and pydantic: seconds
# errors the child reports that are raised here as the same type (one-message ones)
_SAME_TYPE: dict[str, type[Exception]] = {
    cls.__name__: cls
    for cls in (WorkerError, MessageGap, MalformedMetadata, BadTransfer, BadBatch, BadPlan,
                BadHostRead, ReadBeforeWriterEvent, FrameError, ValueError)
}


class WorkerProcessError(RuntimeError):
    """The worker process failed, died or did not answer in time (it has been stopped)."""


# -- the child ------------------------------------------------------------------------


def serve(conn: Connection) -> None:
    """The child's loop: one answer per frame until ``close`` or end of file."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us, not Ctrl-C
    port: LocalWorker | None = None
    while True:
        try:
            raw = conn.recv_bytes()
        except (EOFError, OSError):
            return  # the parent is gone
        try:
            frame = unpack(raw)
            if frame.op == "close":
                conn.send_bytes(pack("ok"))
                return
            if frame.op == "hello":
                port = _start(frame)
                answer = pack("ok")
            elif port is None:
                raise WorkerError(f"{frame.op!r} before hello")
            else:
                answer = _answer(port, frame)
        except Exception as exc:  # reported to the parent, which raises it there
            answer = pack("error", {"type": type(exc).__name__, "message": str(exc)})
        conn.send_bytes(answer)


def _start(frame: Frame) -> LocalWorker:
    h = frame.head
    config = HiSparseConfig.model_validate_json(frame.arrays[0].tobytes())
    executor: Executor[Any]
    if h["shared"] is None:
        executor = make_executor(h["executor"], config, h["max_positions"])
    else:  # the parent's allocation, mapped here (the parent frees it)
        pool = SharedHostPool(config.pool_layout(h["gpu_blocks"], h["slots"]), config.layers,
                              name=h["shared"])
        executor = SharedHostExecutor(pool, writer=h["writer"],
                                      skip_writer_wait=h["skip_writer_wait"])
    return LocalWorker(h["rank"], config, executor, gpu_blocks=h["gpu_blocks"], slots=h["slots"])


def _answer(port: LocalWorker, f: Frame) -> bytes:
    h, a = f.head, f.arrays
    if f.op == "admit":
        port.admit(h["request"], [(w, int(b)) for w, b in h["table"]])
    elif f.op == "release":
        port.release(h["request"])
    elif f.op == "write_rows":
        port.write_rows(a[0], a[1])
    elif f.op == "bind":
        port.bind(a[0].tobytes())
    elif f.op == "decode":
        rows = port.decode(dict(zip(h["requests"], a, strict=True)), h["step"])
        layers = sorted(rows.seen)
        counts = {"resident_hits": rows.resident_hits, "hot_hits": rows.hot_hits,
                  "misses": rows.misses, "h2d_bytes": rows.h2d_bytes, "layers": layers}
        counts["waits_on"] = list(rows.waits_on)
        return pack("ok", counts, [rows.seen[layer] for layer in layers])
    elif f.op == "queued":
        return pack("ok", {"queued": list(port.queued())})
    elif f.op == "land":
        port.land(h["count"])
    elif f.op == "take_meta":
        meta = port.take_meta()
        return pack("ok", {}, [] if meta is None else [blob(meta)])
    elif f.op == "restart":
        return pack("ok", {"copying": list(port.restart())})
    elif f.op == "d2h_bytes":
        return pack("ok", {"d2h_bytes": port.d2h_bytes()})
    else:
        raise FrameError(f"unknown operation {f.op!r}")
    return pack("ok")


# -- the parent's side ------------------------------------------------------------------


def _stop(proc: multiprocessing.process.BaseProcess, conn: Connection) -> None:
    """Ask the child to exit, then make sure it has (terminate, then kill)."""
    try:
        conn.send_bytes(pack("close"))
        if conn.poll(5):
            conn.recv_bytes()
    except (OSError, EOFError, ValueError):
        pass
    conn.close()
    proc.join(5)
    if proc.is_alive():
        proc.terminate()
        proc.join(5)
    if proc.is_alive():
        proc.kill()
        proc.join()


class ProcessWorker:
    """``WorkerPort`` over a worker process; ``close()`` (or garbage collection, or
    interpreter exit) stops it."""

    def __init__(
        self,
        rank: int,
        config: HiSparseConfig,
        *,
        gpu_blocks: int,
        slots: int,
        executor: str,
        max_positions: int,
        shared: str | None = None,
        writer: bool = True,
        skip_writer_wait: bool = False,
        timeout_s: float = ANSWER_TIMEOUT_S,
    ) -> None:
        """``shared``: the name of the ``SharedHostPool`` this rank maps (None: its own
        host pools); ``writer``: whether it copies into it; ``skip_writer_wait``: an
        injected bug for tests (a reader that does not wait on the writer's events)."""
        self.rank = rank
        self.timeout_s = timeout_s
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(
            target=serve, args=(child,), name=f"hisparse-worker-{rank}", daemon=True
        )
        self._proc.start()
        child.close()
        self._stopper = weakref.finalize(self, _stop, self._proc, self._conn)
        head = {"rank": rank, "gpu_blocks": gpu_blocks, "slots": slots,
                "executor": executor, "max_positions": max_positions, "shared": shared,
                "writer": writer, "skip_writer_wait": skip_writer_wait}
        try:
            self._call("hello", head, [blob(config.model_dump_json().encode())],
                       timeout_s=START_TIMEOUT_S)
        except BaseException:
            self.close()
            raise

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    def close(self) -> None:
        self._stopper()

    def _kill(self) -> None:
        self._stopper.detach()
        self._proc.kill()
        self._proc.join()
        self._conn.close()

    def _call(self, op: str, head: dict[str, Any] | None = None,
              arrays: Sequence[NDArray[Any]] = (), timeout_s: float | None = None) -> Frame:
        wait = self.timeout_s if timeout_s is None else timeout_s
        if not self._stopper.alive or self._conn.closed:
            raise WorkerProcessError(f"rank {self.rank}: the worker process was stopped")
        frame = pack(op, head, arrays)  # a FrameError here is the caller's: nothing sent
        try:
            self._conn.send_bytes(frame)
            if not self._conn.poll(wait):
                self._kill()  # it does not answer: no polite close either
                raise WorkerProcessError(
                    f"rank {self.rank}: no answer to {op!r} within {wait:g} s")
            answer = unpack(self._conn.recv_bytes())
        except (EOFError, OSError) as exc:
            self.close()
            raise WorkerProcessError(
                f"rank {self.rank}: the worker process is gone ({type(exc).__name__})"
            ) from None
        except (WorkerProcessError, FrameError):
            self.close()
            raise
        if answer.op == "error":
            kind, message = answer.head["type"], answer.head["message"]
            cls = _SAME_TYPE.get(kind)
            if cls is None:
                raise WorkerProcessError(f"rank {self.rank}: {kind}: {message}")
            raise cls(message)
        return answer

    # -- the port ---------------------------------------------------------------------

    def admit(self, request_id: RequestId, table: Sequence[Loc]) -> None:
        self._call("admit", {"request": request_id, "table": [[w, int(b)] for w, b in table]})

    def release(self, request_id: RequestId) -> None:
        self._call("release", {"request": request_id})

    def write_rows(self, rows: NDArray[np.int64], data: NDArray[np.uint8]) -> None:
        self._call("write_rows", None, [np.asarray(rows, np.int64), data])

    def bind(self, raw: bytes) -> None:
        self._call("bind", None, [blob(raw)])

    def decode(self, topk: Mapping[RequestId, NDArray[np.int32]], step: int) -> DecodeRows:
        names = list(topk)
        answer = self._call("decode", {"requests": names, "step": step},
                            [np.asarray(topk[r], np.int32) for r in names])
        h = answer.head
        seen = dict(zip(h["layers"], answer.arrays, strict=True))
        return DecodeRows(h["resident_hits"], h["hot_hits"], h["misses"], h["h2d_bytes"], seen,
                          tuple(h["waits_on"]))

    def queued(self) -> tuple[int, ...]:
        return tuple(int(t) for t in self._call("queued").head["queued"])

    def land(self, count: int | None) -> None:
        self._call("land", {"count": count})

    def take_meta(self) -> bytes | None:
        arrays = self._call("take_meta").arrays
        return arrays[0].tobytes() if arrays else None

    def restart(self) -> tuple[int, ...]:
        return tuple(int(t) for t in self._call("restart").head["copying"])

    def d2h_bytes(self) -> int:
        return int(self._call("d2h_bytes").head["d2h_bytes"])
