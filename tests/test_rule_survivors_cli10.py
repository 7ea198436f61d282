"""Rules of the CLI's progress ticker (``hisparse.cli.ticking``) that survivors of the whole
mutation run showed (docs/mutation-run7, twelfth pass): its thread never takes SIGINT or
SIGTERM (the kernel gives them to the main thread, whose blocking read they interrupt),
and leaving the block leaves no ticker thread behind."""

from __future__ import annotations

import signal
import threading

import pytest

import hisparse.cli as cli
from hisparse.tlc.signals import block_in_this_thread


def test_the_ticker_thread_blocks_the_stopping_signals_and_is_gone_after_the_block(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the ticker blocks SIGINT and SIGTERM in its own thread, not in the caller's (kills
    # cli.py:115:call:85, which left them deliverable to the ticker), and is joined when
    # the block is left (kills cli.py:126:call:87, which left it running)
    seen: list[tuple[threading.Thread, set[int]]] = []
    masked = threading.Event()

    def recording() -> None:
        block_in_this_thread()
        seen.append((threading.current_thread(), set(signal.pthread_sigmask(signal.SIG_BLOCK, []))))
        masked.set()

    monkeypatch.setattr(cli, "block_in_this_thread", recording)
    caller = signal.pthread_sigmask(signal.SIG_BLOCK, [])  # the caller's mask, as found
    with cli.ticking("xport", every=3600.0):
        # a bound on a wait for the ticker to start, not a timing: it starts at once
        assert masked.wait(120.0), "the ticker thread never blocked the stopping signals"
    [(ticker, mask)] = seen
    assert ticker is not threading.main_thread()
    assert {signal.SIGINT, signal.SIGTERM} <= mask
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == caller  # the caller's untouched
    assert not ticker.is_alive()
