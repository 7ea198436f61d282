"""SIGINT and SIGTERM around TLC's JVM: held where code must not be cut in two, and
latched so that no interrupt is ever lost.

A signal that arrives while they are held stays pending (in the kernel) and is handled
when they are let through again: starting TLC's JVM (so an interrupt cannot fall
between the child existing and the code that would kill it) and removing a scratch
folder (so a second Ctrl-C cannot leave half of it behind).
"""

from __future__ import annotations

import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Union

Handler = Union[Callable[[int, FrameType | None], object], int, signal.Handlers, None]  # noqa: UP007

STOPPING = frozenset({signal.SIGINT, signal.SIGTERM})


def hold() -> set[signal.Signals]:
    """Block SIGINT and SIGTERM in this thread; returns the mask to restore."""
    return {signal.Signals(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, STOPPING)}


def release(mask: set[signal.Signals]) -> None:
    """Restore ``mask``; a signal that came while held is raised here (its handler runs)."""
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)


@contextmanager
def held() -> Iterator[None]:
    """SIGINT and SIGTERM wait until the block ends (in this thread)."""
    mask = hold()
    try:
        yield
    finally:
        release(mask)


def block_in_this_thread() -> None:
    """For helper threads: never take SIGINT/SIGTERM, so the kernel gives them to the
    main thread, whose blocking read they interrupt (a helper would only set a flag)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, STOPPING)


class _Latch:
    """The stopping signal seen while ``latched`` is active, and the children it kills."""

    def __init__(self) -> None:
        self.signum: int | None = None
        # reentrant: the handler may run while this thread is inside add or discard
        self._lock = threading.RLock()
        self._children: set[subprocess.Popen[str]] = set()

    def add(self, proc: subprocess.Popen[str]) -> None:
        with self._lock:
            self._children.add(proc)

    def discard(self, proc: subprocess.Popen[str]) -> None:
        with self._lock:
            self._children.discard(proc)

    def kill_all(self) -> None:
        with self._lock:
            children = list(self._children)
        for proc in children:
            proc.kill()


LATCH = _Latch()


def _chain(signum: int, frame: FrameType | None, previous: Handler) -> None:
    if callable(previous):
        previous(signum, frame)  # KeyboardInterrupt, or the CLI's SystemExit for SIGTERM
    elif previous == signal.SIG_DFL:
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)


@contextmanager
def latched() -> Iterator[None]:
    """SIGINT/SIGTERM kill every child in ``LATCH`` and are recorded before the usual
    handler runs (main thread only; elsewhere a no-op).

    Python runs a signal's handler at whatever bytecode comes next, and an exception
    raised where Python cannot raise (a ``__del__``, a weakref callback, an at-fork hook)
    is printed as "ignored" and dropped: the interrupt is lost. The kill and the record
    happen whatever swallows the exception; ``raise_pending`` raises a recorded signal
    again, and so does leaving the block normally.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: dict[int, Handler] = {s: signal.getsignal(s) for s in STOPPING}

    def handler(signum: int, frame: FrameType | None) -> None:
        LATCH.signum = signum
        LATCH.kill_all()
        _chain(signum, frame, previous[signum])

    for s in STOPPING:
        signal.signal(s, handler)
    try:
        yield
    except BaseException:
        LATCH.signum = None  # (raised and seen: nothing to raise again)
        raise
    finally:
        for signum, prev in previous.items():
            if prev is not None:  # (None: a handler not set from Python; left as is)
                signal.signal(signum, prev)
    raise_pending()


def raise_pending() -> None:
    """Raise a recorded stopping signal again (its handler runs here, in plain code);
    outside the main thread, TlcInterrupted instead."""
    signum = LATCH.signum
    if signum is None:
        return
    if threading.current_thread() is not threading.main_thread():
        raise Interrupted(signum)
    LATCH.signum = None
    signal.raise_signal(signum)


class Interrupted(Exception):
    """A helper thread learns that the main thread was interrupted."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum
