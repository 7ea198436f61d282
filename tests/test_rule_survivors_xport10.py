"""Rules of the NIXL prefiller's process harness that survivors of the whole mutation run
showed (docs/mutation-run7, twelfth pass): a killed prefiller leaves no pipe open, the
child deregisters its pages before it says it stopped, and loading NIXL quiets its log by
default without overriding a level the user set."""

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
