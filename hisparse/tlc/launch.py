"""Exec TLC's JVM so that it dies with hisparse: run as a script, ``PARENT_PID CMD...``.

``subprocess``'s ``preexec_fn`` (which set the death signal before) runs Python between
fork and exec, and with it the interpreter's at-fork hooks (``logging``'s among them):
a SIGINT arriving while those run raises inside a hook, where Python reports the
exception as "ignored" and drops it, so the interrupt was lost and the check ran on.
This script is exec'd instead (no Python in the fork), sets the death signal, checks
that the parent is still the one that started it, waits for the parent's go (one byte
on stdin, sent once the parent can kill it: an interrupted parent never sends it, so no
JVM starts after an interrupt), lets SIGINT/SIGTERM through again (the parent holds
them while it starts us) and execs the command.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
EXIT_ORPHANED = 1
GO = b"g"


def main(argv: list[str]) -> int:
    """Set up and exec ``argv[1:]``; returns only when the parent is already gone."""
    parent, cmd = int(argv[0]), argv[1:]
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # it died before the death signal was set: nobody waits
        return EXIT_ORPHANED
    if os.read(0, 1) != GO:  # the parent was interrupted (or died) before its go
        return EXIT_ORPHANED
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # TLC reads nothing; the pipe is ours
    os.close(null)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    os.execv(cmd[0], cmd)
    return EXIT_ORPHANED  # (execv does not return)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
