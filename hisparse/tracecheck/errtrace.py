"""Find where a replay stopped: the trace and step in the last state of TLC's error trace.

TLC 2.18 cannot dump its counterexample as data, so we read the printed states; the
replay's two bookkeeping variables are plain integers on lines of their own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TRACE_START = re.compile(r"^Error: The behavior up to this point is:", re.M)
# An invariant false in an initial state (a bad first step, caught by a diagnostic
# invariant) is printed as one bare state, with no "State n:" line.
_INITIAL = re.compile(r"^Error: Invariant \S+ is violated by the initial state:", re.M)
_STATE = re.compile(r"^State (\d+):", re.M)
_VAR = r"^/\\ {name} = (-?\d+)\s*$"


@dataclass(frozen=True)
class StopPoint:
    """The last state of the error trace: trace ``tr`` (1-based), about to take ``cursor``."""

    tr: int
    cursor: int
    depth: int


def stop_point(text: str) -> StopPoint | None:
    """Where TLC's (single) error trace ends, or None when the output has none."""
    start = _TRACE_START.search(text)
    if start is not None:
        states = list(_STATE.finditer(text, start.end()))
        if not states:
            return None
        last, depth = text[states[-1].start() :], int(states[-1].group(1))
    else:
        initial = _INITIAL.search(text)
        if initial is None:
            return None
        end = text.find("\n\n", initial.end())
        last, depth = text[initial.end() : end if end >= 0 else len(text)], 1
    values = {}
    for name in ("tr", "cursor"):
        m = re.search(_VAR.format(name=name), last, re.M)
        if m is None:
            return None
        values[name] = int(m.group(1))
    return StopPoint(values["tr"], values["cursor"], depth)
