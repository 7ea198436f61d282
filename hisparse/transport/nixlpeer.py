"""A prefiller process over NIXL: registers the KV pages it holds, publishes its metadata.

``NixlPrefiller`` spawns the process (``spawn``: no inherited UCX state), sends it the
pages (its buffer, registered once), and gets back its agent metadata and the page
addresses it registered; ``put`` later places a request's pages in free rows of it. The child
deregisters its memory before it exits on ``stop``; ``kill`` is the failure a decoder
must survive. Either way the process is reaped.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
from multiprocessing.connection import Connection
from types import TracebackType

import numpy as np

from hisparse.transport.arena import PageArena
from hisparse.transport.errors import TransportError
from hisparse.transport.geometry import Announcement, PageDescriptor

READY_TIMEOUT_S = 120.0
"""How long the parent waits for the child's agent to come up (a hang, not a timing)."""


def load_nixl() -> object:
    """The ``nixl_cu12`` module, or a ``TransportError`` that says how to install it."""
    os.environ.setdefault("NIXL_LOG_LEVEL", "WARN")
    try:
        import nixl_cu12
    except ImportError as exc:
        raise TransportError(
            f"NIXL is not importable ({exc}): pip install --no-deps nixl-cu12==1.5.1"
        ) from exc
    return nixl_cu12


def _serve(name: str, conn: Connection) -> None:
    """Child: hold the pages sent, register them, answer with metadata, wait for stop."""
    nixl = load_nixl()
    agent = nixl.nixl_agent(name, nixl.nixl_agent_config(backends=["UCX"]))  # type: ignore[attr-defined]
    pages = np.ascontiguousarray(conn.recv(), dtype=np.uint8)
    base = int(pages.ctypes.data)
    reg = agent.register_memory([(base, pages.nbytes, 0, "")], "DRAM")
    conn.send((agent.get_agent_metadata(), base, pages.shape[1], pages.shape[0]))
    while True:
        msg = conn.recv()
        if msg == "stop":
            break
        rows, data = msg  # put: these pages into these rows of the registered buffer
        pages[rows] = data
        conn.send("put")
    agent.deregister_memory(reg)
    conn.send("stopped")


class NixlPrefiller:
    """A prefiller process holding ``pages`` (one row per page) as NIXL agent ``name``."""

    def __init__(self, name: str, pages: np.ndarray) -> None:
        if pages.ndim != 2 or pages.dtype != np.uint8:
            raise ValueError("pages must be a 2-D uint8 array, one row per page")
        self.name = name
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(name, child), daemon=True)
        self.process.start()
        child.close()
        try:
            self._conn.send(pages)
            if not self._conn.poll(READY_TIMEOUT_S):
                self.kill()
                raise TransportError(f"prefiller {name!r} did not come up")
            self.metadata, self.base, self.stride, self.num_pages = self._conn.recv()
        except (EOFError, OSError) as exc:  # (a child gone before it read the pages: a reset)
            self.kill()
            raise TransportError(f"prefiller {name!r} died starting up") from exc

        self.arena = PageArena(self.num_pages)

    def put(self, req_id: str, pages: np.ndarray) -> None:
        """Hold ``pages`` (one row per page) as request ``req_id``'s prefill KV, in free
        rows of the registered buffer (the published metadata stays valid)."""
        if pages.ndim != 2 or pages.shape[1] != self.stride:
            raise ValueError(f"pages of {pages.shape[1:]} bytes, rows hold {self.stride}")
        rows = self.arena.put(req_id, pages.shape[0])
        try:
            self._conn.send((rows, np.ascontiguousarray(pages, dtype=np.uint8)))
            if not self._conn.poll(READY_TIMEOUT_S) or self._conn.recv() != "put":
                # its answers no longer pair with our puts (a late "put" would answer the
                # next one before its rows are written): it is ended, its rows freed
                self.arena.drop(req_id)
                self.kill()
                raise TransportError(f"prefiller {self.name!r} did not take the pages")
        except (EOFError, OSError) as exc:
            self.arena.drop(req_id)
            raise TransportError(f"prefiller {self.name!r} is gone") from exc

    def drop(self, req_id: str) -> None:
        self.arena.drop(req_id)

    def announce(
        self, req_id: str, num_tokens: int, row_bytes: int, block_size: int, layers: int = 1
    ) -> Announcement:
        """The honest announcement of request ``req_id``'s pages (every row if it was
        never put: one request filling the buffer)."""
        rows = self.arena.held.get(req_id, range(self.num_pages))
        descs = tuple(
            PageDescriptor(i, self.base + row * self.stride, self.stride)
            for i, row in enumerate(rows)
        )
        return Announcement(
            self.name, req_id, num_tokens, row_bytes, block_size, descs, layers)

    def stop(self) -> None:
        """Orderly exit: the child deregisters its pages, then the process is reaped."""
        if self.process.exitcode is None and self.process.is_alive():
            try:
                self._conn.send("stop")
                self._conn.recv()
            except (EOFError, OSError):
                pass
        self.process.join()
        self._conn.close()

    def kill(self) -> None:
        """The failure under test: SIGKILL, then reap."""
        if self.process.pid is not None and self.process.exitcode is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.join()
        self._conn.close()

    @property
    def reaped(self) -> bool:
        return self.process.exitcode is not None

    def __enter__(self) -> NixlPrefiller:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        if not self.reaped:
            self.stop()
