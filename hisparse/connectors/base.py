"""What every MultiConnector child provides, and the typed errors of composition.

Shaped like vLLM's v1 KV connector halves without depending on it: the scheduler half
answers prefix lookups, builds one metadata (bytes) per step and consumes worker meta
(bytes); the worker half binds metadata and reports acks. Parsing is separate from
applying, so a composite validates every child's bytes before any child changes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from hisparse.spec.errors import ProtocolError
from hisparse.spec.messages import MAX_MESSAGE_BYTES

T = TypeVar("T")


class KVLayout(BaseModel):
    """The KV cache layout a child requires: children of one MultiConnector must agree."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    block_tokens: int = Field(ge=1)
    cache_layout: Literal["NHD", "HND"] = "NHD"


class ConnectorError(ValueError):
    """A connector was configured or composed wrongly (construction time)."""


class ChildOrderError(ConnectorError):
    """The children are composed in an order that would let one child's refusal follow
    another child's change (see multi.py): the message names the children and the
    order required."""


class MalformedChildMessage(ProtocolError):
    """Bytes for one child failed validation; no child's state changed."""

    def __init__(self, child: str, what: str, detail: str) -> None:
        super().__init__(f"{what} for child {child!r}: {detail}")
        self.child = child


def parse_child(adapter: TypeAdapter[T], raw: bytes, child: str, what: str) -> T:
    """One child's bytes, bounded (``MAX_MESSAGE_BYTES``) then validated, or
    ``MalformedChildMessage`` naming the child; nothing is changed either way."""
    check_size(raw, MAX_MESSAGE_BYTES, child, what)
    try:
        return adapter.validate_json(raw)
    except ValidationError as exc:
        raise MalformedChildMessage(child, what, str(exc).splitlines()[0]) from None


def check_size(raw: bytes, limit: int, child: str, what: str) -> None:
    """Refuse bytes longer than ``limit`` before any parsing, so a child's message costs
    bounded memory (``MalformedChildMessage``; nothing changed)."""
    if len(raw) > limit:
        raise MalformedChildMessage(child, what, f"{len(raw)} bytes, over the limit of {limit}")


class SchedulerChild(Protocol):
    """The scheduler half of a connector, as a MultiConnector drives it."""

    @property
    def name(self) -> str: ...
    @property
    def layout(self) -> KVLayout: ...
    @property
    def provides_memory_pool(self) -> bool: ...
    @property
    def refuses_on_apply(self) -> bool:
        """True: ``apply_worker_meta`` may refuse bytes ``parse_worker_meta`` accepted
        (changing nothing itself); such a child must be a MultiConnector's first."""

    def get_num_new_matched_tokens(self, request_id: str, num_computed_tokens: int
                                   ) -> int | None:
        """Tokens this child can load beyond ``num_computed_tokens``; None: not known yet."""

    def update_state_after_alloc(self, request_id: str, block_ids: Sequence[int],
                                 num_external_tokens: int) -> None: ...
    def build_connector_meta(self) -> bytes | None: ...
    def parse_worker_meta(self, raw: bytes) -> object:
        """Validate worker meta bytes (``MalformedChildMessage``); change nothing."""

    def apply_worker_meta(self, parsed: object) -> None: ...
    def request_finished(self, request_id: str, block_ids: Sequence[int]) -> bool:
        """True: the child still reads the blocks (the engine delays freeing them)."""

    def get_stats(self) -> Mapping[str, int]: ...


class WorkerChild(Protocol):
    """The worker half of a connector."""

    @property
    def name(self) -> str: ...
    @property
    def layout(self) -> KVLayout: ...
    @property
    def refuses_on_apply(self) -> bool:
        """True: ``bind_metadata`` may refuse bytes ``parse_metadata`` accepted
        (changing nothing itself); such a child must be a MultiConnector's first."""

    def parse_metadata(self, raw: bytes) -> object:
        """Validate metadata bytes (``MalformedChildMessage``); change nothing."""

    def bind_metadata(self, parsed: object) -> None: ...
    def get_worker_meta(self) -> bytes | None: ...
