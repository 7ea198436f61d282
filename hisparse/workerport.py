"""A worker as the simulator drives it, in this process or behind a pipe.

``hisparse simulate`` talks to each worker only through ``WorkerPort``: connector
metadata goes down and worker metas come up as their wire bytes, block tables and
prefill rows go down, and a decode step comes back as its counters and the bytes of
every resolved row (what the simulator checks against its oracle). ``LocalWorker`` is
the port over a worker in this process; ``hisparse.workerproc.ProcessWorker`` is the
same port over a worker in another process, so one driver runs either.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from hisparse.config import HiSparseConfig
from hisparse.connector import HiSparseConnector, KVConnectorRole
from hisparse.executor.base import Executor
from hisparse.sharedpool import SharedHostExecutor
from hisparse.spec.messages import WORKER_META
from hisparse.spec.state import Loc, RequestId
from hisparse.worker import HiSparseWorker


@dataclass(frozen=True, eq=False)
class DecodeRows:
    """One decode step as the simulator checks it: the leaders' counters and, per layer,
    the bytes of every resolved row read back from the device (``[entries * K,
    row_bytes]``; an empty position reads row 0 and is masked by the checker)."""

    resident_hits: int
    hot_hits: int
    misses: int
    h2d_bytes: int
    seen: dict[int, NDArray[np.uint8]]
    # a reader rank of a shared host pool that decoded nothing: its reads wait on
    # these writer copies first (the driver lands them, then asks again)
    waits_on: tuple[int, ...] = ()


class WorkerPort(Protocol):
    """What the simulator may ask of one rank's worker."""

    rank: int

    def admit(self, request_id: RequestId, table: Sequence[Loc]) -> None:
        """Bind a running request's block table (and give it a hot slot)."""

    def release(self, request_id: RequestId) -> None:
        """Forget an ended request's table and slot."""

    def write_rows(self, rows: NDArray[np.int64], data: NDArray[np.uint8]) -> None:
        """Prefill: device rows ``rows`` of layer ``l`` get ``data[l]``."""

    def bind(self, raw: bytes) -> None:
        """This step's connector metadata, as its wire bytes."""

    def decode(self, topk: Mapping[RequestId, NDArray[np.int32]], step: int) -> DecodeRows:
        """Resolve every leader's top-K (the same for each) and read the rows back."""

    def queued(self) -> tuple[int, ...]:
        """Transfer IDs of the spill copies the stream has not finished, oldest first."""

    def land(self, count: int | None) -> None:
        """Let the ``count`` oldest queued copies finish (all when None)."""

    def take_meta(self) -> bytes | None:
        """The acks since the last call as worker-meta bytes; None if there are none."""

    def restart(self) -> tuple[int, ...]:
        """Lose the unreported acks; the transfer IDs the stream still copies."""

    def d2h_bytes(self) -> int:
        """Bytes this worker has queued device -> host so far."""

    def close(self) -> None:
        """Free what the port holds (a process: stop it); idempotent."""


class LocalWorker:
    """``WorkerPort`` over a ``HiSparseWorker`` in this process (and the worker-role
    connector that validates its bytes)."""

    def __init__(
        self,
        rank: int,
        config: HiSparseConfig,
        executor: Executor[Any],
        *,
        gpu_blocks: int,
        slots: int,
    ) -> None:
        self.rank = rank
        self.config = config
        self.executor = executor
        self.worker = HiSparseWorker(
            config, executor, gpu_blocks=gpu_blocks, slots=slots, rank=rank
        )
        self.conn = HiSparseConnector(KVConnectorRole.WORKER, worker=self.worker)

    def admit(self, request_id: RequestId, table: Sequence[Loc]) -> None:
        self.worker.admit(request_id, table)

    def release(self, request_id: RequestId) -> None:
        self.worker.release(request_id)

    def write_rows(self, rows: NDArray[np.int64], data: NDArray[np.uint8]) -> None:
        if data.shape[0] != len(self.worker.handles):
            raise ValueError(f"prefill for {data.shape[0]} layers, the worker has "
                             f"{len(self.worker.handles)}")
        for h in self.worker.handles:
            self.executor.write_device_rows(h.runtime.pools, rows, data[h.layer])

    def bind(self, raw: bytes) -> None:
        self.conn.bind_connector_metadata(raw)

    def writer_waits(
        self, topk: Mapping[RequestId, NDArray[np.int32]], step: int
    ) -> tuple[int, ...]:
        """A reader of a shared pool: the writer copies that the host rows of this decode
        still wait on (every host row of the batch, hit or miss: a superset). Reads
        nothing, changes nothing."""
        if not isinstance(self.executor, SharedHostExecutor) or self.executor.writer:
            return ()
        host = self.worker.batch(topk, step).host_row
        blocks = np.unique(host[host >= 0] // self.config.block_tokens).tolist()
        return tuple(sorted(set(self.executor.pending(blocks))))

    def decode(self, topk: Mapping[RequestId, NDArray[np.int32]], step: int) -> DecodeRows:
        if waits := self.writer_waits(topk, step):
            return DecodeRows(0, 0, 0, 0, {}, waits)
        leaders = self.config.leaders
        result = self.worker.decode({lead: topk for lead in set(leaders)}, step=step)
        on_host = result.results_on_host
        seen = {}
        for layer in result.rows:
            flat = np.asarray(on_host[leaders[layer]].rows).reshape(-1).astype(np.int64)
            pools = self.worker.handles[layer].runtime.pools
            seen[layer] = self.executor.read_device_rows(pools, np.where(flat >= 0, flat, 0))
        return DecodeRows(
            result.resident_hits, result.hot_hits, result.misses, result.h2d_bytes, seen
        )

    def queued(self) -> tuple[int, ...]:
        return tuple(self.executor.queued())

    def land(self, count: int | None) -> None:
        self.executor.release(count)

    def take_meta(self) -> bytes | None:
        meta = self.conn.get_worker_meta()
        return None if meta is None else WORKER_META.dump_json(meta)

    def restart(self) -> tuple[int, ...]:
        return self.conn.restart_worker()

    def d2h_bytes(self) -> int:
        return self.worker.d2h_bytes

    def close(self) -> None:
        pass
