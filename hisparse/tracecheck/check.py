"""``hisparse check --trace``: is each recorded run a behaviour of ``tla/HiSparse.tla``?

Headers are screened first (``admit``): an unknown or unrequested injected bug, or
constants past the limits, make that file ``refused`` before TLC starts. Traces with
the same constants are replayed in one TLC run (JVM start and parsing dominate). TLC
stops at the first failure, so a rejected trace is set aside and the rest of its group
replayed again, until the group passes or ``max_runs`` is spent; traces that never got
a clean run are reported ``unchecked``. When TLC fails in a way no trace explains, the
group is split and each trace replayed alone, so only the trace at fault gets ``error``
and every other file keeps its own verdict.

A long trace without an injected bug is split into windows (``window``), each replayed
alone from the recorded state before its first step, all at once on ``jobs`` cores;
the first window that rejects names the step, as the whole replay would. A window whose
last state is not the next one's first (``TrHandoff``), or that fails otherwise, sends
the trace back to be replayed whole.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from hisparse.spec.trace import Trace, read_trace
from hisparse.tlc import cfg as cfgfile
from hisparse.tlc.acquire import TlcInstall, ensure_tlc
from hisparse.tlc.errors import ModelError, TlcError
from hisparse.tlc.output import DEADLOCK
from hisparse.tlc.paths import tla_dir as default_tla_dir
from hisparse.tlc.runner import TlcResult, TlcRuns, run_tlc
from hisparse.tlc.signals import block_in_this_thread, latched
from hisparse.tracecheck import module as gen
from hisparse.tracecheck.admit import HeaderLimits, header_problem
from hisparse.tracecheck.errtrace import StopPoint, stop_point
from hisparse.tracecheck.ints import Ids
from hisparse.tracecheck.window import HANDOFF_INVARIANT, States, WindowState

# With the default window (None), a trace is split only when each of its windows gets
# at least this many steps: below it TLC's start (about 3 s) costs more than it saves.
MIN_WINDOW = 300

# The spec's safety invariants: every one, as the P/D model (MC_pd) checks them.
INVARIANTS_FROM = "MC_pd.cfg"

Verdict = Literal["accepted", "rejected", "unchecked", "refused", "error"]


@dataclass
class FileVerdict:
    """The verdict on one trace file; ``step``/``action`` only when rejected, ``reason``
    when rejected, refused or in error; ``bug`` when the spec was checked with that
    injected bug switched on (only on request)."""

    path: str
    verdict: Verdict
    steps: int
    step: int | None = None
    action: str | None = None
    reason: str | None = None
    bug: str | None = None

    def line(self) -> str:
        """The CLI's line for a file (printed for all but plain acceptances)."""
        note = f" [spec checked with injected bug {self.bug}]" if self.bug else ""
        if self.verdict == "rejected":
            return f"rejected: {self.path} at step {self.step} (action {self.action}){note}"
        return f"{self.verdict}: {self.path}{note}"


@dataclass
class TraceCheckResult:
    """All verdicts of one ``check_traces`` call (the ``--json`` document)."""

    accepted: bool
    files: list[FileVerdict]
    tlc_seconds: float
    tlc_runs: int
    steps: int
    longest: int
    invariants: list[str]
    workdir: str | None = None
    logs: list[str] = field(default_factory=list)

    @property
    def rejected(self) -> list[FileVerdict]:
        return [f for f in self.files if f.verdict == "rejected"]

    @property
    def result(self) -> Literal["accepted", "rejected", "error"]:
        """``error`` when some file got no verdict on the spec (refused, error, unchecked)."""
        if self.accepted:
            return "accepted"
        if all(f.verdict in ("accepted", "rejected") for f in self.files):
            return "rejected"
        return "error"

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["result"] = self.result
        return doc


class TraceCheckError(TlcError):
    """TLC failed for a reason other than a rejected trace; ``log`` is its output."""

    def __init__(self, message: str, log: Path) -> None:
        super().__init__(f"{message} (log: {log})")
        self.log = log


def _reason(violated: str, step: int) -> str:
    if violated == DEADLOCK:  # each reported variable matches some successor, not all at once
        return "the post-state matches no successor of the spec"
    if violated == gen.ENABLED_INVARIANT:
        return "the action is not enabled in the spec"
    if violated.startswith(gen.MATCH_PREFIX):
        var = violated.removeprefix(gen.MATCH_PREFIX)
        return f"post-state of `{var}` differs from every successor the spec allows"
    where = "the initial state" if step == 0 else "the state after this step"
    return f"invariant {violated} is violated in {where}"


@dataclass
class _Group:
    """Traces sharing one header, replayed together; or one window of one trace, which
    starts from ``start`` and must end on ``end``, its steps numbered from ``offset`` + 1."""

    number: int
    paths: list[Path]
    traces: list[Trace]
    start: WindowState | None = None
    end: WindowState | None = None
    offset: int = 0
    whole: int = 0  # the whole trace's steps (a window)

    def alone(self, idx: int) -> _Group:
        return _Group(
            self.number, [self.paths[idx]], [self.traces[idx]], self.start, self.end,
            self.offset, self.whole,
        )


class _HandoffMismatch(Exception):
    """A window's last state is not the recorded state its successor starts from."""


class _Replay:
    """Replays groups of traces in one scratch directory."""

    def __init__(self, install: TlcInstall, tla: Path, invariants: list[str]) -> None:
        self.install, self.tla, self.invariants = install, tla, invariants
        self.runs = TlcRuns()  # stopped together on an interrupt
        self.root = Path(tempfile.mkdtemp(prefix="hisparse-trace-"))

    def run(self, group: _Group, label: str, *, diagnose_at: int | None = None) -> TlcResult:
        """Replay ``group``; with ``diagnose_at``, the diagnostic invariants at that step."""
        gen_dir = self.root / f"group{group.number}-{label}"
        gen_dir.mkdir(parents=True)
        module = gen_dir / f"{gen.MODULE}.tla"
        module.write_text(
            gen.module_text(
                group.traces, diagnose_at=diagnose_at, start=group.start, end=group.end
            )
        )
        cfg = gen_dir / f"{gen.MODULE}.cfg"
        cfg.write_text(
            gen.cfg_text(
                self.invariants, diagnose=diagnose_at is not None, handoff=group.end is not None
            )
        )
        # One trace's replay is a chain of single states: one TLC worker does all of it
        # (and leaves the other cores to the other windows); a group's traces fan out.
        workers: int | str = "auto" if len(group.traces) > 1 else 1
        return run_tlc(
            module, cfg, gen_dir, workers, tla_dir=self.tla, install=self.install, runs=self.runs
        )

    def stop(self, res: TlcResult, count: int) -> tuple[str, StopPoint]:
        """The first violation of a failed run and where it stopped, or TraceCheckError."""
        out = res.output
        stop = stop_point(res.raw) if out.result == "violation" else None
        if stop is None or not out.violated or not 1 <= stop.tr <= count:
            raise TraceCheckError(f"TLC could not replay the traces: {out.reason}", res.log_path)
        return out.violated[0], stop

    def diagnose(self, group: _Group, idx: int, at: int, runs: list[TlcResult]) -> str:
        """Re-run one trace that deadlocked at step ``at`` with the diagnostic invariants
        there, for a reason."""
        res = self.run(group.alone(idx), f"diagnose{len(runs)}", diagnose_at=at)
        runs.append(res)
        return self.stop(res, 1)[0]

    def verdict(self, group: _Group, res: TlcResult, runs: list[TlcResult]) -> FileVerdict:
        """Reject the trace a failed run stopped in, and drop it from ``group``."""
        violated, stop = self.stop(res, len(group.traces))
        idx = stop.tr - 1
        if violated == HANDOFF_INVARIANT:
            raise _HandoffMismatch
        if violated == DEADLOCK:
            violated = self.diagnose(group, idx, stop.cursor, runs)
        trace, path = group.traces.pop(idx), group.paths.pop(idx)
        # A spec invariant fails in the state after a step, the others before it.
        step = stop.cursor - 1 if violated in self.invariants else stop.cursor
        action = trace.steps[step - 1].action if 1 <= step <= len(trace.steps) else "Init"
        at = group.offset + step
        return FileVerdict(
            str(path), "rejected", group.whole or len(trace.steps), at, action,
            _reason(violated, at),
        )

    def check(
        self, group: _Group, max_runs: int
    ) -> tuple[list[FileVerdict] | None, list[TlcResult]]:
        """Verdicts for every file of ``group``, and the TLC runs that produced them;
        no verdicts when ``group`` is a window whose last state missed its handoff."""
        verdicts: dict[Path, FileVerdict] = {}
        runs: list[TlcResult] = []
        todo = [_Group(
            group.number, list(group.paths), list(group.traces), group.start, group.end,
            group.offset, group.whole,
        )]
        while todo:
            left = todo.pop(0)
            while left.traces and len(runs) < max_runs:
                res = self.run(left, f"run{len(runs)}")
                runs.append(res)
                if res.output.result == "ok":
                    for p, t in zip(left.paths, left.traces, strict=True):
                        verdicts[p] = FileVerdict(str(p), "accepted", len(t.steps))
                    left = _Group(group.number, [], [])
                    break
                try:
                    rejected = self.verdict(left, res, runs)
                except _HandoffMismatch:
                    return None, runs
                except TraceCheckError as exc:
                    if len(left.traces) > 1:  # replay each alone: find the one at fault
                        todo += [left.alone(i) for i in range(len(left.traces))]
                    else:
                        p, t = left.paths[0], left.traces[0]
                        verdicts[p] = FileVerdict(str(p), "error", len(t.steps), reason=str(exc))
                    left = _Group(group.number, [], [])
                    break
                verdicts[Path(rejected.path)] = rejected
            for p, t in zip(left.paths, left.traces, strict=True):
                verdicts[p] = FileVerdict(str(p), "unchecked", len(t.steps))
        for p, t in zip(group.paths, group.traces, strict=True):
            verdicts.setdefault(p, FileVerdict(str(p), "unchecked", len(t.steps)))
            if t.header.bug != "none":
                verdicts[p].bug = t.header.bug
        return [verdicts[p] for p in group.paths], runs


def _groups(paths: Sequence[Path], traces: Sequence[Trace], first: int = 0) -> list[_Group]:
    by_key: dict[tuple[object, ...], _Group] = {}
    for p, t in zip(paths, traces, strict=True):
        key = t.header.same_constants()
        group = by_key.setdefault(key, _Group(first + len(by_key), [], []))
        group.paths.append(p)
        group.traces.append(t)
    return list(by_key.values())


def window_size(steps: int, jobs: int, window: int | None) -> int:
    """Steps per window for a trace of ``steps`` (``steps``: one window, the whole).

    ``window``: None splits a trace into ``jobs`` windows when each gets at least
    ``MIN_WINDOW`` steps; 0 never splits; a positive number is the size asked for.
    """
    if window is None:
        size = math.ceil(steps / max(1, jobs))
        return size if jobs > 1 and size >= MIN_WINDOW else steps
    if window < 0:
        raise ModelError(f"window must be 0 (off) or a positive number of steps, not {window}")
    return steps if window == 0 else min(window, steps)


def _windows(number: int, path: Path, trace: Trace, size: int) -> list[_Group]:
    """``trace`` cut into windows of ``size`` steps, each with its first and last state.

    Cost in Python: O(the steps' changes) plus O(state) per cut (two full states)."""
    ids = Ids(trace.header)
    states = States(trace.header, ids)
    groups: list[_Group] = []
    start: WindowState | None = None
    for n, lo in enumerate(range(0, len(trace.steps), size)):
        hi = min(lo + size, len(trace.steps))
        for step in trace.steps[lo:hi]:
            states.apply(step)
        last = hi == len(trace.steps)
        part = Trace(header=trace.header, steps=trace.steps[lo:hi])
        end = None if last else states.state("TrLast")
        groups.append(
            _Group(number + n, [path], [part], start, end, offset=lo, whole=len(trace.steps))
        )
        start = None if last else states.state("TrFirst")
    return groups


def _merge(path: Path, steps: int, parts: list[list[FileVerdict] | None]) -> FileVerdict | None:
    """One trace's verdict from its windows' (in order); None: replay it whole (a handoff
    failed, or a window got no verdict before any window rejected)."""
    for part in parts:
        if part is None:
            return None
        (v,) = part
        if v.verdict == "rejected":
            return v
        if v.verdict != "accepted":
            return None
    return FileVerdict(str(path), "accepted", steps)


def _replay_all(
    replay: _Replay, units: list[_Group], jobs: int, max_runs: int
) -> list[tuple[list[FileVerdict] | None, list[TlcResult]]]:
    """Check every group, up to ``jobs`` at once. Groups replay in helper threads, which
    never take SIGINT/SIGTERM: an interrupt reaches this thread, which kills every run
    (else the executor would wait for them all)."""
    with (
        latched(),
        ThreadPoolExecutor(max_workers=max(1, jobs), initializer=block_in_this_thread) as pool,
    ):
        try:
            return list(pool.map(lambda g: replay.check(g, max_runs), units))
        except BaseException:
            replay.runs.stop()
            raise


def check_traces(
    paths: Sequence[Path],
    *,
    install: TlcInstall | None = None,
    tla_dir: Path | None = None,
    jobs: int | None = None,
    window: int | None = None,
    max_runs: int = 8,
    keep: bool = False,
    allow_bug: bool = False,
    limits: HeaderLimits | None = None,
) -> TraceCheckResult:
    """Validate trace files with TLC; a malformed file raises ``TraceFormatError``.

    A header naming an injected bug is refused unless ``allow_bug``; one whose constants
    pass ``limits`` is refused too; both before TLC starts. Up to ``jobs`` TLC runs go at
    once (default: every core); a trace without an injected bug may be split into
    windows (``window_size``). Each group gets at most ``max_runs`` TLC runs. The scratch
    directory is deleted when every trace is accepted (unless ``keep``).
    """
    if not paths:
        raise ModelError("no trace files given")
    jobs = jobs if jobs is not None else (os.cpu_count() or 1)
    if jobs < 1:
        raise ModelError(f"jobs must be 1 or more, not {jobs}")
    traces = [read_trace(p) for p in paths]
    limits = limits or HeaderLimits()
    refused: dict[str, FileVerdict] = {}
    for p, t in zip(paths, traces, strict=True):
        why = header_problem(t.header, allow_bug=allow_bug, limits=limits)
        if why is not None:
            refused[str(Path(p))] = FileVerdict(str(Path(p)), "refused", len(t.steps), reason=why)
    todo = [(Path(p), t) for p, t in zip(paths, traces, strict=True) if str(Path(p)) not in refused]
    if not todo:
        return _result(list(refused.values()), traces, [], [], None)
    install = install or ensure_tlc()
    tla = tla_dir or default_tla_dir()
    source = tla / INVARIANTS_FROM
    if not source.is_file():
        raise ModelError(f"{source} is missing: it lists the invariants a trace must keep")
    invariants = cfgfile.invariants(source.read_text())
    replay = _Replay(install, tla, invariants)
    split = {
        p: size
        for p, t in todo
        if t.header.bug == "none"
        and (size := window_size(len(t.steps), jobs, window)) < len(t.steps)
    }
    groups = _groups([p for p, _ in todo if p not in split], [t for p, t in todo if p not in split])
    windows: dict[Path, list[_Group]] = {}
    for p, t in todo:
        if p in split:
            windows[p] = _windows(len(groups) + sum(map(len, windows.values())), p, t, split[p])
    units = groups + [w for ws in windows.values() for w in ws]

    done = _replay_all(replay, units, jobs, max_runs)
    by_path = {v.path: v for verdicts, _ in done[: len(groups)] for v in verdicts or []}
    runs = [r for _, rs in done for r in rs]
    again: list[tuple[Path, Trace]] = []
    at = len(groups)
    for p, ws in windows.items():
        parts = [verdicts for verdicts, _ in done[at : at + len(ws)]]
        at += len(ws)
        trace = next(t for q, t in todo if q == p)
        merged = _merge(p, len(trace.steps), parts)
        if merged is None:
            again.append((p, trace))
        else:
            by_path[str(p)] = merged
    if again:  # replayed whole, as without windows
        whole = _groups([p for p, _ in again], [t for _, t in again], first=len(units))
        redo = _replay_all(replay, whole, jobs, max_runs)
        by_path |= {v.path: v for verdicts, _ in redo for v in verdicts or []}
        runs += [r for _, rs in redo for r in rs]
    by_path |= refused
    files = [by_path[str(Path(p))] for p in paths]
    result = _result(files, traces, runs, invariants, replay.root)
    if result.accepted and not keep:
        shutil.rmtree(replay.root, ignore_errors=True)
        result.workdir = None
    return result


def _result(
    files: list[FileVerdict],
    traces: Sequence[Trace],
    runs: list[TlcResult],
    invariants: list[str],
    root: Path | None,
) -> TraceCheckResult:
    return TraceCheckResult(
        accepted=all(f.verdict == "accepted" for f in files),
        files=files,
        tlc_seconds=round(sum(r.seconds for r in runs), 3),
        tlc_runs=len(runs),
        steps=sum(len(t.steps) for t in traces),
        longest=max(len(t.steps) for t in traces),
        invariants=invariants,
        workdir=str(root) if root is not None else None,
        logs=[str(r.log_path) for r in runs if r.output.result != "ok"],
    )
