"""HiSparseConnector as a MultiConnector child (both halves), unchanged inside: the
scheduler half answers with the HiSparse host prefix hit and admits with the external
tokens it was given (a capped hit when the indexer suffix rule falls back); the worker
half hands its part of the metadata to a worker port as bytes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hisparse.connector import HiSparseConnector
from hisparse.connectors.base import KVLayout, parse_child
from hisparse.coordinator import Admission
from hisparse.spec.messages import (
    CONNECTOR_METADATA,
    WORKER_META,
    HiSparseConnectorMetadata,
    HiSparseWorkerMeta,
)
from hisparse.workerport import WorkerPort

NAME = "hisparse"


class HiSparseSchedulerChild:
    """The scheduler half; it provides the memory pool (the host tier's)."""

    provides_memory_pool = True
    refuses_on_apply = True  # the coordinator's protocol checks (MessageGap, UnknownTransfer)

    def __init__(self, conn: HiSparseConnector, layout: KVLayout, name: str = NAME) -> None:
        self.conn, self._layout, self._name = conn, layout, name
        self._external: dict[str, int] = {}  # live request -> external tokens given
        self._staged: HiSparseConnectorMetadata | None = None
        self._is_staged = False

    @property
    def name(self) -> str:
        return self._name

    @property
    def layout(self) -> KVLayout:
        return self._layout

    def get_num_new_matched_tokens(self, request_id: str, num_computed_tokens: int
                                   ) -> int | None:
        hit = self.conn.coordinator.lookup_prefix(request_id) * self._layout.block_tokens
        return max(0, hit - num_computed_tokens)

    def update_state_after_alloc(self, request_id: str, block_ids: Sequence[int],
                                 num_external_tokens: int) -> None:
        self._external[request_id] = num_external_tokens

    def admit(self, request_id: str) -> Admission | None:
        """The coordinator's admission with the hit capped at the external tokens."""
        tokens = self._external.get(request_id, 0)
        adm = self.conn.coordinator.admit(request_id, tokens // self._layout.block_tokens)
        if adm is not None:
            self._external.pop(request_id, None)
        return adm

    def stage(self, meta: HiSparseConnectorMetadata | None) -> None:
        """The commands this step already took from the coordinator (a driver that
        takes them itself, as the simulator does): the next build sends these."""
        self._staged, self._is_staged = meta, True

    def build_connector_meta(self) -> bytes | None:
        if self._is_staged:
            meta, self._staged, self._is_staged = self._staged, None, False
        else:
            meta = self.conn.build_connector_meta()
        return None if meta is None else CONNECTOR_METADATA.dump_json(meta)

    def parse_worker_meta(self, raw: bytes) -> HiSparseWorkerMeta:
        return parse_child(WORKER_META, raw, self._name, "worker meta")

    def apply_worker_meta(self, parsed: object) -> None:
        if not isinstance(parsed, HiSparseWorkerMeta):
            raise TypeError(f"expected HiSparseWorkerMeta, got {type(parsed).__name__}")
        self.conn.update_connector_output(parsed)

    def request_finished(self, request_id: str, block_ids: Sequence[int]) -> bool:
        self._external.pop(request_id, None)
        return False  # the coordinator's leases, not the engine, keep its pages

    def get_stats(self) -> Mapping[str, int]:
        c = self.conn.coordinator
        return {"spills": c.spills, "prefix_hits": c.prefix_hits, "retired": c.retired,
                "host_blocks_used": c.state.host_used}


class HiSparseWorkerChild:
    """The worker half over one worker port (in this process or another)."""

    refuses_on_apply = True  # the worker's sequence check (MessageGap)

    def __init__(self, port: WorkerPort, layout: KVLayout, name: str = NAME) -> None:
        self.port, self._layout, self._name = port, layout, name

    @property
    def name(self) -> str:
        return self._name

    @property
    def layout(self) -> KVLayout:
        return self._layout

    def parse_metadata(self, raw: bytes) -> bytes:
        parse_child(CONNECTOR_METADATA, raw, self._name, "connector metadata")
        return raw

    def bind_metadata(self, parsed: object) -> None:
        if not isinstance(parsed, bytes):
            raise TypeError(f"expected the metadata's bytes, got {type(parsed).__name__}")
        self.port.bind(parsed)

    def get_worker_meta(self) -> bytes | None:
        return self.port.take_meta()
