"""Hold SIGINT and SIGTERM for a few lines of code that must not be cut in two.

A signal that arrives while they are held stays pending (in the kernel) and is handled
when they are let through again: starting TLC's JVM (so an interrupt cannot fall
between the child existing and the code that would kill it) and removing a scratch
folder (so a second Ctrl-C cannot leave half of it behind).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager

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
