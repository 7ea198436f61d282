"""HiSparseConnector: carries residency work between scheduler and worker.

Shaped like vLLM's v1 KV connector without depending on it: one object per
process, constructed in a role. The scheduler role builds one
``HiSparseConnectorMetadata`` per step and consumes one ``HiSparseWorkerMeta``;
the worker role binds the former and returns the latter. Bytes crossing a
process boundary are validated once here, through the per-direction adapters.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar

from pydantic import TypeAdapter, ValidationError

from hisparse.spec.errors import ProtocolError
from hisparse.spec.messages import (
    CONNECTOR_METADATA,
    MAX_MESSAGE_BYTES,
    WORKER_META,
    HiSparseConnectorMetadata,
    HiSparseWorkerMeta,
    trusted_metadata,
    trusted_worker_meta,
)
from hisparse.spec.native import mypyc_attr

M = TypeVar("M")

if TYPE_CHECKING:
    from hisparse.coordinator import HiSparseCoordinator
    from hisparse.worker import HiSparseWorker


class MalformedMetadata(ProtocolError):
    """Bytes from the other side failed validation; nothing was applied."""


class OversizedMetadata(MalformedMetadata):
    """Bytes from the other side are longer than ``MAX_MESSAGE_BYTES``: refused unparsed."""


def _decode(adapter: TypeAdapter[M], raw: bytes, what: str) -> M:
    """Validate bytes from the other process once; a failure applies nothing. The size
    is checked first, so parsing costs at most ``MAX_MESSAGE_BYTES`` of input."""
    if len(raw) > MAX_MESSAGE_BYTES:
        raise OversizedMetadata(
            f"{what}: {len(raw)} bytes, over the limit of {MAX_MESSAGE_BYTES} bytes"
        )
    try:
        return adapter.validate_json(raw)
    except ValidationError as exc:
        raise MalformedMetadata(f"{what}: {exc}") from None


_NOT_SCHEDULER = "scheduler-side call on a worker-role connector"


class KVConnectorRole(enum.Enum):
    SCHEDULER = "scheduler"
    WORKER = "worker"


@mypyc_attr(native_class=False)  # (spec/native.py: why)
class HiSparseConnector:
    """One per process; ``role`` says which half of the methods may be called."""

    def __init__(
        self,
        role: KVConnectorRole,
        *,
        coordinator: HiSparseCoordinator | None = None,
        worker: HiSparseWorker | None = None,
    ) -> None:
        if (role is KVConnectorRole.SCHEDULER) != (coordinator is not None):
            raise ValueError("the scheduler role takes a coordinator, the worker role not")
        if (role is KVConnectorRole.WORKER) != (worker is not None):
            raise ValueError("the worker role takes a worker, the scheduler role not")
        self.role = role
        self._coordinator = coordinator
        self._worker = worker

    # -- scheduler side ---------------------------------------------------------

    @property
    def coordinator(self) -> HiSparseCoordinator:
        if self._coordinator is None:
            raise RuntimeError(_NOT_SCHEDULER)
        return self._coordinator

    def build_connector_meta(self) -> HiSparseConnectorMetadata | None:
        """This step's transfers, replacements, import commands and import aborts; None
        when there are none (no empty table).

        With tensor parallelism the same metadata goes to every rank: every rank copies
        (private pools) or orders its reads after the writer's copy (a shared pool)."""
        c = self._coordinator  # (the property's check, without a call per step)
        if c is None:
            raise RuntimeError(_NOT_SCHEDULER)
        transfers, replacements = c.take_commands()
        imports, aborts = c.take_imports()  # P/D import commands (docs/pd-import.md)
        if (
            not transfers and not replacements and not imports and not aborts
            and not c.awaiting_acks()
        ):
            return None  # (while a transfer is open one goes every step: a loss shows)
        seq, since, epoch = c.stamp_metadata()
        return trusted_metadata(transfers, replacements, seq, since, epoch, imports, aborts)

    def update_connector_output(self, worker_meta: HiSparseWorkerMeta | bytes | None) -> None:
        """Consume one rank's acks (enqueued releases sources, completed publishes).

        With tensor parallelism every rank's worker meta comes here, each naming its
        rank; the coordinator merges them by the spec's rule (docs/tensor-parallel.md)."""
        if worker_meta is None:
            return
        c = self._coordinator
        if c is None:
            raise RuntimeError(_NOT_SCHEDULER)
        if isinstance(worker_meta, bytes):
            worker_meta = _decode(WORKER_META, worker_meta, "worker meta")
        c.on_worker_meta(worker_meta)

    def on_worker_lost(self, still_copying: Sequence[int], rank: int = 0) -> None:
        """Rank ``rank``'s worker restarted or a step's metadata to or from it was lost
        (a ``MessageGap`` on either side): recover the coordinator (``still_copying`` is
        what that restarted worker's ``restart_worker`` returned). Messages sent before
        are ignored after: both sides start a new epoch of sequence numbers."""
        self.coordinator.on_worker_lost(still_copying, rank)

    # -- worker side ------------------------------------------------------------

    @property
    def worker(self) -> HiSparseWorker:
        if self._worker is None:
            raise RuntimeError("worker-side call on a scheduler-role connector")
        return self._worker

    def bind_connector_metadata(
        self, meta: HiSparseConnectorMetadata | bytes | None
    ) -> None:
        """Hand this step's commands to the worker: copies enqueue, tables update. A
        replayed metadata is ignored; ``MessageGap`` if one before it was lost (run the
        worker-loss path: ``restart_worker``, then the scheduler's ``on_worker_lost``)."""
        if meta is None:
            return
        if isinstance(meta, bytes):
            meta = _decode(CONNECTOR_METADATA, meta, "connector metadata")
        self.worker.apply(meta)

    def restart_worker(self) -> tuple[int, ...]:
        """Drop the worker's unreported acks; the transfer IDs its stream still copies."""
        return self.worker.restart()

    def get_worker_meta(self) -> HiSparseWorkerMeta | None:
        """Transfer IDs enqueued and completed since the last call, and the P/D imports
        landed, done or failed since then, numbered (a meta also answers every sequenced
        metadata the worker applied, empty if need be); None if there is nothing to send."""
        w = self.worker
        enqueued, completed = w.take_acks()
        landed, done, failed = w.take_import_acks()
        stamp = w.stamp_meta(bool(enqueued or completed or landed or done or failed))
        if stamp is None:
            return None
        epoch, since, seq = stamp
        return trusted_worker_meta(
            enqueued, completed, w.rank, seq, since, epoch, landed, done, failed
        )
