"""MultiConnector: any list of connectors composed with vLLM's MultiConnector semantics.

- Loading: the first child (in order) that reports matched tokens loads the request;
  a child that answers "not known yet" (None) before one matched makes the whole
  answer None. The chosen child gets ``update_state_after_alloc`` with the external
  tokens, every other child with zero.
- Saving: every child sees every request's end (``request_finished``); the engine
  delays freeing while any child still reads the blocks.
- Metadata and worker meta: per child, each child's own bytes inside one
  ``MultiMessage``; every child's part is validated before any child applies its
  part, so a bad child message is a ``MalformedChildMessage`` that changes no child.
- Construction: unique names, one KV layout (a ``ConnectorError`` names the children
  that disagree), at most one memory-pool provider, and the child order rule below.
- Stats: per child, under the child's name.

The child order rule (``ChildOrderError``). A step is atomic only if no child can
refuse after another child changed. Parsing is already two-phase (every part is
checked before any is applied), but a child may also refuse *well-formed* bytes when it
applies them (``refuses_on_apply``): HiSparse does, because its coordinator checks acks
by the protocol machine's own rules (``MessageGap``, ``UnknownTransfer``), checking the
whole report and then applying it inside one call that changes nothing when it refuses.
Making that check a separate phase would mean a second copy of the protocol's rules
outside the coordinator (and in a worker process for ``bind``), which could drift from
the spec. So the order is enforced instead: at most one child may refuse on apply, and
it must come first. Then a step is parse all (no change), apply the first child (which
refuses, if at all, before anything changed, and changes nothing itself), apply the
others (whose parse did every check, so they cannot refuse). Any refusal in any child
position therefore changes no child's state. (A second child that refuses on apply,
say a P/D import connector, would first need a check phase that changes nothing.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Generic, TypeVar

from pydantic import ValidationError

from hisparse.connectors.base import (
    ChildOrderError,
    ConnectorError,
    KVLayout,
    MalformedChildMessage,
    SchedulerChild,
    WorkerChild,
    check_size,
)
from hisparse.connectors.wire import MULTI_MESSAGE, ChildBytes, MultiMessage
from hisparse.spec.messages import MAX_MESSAGE_BYTES

C = TypeVar("C", SchedulerChild, WorkerChild)
MULTI = "multi"


def _check_children(children: Sequence[SchedulerChild] | Sequence[WorkerChild]) -> KVLayout:
    if not children:
        raise ConnectorError("a MultiConnector needs at least one child")
    names = [c.name for c in children]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConnectorError(f"MultiConnector children need unique names; repeated: {dup}")
    first = children[0]
    odd = [c for c in children if c.layout != first.layout]
    if odd:
        parts = ", ".join(f"{c.name} ({c.layout.block_tokens} tokens/block, "
                          f"{c.layout.cache_layout})" for c in odd)
        raise ConnectorError(
            f"MultiConnector children disagree on the KV layout: {first.name} requires "
            f"{first.layout.block_tokens} tokens/block, {first.layout.cache_layout}; "
            f"but {parts}")
    _check_order(children)
    return first.layout


def _check_order(children: Sequence[SchedulerChild] | Sequence[WorkerChild]) -> None:
    """The child order rule (module docstring): at most one child refuses on apply, first."""
    names = [c.name for c in children]
    refusing = [c.name for c in children if c.refuses_on_apply]
    if len(refusing) > 1:
        raise ChildOrderError(
            f"MultiConnector children {names}: at most one child may refuse well-formed "
            f"bytes when it applies them, but {refusing} do")
    if refusing and names[0] != refusing[0]:
        order = refusing + [n for n in names if n != refusing[0]]
        raise ChildOrderError(
            f"MultiConnector children {names}: {refusing[0]!r} may refuse well-formed "
            f"bytes when it applies them, so it must come first: order {order}")


def _split(raw: bytes, names: Sequence[str], what: str) -> dict[str, bytes]:
    """The children's parts of one MultiMessage (``MalformedChildMessage`` if the
    envelope is bad or names a child not composed here)."""
    # each child's part is at most MAX_MESSAGE_BYTES, base64 in the envelope (4/3)
    check_size(raw, 2 * MAX_MESSAGE_BYTES * max(1, len(names)), MULTI, what)
    try:
        msg = MULTI_MESSAGE.validate_json(raw)
    except ValidationError as exc:
        raise MalformedChildMessage(MULTI, what, str(exc).splitlines()[0]) from None
    parts = {p.child: p.data for p in msg.parts}
    unknown = sorted(set(parts) - set(names))
    if unknown:
        raise MalformedChildMessage(unknown[0], what, f"no such child; children: {list(names)}")
    return parts


def _join(parts: Sequence[tuple[str, bytes | None]]) -> bytes | None:
    kept = tuple(ChildBytes(child=n, data=d) for n, d in parts if d is not None)
    return MULTI_MESSAGE.dump_json(MultiMessage(parts=kept)) if kept else None


class _Composite(Generic[C]):
    def __init__(self, children: Sequence[C]) -> None:
        self.layout = _check_children(children)
        self.children: tuple[C, ...] = tuple(children)
        self.names = tuple(c.name for c in children)

    def child(self, name: str) -> C:
        for c in self.children:
            if c.name == name:
                return c
        raise KeyError(f"no child {name!r}; children: {list(self.names)}")


class MultiConnectorScheduler(_Composite[SchedulerChild]):
    """The scheduler half over scheduler-side children."""

    def __init__(self, children: Sequence[SchedulerChild]) -> None:
        super().__init__(children)
        pools = [c.name for c in children if c.provides_memory_pool]
        if len(pools) > 1:
            raise ConnectorError(f"only one child may provide the memory pool; {pools} do")
        self.memory_pool_provider = pools[0] if pools else None
        self._loader: dict[str, str] = {}  # live request -> the child that loads it

    @property
    def provides_memory_pool(self) -> bool:
        return self.memory_pool_provider is not None

    def get_num_new_matched_tokens(self, request_id: str, num_computed_tokens: int
                                   ) -> int | None:
        for c in self.children:
            n = c.get_num_new_matched_tokens(request_id, num_computed_tokens)
            if n is None:
                self._loader.pop(request_id, None)
                return None
            if n > 0:
                self._loader[request_id] = c.name
                return n
        self._loader.pop(request_id, None)
        return 0

    def loader(self, request_id: str) -> str | None:
        return self._loader.get(request_id)

    def update_state_after_alloc(self, request_id: str, block_ids: Sequence[int],
                                 num_external_tokens: int) -> None:
        chosen = self._loader.get(request_id)
        for c in self.children:
            if c.name == chosen:
                c.update_state_after_alloc(request_id, block_ids, num_external_tokens)
            else:
                c.update_state_after_alloc(request_id, (), 0)

    def build_connector_meta(self) -> bytes | None:
        return _join([(c.name, c.build_connector_meta()) for c in self.children])

    def update_connector_output(self, raw: bytes | None) -> None:
        """Every child's worker meta, validated before any child consumes its part."""
        if raw is None:
            return
        parts = _split(raw, self.names, "worker meta")
        parsed = [(c, c.parse_worker_meta(parts[c.name]))
                  for c in self.children if c.name in parts]
        for c, p in parsed:
            c.apply_worker_meta(p)

    def request_finished(self, request_id: str, block_ids: Sequence[int]) -> bool:
        self._loader.pop(request_id, None)
        delays = [c.request_finished(request_id, block_ids) for c in self.children]
        return any(delays)

    def get_stats(self) -> dict[str, Mapping[str, int]]:
        return {c.name: dict(c.get_stats()) for c in self.children}


class MultiConnectorWorker(_Composite[WorkerChild]):
    """The worker half over worker-side children."""

    def bind_connector_metadata(self, raw: bytes | None) -> None:
        """Every child's metadata, validated before any child binds its part."""
        if raw is None:
            return
        parts = _split(raw, self.names, "connector metadata")
        parsed = [(c, c.parse_metadata(parts[c.name]))
                  for c in self.children if c.name in parts]
        for c, p in parsed:
            c.bind_metadata(p)

    def get_worker_meta(self) -> bytes | None:
        return _join([(c.name, c.get_worker_meta()) for c in self.children])
