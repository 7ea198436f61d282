"""The decoder side of a NIXL import: READ announced DRAM pages into staging slots.

The staging pool's buffer is registered once with the decoder's agent, block memory (a
device pool, for the device target) when ``register`` is called; each chunk is one NIXL
READ whose local descriptors are its checked destinations (valid rows only, one segment
per layer: a final page that is not full reads its valid rows) and whose remote
descriptors are the checked announcement's. A NIXL exception or an ``ERR`` state (a
prefiller gone) fails that request's import with ``ImportFailed``; other imports are
untouched.

With a ``DeviceStagingPool`` (the CUDA executor) the staging buffer and the block memory
are registered as ``VRAM`` on their GPU and a READ's local descriptors name VRAM; the
prefiller's pages stay ``DRAM`` (UCX moves them host to device). Host and device local
memory are never mixed in one agent: a READ's local descriptors share one memory type.
"""

from __future__ import annotations

import contextlib
from typing import Any

from hisparse.transport.base import ImportHandle, Segment, Transport
from hisparse.transport.errors import AnnouncementRefused, ImportFailed, TransportError
from hisparse.transport.nixlpeer import load_nixl
from hisparse.transport.staging import StagingPool, buffer_address, on_device


def memory_kind(buf: Any) -> tuple[str, int]:
    """NIXL's memory type and device ID of ``buf``: ``("VRAM", gpu)`` for a CuPy array,
    ``("DRAM", 0)`` for host memory."""
    if on_device(buf):
        return "VRAM", int(buf.device.id)
    return "DRAM", 0


class NixlTransport(Transport):
    """A decoder's NIXL agent ``name`` reading into ``pool`` over UCX."""

    def __init__(
        self, pool: StagingPool, name: str, chunk_pages: int = 1, window: int = 1
    ) -> None:
        super().__init__(pool, chunk_pages, window)
        nixl: Any = load_nixl()
        self.agent = nixl.nixl_agent(name, nixl.nixl_agent_config(backends=["UCX"]))
        buf = pool.buffer
        self.local_kind, self.local_dev = memory_kind(buf)
        self._reg: Any = self.agent.register_memory(
            [(buffer_address(buf), buf.nbytes, self.local_dev, "")], self.local_kind)
        self._blocks: dict[int, Any] = {}  # block memory registrations by base address
        self.remotes: set[str] = set()
        self.xfers = 0  # NIXL transfer handles created and not yet released

    def connect(self, metadata: bytes, expected: str) -> None:
        """Load a prefiller's metadata; one that names another agent is refused and dropped."""
        try:
            name = self.agent.add_remote_agent(metadata)
        except Exception as exc:  # the bindings' own error types
            raise AnnouncementRefused("agent", f"unreadable agent metadata: {exc}") from exc
        name = name.decode() if isinstance(name, bytes) else str(name)
        if name != expected:
            if name not in self.remotes:
                self.agent.remove_remote_agent(name)
            raise AnnouncementRefused("agent", f"metadata names {name!r}, expected {expected!r}")
        self.remotes.add(name)

    def disconnect(self, name: str) -> None:
        if name in self.remotes:
            self.remotes.discard(name)
            with contextlib.suppress(Exception):  # a dead peer may already be gone
                self.agent.remove_remote_agent(name)

    def close(self) -> None:
        """Drop live imports (ended ones), remote agents, block registrations and the
        staging registration (idempotent)."""
        for handle in list(self.live.values()):
            self.finish(handle)
        for name in list(self.remotes):
            self.disconnect(name)
        self.deregister_all()
        if self._reg is not None:
            self.agent.deregister_memory(self._reg)
            self._reg = None

    @property
    def registrations(self) -> int:
        """Memory registrations this agent still holds (0 after ``close``)."""
        return (0 if self._reg is None else 1) + len(self._blocks)

    def _register(self, buf: Any) -> None:
        if self._reg is None:
            raise TransportError("the NIXL transport is closed")
        kind, dev = memory_kind(buf)
        if kind != self.local_kind:
            raise TransportError(
                f"block memory is {kind} but the staging pool is {self.local_kind}: a READ's "
                "local descriptors share one memory type (use the executor's staging pool)"
            )
        self._blocks[buffer_address(buf)] = self.agent.register_memory(
            [(buffer_address(buf), buf.nbytes, dev, "")], kind)

    def _deregister(self, buf: Any) -> None:
        reg = self._blocks.pop(buffer_address(buf), None)
        if reg is not None:
            self.agent.deregister_memory(reg)

    def _prepare(self, handle: ImportHandle) -> None:
        if self._reg is None:
            raise TransportError("the NIXL transport is closed")
        agent_name = handle.announcement.agent
        if agent_name not in self.remotes:
            raise AnnouncementRefused("agent", f"{agent_name!r} is not connected")

    def _bind(self, handle: ImportHandle, chunk: int, segs: list[Segment]) -> Any:
        try:
            xfer = self.agent.initialize_xfer(
                "READ", self.agent.get_xfer_descs(
                    [(a, n, self.local_dev) for a, _, n, _ in segs], self.local_kind),
                self.agent.get_xfer_descs([(r, n, d) for _, r, n, d in segs], "DRAM"),
                handle.announcement.agent)
        except Exception as exc:  # NIXL refuses descriptors outside registered memory
            raise AnnouncementRefused("descriptor", f"NIXL refused the READ: {exc}") from exc
        self.xfers += 1
        return xfer

    def _post(self, handle: ImportHandle, chunk: int) -> bool:
        self.pool.fence()  # a device pool's queued zeroing and copies out end first
        try:
            state = self.agent.transfer(handle.tokens[chunk])
        except Exception as exc:
            raise ImportFailed(handle.request.req_id, chunk, f"NIXL: {exc}") from exc
        return self._state(handle, chunk, state)

    def _check(self, handle: ImportHandle, chunk: int) -> bool:
        try:
            state = self.agent.check_xfer_state(handle.tokens[chunk])
        except Exception as exc:
            raise ImportFailed(handle.request.req_id, chunk, f"NIXL: {exc}") from exc
        return self._state(handle, chunk, state)

    def _state(self, handle: ImportHandle, chunk: int, state: str) -> bool:
        if state == "ERR":
            raise ImportFailed(handle.request.req_id, chunk, "NIXL reported ERR")
        return bool(state == "DONE")

    def _drop(self, handle: ImportHandle) -> None:
        for i, dests in enumerate(handle.dests):
            if dests is None and handle.tokens[i] is not None:
                self._release(handle.tokens[i])
                handle.tokens[i] = None

    def _release(self, xfer: Any) -> None:
        self.xfers -= 1
        with contextlib.suppress(Exception):  # a failed READ's handle may refuse release
            self.agent.release_xfer_handle(xfer)
