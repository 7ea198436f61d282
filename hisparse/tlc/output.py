"""Turn TLC's console output and exit code into a typed verdict.

TLC 2.18 has no machine-readable output we can rely on (no ``-dumpTrace``, no JSON
modules), so we read the stable English messages plus the documented exit codes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

Verdict = Literal["ok", "violation", "error"]

_SEVERITY: dict[Verdict, int] = {"ok": 0, "violation": 1, "error": 2}

# Exit codes of tlc2.TLC (EC.ExitStatus).
EXIT_CODES: dict[int, tuple[Verdict, str]] = {
    0: ("ok", "model checking completed, no error found"),
    10: ("error", "an ASSUME is false"),
    11: ("violation", "deadlock reached"),
    12: ("violation", "safety violation (invariant or action property)"),
    13: ("violation", "liveness violation (temporal property)"),
    14: ("violation", "assertion failed during evaluation"),
    75: ("error", "evaluation failure"),
    76: ("error", "evaluation failure"),
    77: ("error", "evaluation failure"),
    150: ("error", "TLA+ parse or semantic error"),
    151: ("error", "configuration file error"),
    152: ("error", "state space too large"),
    153: ("error", "TLC system error"),
    255: ("error", "TLC failed with an unexpected exception"),
}

DEADLOCK = "Deadlock"
TEMPORAL = "TemporalProperties"

_NUM = r"([\d,]+)"
_VERSION = re.compile(r"^TLC2 Version (.+?)\s*$", re.M)
_TOTALS = re.compile(
    rf"^{_NUM} states generated, {_NUM} distinct states found(?:, {_NUM} states left on queue)?\.",
    re.M,
)
# Periodic progress: the only figures left when a run is killed before it finishes.
_PROGRESS = re.compile(
    rf"^Progress\(\d+\) at [\d-]+ [\d:]+: {_NUM} states generated(?: \([^)]*\))?, "
    rf"{_NUM} distinct states found(?: \([^)]*\))?, {_NUM} states left on queue",
    re.M,
)
_DEPTH = re.compile(rf"^The depth of the complete state graph search is {_NUM}\.", re.M)
_INVARIANT = re.compile(r"^Error: Invariant (\w+) is violated", re.M)
_ACTION_PROP = re.compile(r"^Error: Action property (\w+) is violated", re.M)
_INIT_PROP = re.compile(r"^Error: Property (\w+) is violated by the initial state", re.M)
_TEMPORAL = re.compile(r"^Error: Temporal properties were violated", re.M)
_DEADLOCK = re.compile(r"^Error: Deadlock reached", re.M)
_PARSE = re.compile(
    r"\*\*\*Parse Error\*\*\*|^Semantic errors:|Parsing or semantic analysis failed"
    r"|Cannot find source file for module",
    re.M,
)
_ERROR_LINE = re.compile(
    r"^Error: (?!The behavior up to this point|The following behavior)(.*)$", re.M
)


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def _parse_detail(text: str, lines: int = 6) -> str:
    """The first few non-empty lines from the parser's complaint, joined on one line."""
    m = _PARSE.search(text)
    if m is None:
        return ""
    tail = [ln.strip() for ln in text[m.start() :].splitlines()]
    keep = [ln for ln in tail if ln and not ln.startswith(("Residual stack", "***"))]
    return " | ".join(keep[:lines])


def _unknown_exit(code: int) -> str:
    if code < 0 or code > 128:  # Popen reports -N, a shell reports 128+N
        return f"TLC was killed by signal {-code if code < 0 else code - 128}"
    return f"unexpected TLC exit code {code}"


def worst(verdicts: list[Verdict]) -> Verdict:
    """The most severe verdict (error > violation > ok); ``ok`` for none."""
    return max(verdicts, key=_SEVERITY.__getitem__, default="ok")


@dataclass
class TlcOutput:
    """What one TLC run said, independent of how it was launched."""

    result: Verdict
    reason: str
    exit_code: int
    tlc_version: str | None = None
    states_generated: int = 0
    distinct_states: int = 0
    states_left: int = 0
    depth: int = 0
    violated: list[str] = field(default_factory=list)
    parse_error: bool = False
    messages: list[str] = field(default_factory=list)


def parse_output(text: str, exit_code: int) -> TlcOutput:
    """Parse TLC stdout/stderr; the exit code decides the verdict, the text names it."""
    result, reason = EXIT_CODES.get(exit_code, ("error", _unknown_exit(exit_code)))
    out = TlcOutput(result=result, reason=reason, exit_code=exit_code)
    if m := _VERSION.search(text):
        out.tlc_version = m.group(1)
    totals = _TOTALS.findall(text) or _PROGRESS.findall(text)
    if totals:
        gen, distinct, left = totals[-1]
        out.states_generated, out.distinct_states = _int(gen), _int(distinct)
        out.states_left = _int(left) if left else 0
    if m := _DEPTH.search(text):
        out.depth = _int(m.group(1))
    for regex in (_INVARIANT, _ACTION_PROP, _INIT_PROP):
        out.violated += [n for n in regex.findall(text) if n not in out.violated]
    if _TEMPORAL.search(text):
        out.violated.append(TEMPORAL)
    if _DEADLOCK.search(text):
        out.violated.append(DEADLOCK)
    out.parse_error = exit_code == 150 or bool(_PARSE.search(text))
    out.messages = [m.strip() for m in _ERROR_LINE.findall(text) if m.strip()]
    if out.result == "ok" and exit_code == 0 and out.violated:
        # Exit 0 with an error message would be a TLC bug; never report it as a pass.
        out.result, out.reason = "error", "TLC exited 0 but reported a violation"
    if out.parse_error and (detail := _parse_detail(text)):
        out.messages.insert(0, detail)
    if out.result == "error" and out.messages:
        out.reason = f"{out.reason}: {out.messages[0]}"
    elif out.result == "violation" and out.violated:
        out.reason = f"{out.reason}: {', '.join(out.violated)}"
    return out
