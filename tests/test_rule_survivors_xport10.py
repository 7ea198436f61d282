"""Rules of the NIXL prefiller's process harness that survivors of the whole mutation run
showed (docs/mutation-run7, twelfth pass): a killed prefiller leaves no pipe open, the
child deregisters its pages before it says it stopped, and loading NIXL quiets its log by
default without overriding a level the user set; and of the decoder transport: one block
is never named for two pages, ``ended`` is a bool, foreign block memory is refused as
such."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import types
from typing import Any

import numpy as np
import pytest

import hisparse.transport.nixlpeer as nixlpeer
from hisparse.transport import (
    AnnouncementRefused,
    ImportRequest,
    LoopbackPrefiller,
    LoopbackTransport,
    StagingPool,
    TransportError,
)
from hisparse.transport.base import BlockDest
from hisparse.transport.nixlpeer import NixlPrefiller, load_nixl
from tests.test_rule_survivors_report import _holds_until_stopped


def test_a_killed_prefiller_is_reaped_and_leaves_no_pipe_open(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # ``kill`` (the failure a decoder must survive) SIGKILLs and reaps the child and closes
    # the parent's end of its pipe, as ``stop`` does: a run that kills prefillers over and
    # over leaks no file descriptor (kills transport/nixlpeer.py:133:call:11, which left
    # the pipe open)
    monkeypatch.setattr(nixlpeer, "_serve", _holds_until_stopped)
    peer = NixlPrefiller("xport10-killed", np.zeros((2, 64), np.uint8))
    try:
        assert not peer.reaped and not peer._conn.closed
        peer.kill()
        assert peer.reaped and peer.process.exitcode == -signal.SIGKILL
        assert peer._conn.closed
        peer.stop()  # stopping a killed prefiller finds nothing more to do
        assert peer.reaped and peer.process.exitcode == -signal.SIGKILL
    finally:
        if not peer.reaped:  # (only on a failure above)
            peer.process.kill()
            peer.process.join()


def test_a_stopped_prefiller_exits_in_order_and_leaves_no_pipe_open(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # an orderly stop reaps the child (exit 0) and closes the parent's end of its pipe
    # (kills transport/nixlpeer.py:126:call:9, which left the pipe open)
    monkeypatch.setattr(nixlpeer, "_serve", _holds_until_stopped)
    peer = NixlPrefiller("xport10-stopped", np.zeros((2, 64), np.uint8))
    try:
        peer.stop()
        assert peer.reaped and peer.process.exitcode == 0
        assert peer._conn.closed
    finally:
        if not peer.reaped:  # (only on a failure above)
            peer.process.kill()
            peer.process.join()


def test_loading_nixl_quiets_its_log_unless_the_user_chose_a_level(
        nixl_available: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # NIXL's agents log at WARN unless NIXL_LOG_LEVEL says otherwise; a level the user
    # set is kept (kills transport/nixlpeer.py:30:call:0, which left the level unset)
    monkeypatch.delenv("NIXL_LOG_LEVEL", raising=False)
    load_nixl()
    assert os.environ["NIXL_LOG_LEVEL"] == "WARN"
    monkeypatch.setenv("NIXL_LOG_LEVEL", "ERROR")
    load_nixl()
    assert os.environ["NIXL_LOG_LEVEL"] == "ERROR"


class _Agent:
    """A stand-in NIXL agent that logs what the prefiller child registers and drops."""

    def __init__(self, log: list[tuple[str, Any]]) -> None:
        self.log = log

    def register_memory(self, regions: list[tuple[int, int, int, str]], kind: str) -> str:
        self.log.append(("register", (regions[0][1], kind)))
        return "reg-handle"

    def get_agent_metadata(self) -> bytes:
        return b"stand-in metadata"

    def deregister_memory(self, reg: str) -> None:
        self.log.append(("deregister", reg))


def test_the_prefiller_child_deregisters_its_pages_then_says_stopped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the child's side of an orderly stop, run in a thread over a real pipe with a
    # stand-in agent: it registers the pages it was sent once, answers a put, and on
    # "stop" deregisters them and only then answers "stopped" (kills
    # transport/nixlpeer.py:55:call:2, which left them registered, and :56:call:3, which
    # never answered)
    log: list[tuple[str, Any]] = []
    fake = types.SimpleNamespace(
        nixl_agent=lambda name, config: _Agent(log),
        nixl_agent_config=lambda backends: backends,
    )
    monkeypatch.setattr(nixlpeer, "load_nixl", lambda: fake)
    parent, child = mp.Pipe()
    thread = threading.Thread(target=nixlpeer._serve, args=("xport10-child", child))
    thread.start()
    try:
        parent.send(np.zeros((3, 8), np.uint8))
        meta, _base, row_bytes, pages = parent.recv()
        assert (meta, row_bytes, pages) == (b"stand-in metadata", 8, 3)
        parent.send(([1], np.full((1, 8), 7, np.uint8)))
        assert parent.recv() == "put"
        assert log == [("register", (24, "DRAM"))]
    finally:
        parent.send("stop")  # (also ends the child when an assertion above failed)
        thread.join()  # _serve returns once it has answered the stop
    assert log == [("register", (24, "DRAM")), ("deregister", "reg-handle")]
    assert parent.poll(0) and parent.recv() == "stopped"
    assert not parent.poll(0)


# --- the decoder transport's block memory and destinations (hisparse/transport/base.py) ---

ROW, BLOCK = 24, 8
PAGE = ROW * BLOCK


def _loopback_import(chunk_pages: int) -> tuple[LoopbackTransport, ImportRequest, Any]:
    """A loopback transport of ``chunk_pages`` pages a chunk, connected to a prefiller of a
    two-page request, and that request's announcement."""
    req = ImportRequest("r", 2 * BLOCK, ROW, BLOCK, "xport10-prefiller")
    pages = np.random.default_rng(10).integers(0, 256, (2, PAGE), dtype=np.uint8)
    peer = LoopbackPrefiller(req.prefiller, pages)
    tr = LoopbackTransport(StagingPool(2 * PAGE, 2, PAGE), chunk_pages, 1)
    tr.connect(peer)
    return tr, req, peer.announce("r", req.num_tokens, ROW, BLOCK)


def test_one_block_named_for_two_pages_of_a_chunk_is_refused_as_claimed() -> None:
    # a device chunk of two pages that names the same block for both: the second page's
    # block is claimed (by the first), the chunk stays unbound and holds nothing, and
    # two distinct blocks are then taken (kills transport/base.py:226:call:13, which let
    # both pages land in one block)
    tr, req, ann = _loopback_import(chunk_pages=2)
    blocks = np.zeros((2, PAGE), np.uint8)
    tr.register(blocks)
    base = int(blocks.ctypes.data)
    handle = tr.begin(req, ann)
    with pytest.raises(AnnouncementRefused,
                       match=rf"^announcement refused \(destination\): block {base:#x} of page 1 "
                       r"is claimed$") as info:
        tr.bind(handle, 0, [BlockDest("r", (base,)), BlockDest("r", (base,))])
    assert info.value.reason == "destination"
    assert not handle.bound(0)
    tr.bind(handle, 0, [BlockDest("r", (base + PAGE,)), BlockDest("r", (base,))])
    tr.wait(handle)
    assert handle.done
    tr.finish(handle)


def test_an_import_not_ended_says_so_with_false() -> None:
    # ``ended`` is a bool: False until the import ends, True after (kills
    # transport/base.py:82:none:8, which answered None for an import with no error)
    tr, req, ann = _loopback_import(chunk_pages=1)
    handle = tr.begin(req, ann)
    assert handle.ended is False
    tr.abort(handle)
    assert handle.ended is True
    tr.finish(handle)


class _ForeignTensor:
    """Block memory of another array library (a CPU tensor): a dtype, no NumPy ``ctypes``
    and no ``__cuda_array_interface__``."""

    dtype = np.dtype(np.float32)
    nbytes = 16


def test_block_memory_that_is_not_a_uint8_array_is_refused_before_its_address_is_read() -> None:
    # the refusal is the transport's own, whatever the buffer (kills
    # transport/base.py:108:reorder:0, which read the address first: an AttributeError)
    tr, _, _ = _loopback_import(chunk_pages=1)
    with pytest.raises(TransportError,
                       match=r"^block memory must be a non-empty contiguous uint8 array$"):
        tr.register(_ForeignTensor())
    assert tr.regions == {}
