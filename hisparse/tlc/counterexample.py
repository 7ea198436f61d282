"""The states of a TLC counterexample, read from its output.

TLC prints an error trace as blocks that start with ``State N: <Action ...>`` and end at
a blank line (liveness traces end with ``Back to state N`` or ``State N: Stuttering``).
"""

from __future__ import annotations

import re

_STATE = re.compile(r"^State \d+:|^Back to state")


def states(output: str) -> list[str]:
    """Each state of the first error trace in ``output``, as printed (empty if none)."""
    out: list[str] = []
    block: list[str] | None = None
    for line in output.splitlines():
        if _STATE.match(line):
            if block:
                out.append("\n".join(block))
            block = [line]
        elif block is not None:
            if not line.strip():
                out.append("\n".join(block))
                block = None
            else:
                block.append(line)
        elif out and not line.strip():
            continue
        elif out:
            break  # the trace is over: TLC's summary follows
    if block:
        out.append("\n".join(block))
    return out


def last_states(output: str, n: int = 2) -> list[str]:
    """The last ``n`` states of the error trace: where it goes wrong."""
    return states(output)[-n:]
