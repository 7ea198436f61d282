"""Rules of the NIXL prefiller's process harness that survivors of the whole mutation run
showed (docs/mutation-run7, twelfth pass): a killed prefiller leaves no pipe open, and
loading NIXL quiets its log by default without overriding a level the user set."""

from __future__ import annotations

import os
import signal

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
