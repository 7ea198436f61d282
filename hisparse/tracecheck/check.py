"""``hisparse check --trace``: is each recorded run a behaviour of ``tla/HiSparse.tla``?

Headers are screened first (``admit``): an unknown or unrequested injected bug, or
constants past the limits, make that file ``refused`` before TLC starts. Traces with
the same constants are replayed in one TLC run (JVM start and parsing dominate). TLC
stops at the first failure, so a rejected trace is set aside and the rest of its group
replayed again, until the group passes or ``max_runs`` is spent; traces that never got
a clean run are reported ``unchecked``. When TLC fails in a way no trace explains, the
group is split and each trace replayed alone, so only the trace at fault gets ``error``
and every other file keeps its own verdict.
"""

from __future__ import annotations

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

# The spec's safety invariants are the ones the small model checks.
INVARIANTS_FROM = "MC_small.cfg"

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
    """Traces sharing one header, replayed together."""

    number: int
    paths: list[Path]
    traces: list[Trace]


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
        if diagnose_at is None:
            module.write_text(gen.module_text(group.traces))
        else:
            module.write_text(gen.module_text(group.traces, diagnose_at=diagnose_at))
        cfg = gen_dir / f"{gen.MODULE}.cfg"
        cfg.write_text(gen.cfg_text(self.invariants, diagnose=diagnose_at is not None))
        return run_tlc(
            module, cfg, gen_dir, "auto", tla_dir=self.tla, install=self.install, runs=self.runs
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
        alone = _Group(group.number, [group.paths[idx]], [group.traces[idx]])
        res = self.run(alone, f"diagnose{len(runs)}", diagnose_at=at)
        runs.append(res)
        return self.stop(res, 1)[0]

    def verdict(self, group: _Group, res: TlcResult, runs: list[TlcResult]) -> FileVerdict:
        """Reject the trace a failed run stopped in, and drop it from ``group``."""
        violated, stop = self.stop(res, len(group.traces))
        idx = stop.tr - 1
        if violated == DEADLOCK:
            violated = self.diagnose(group, idx, stop.cursor, runs)
        trace, path = group.traces.pop(idx), group.paths.pop(idx)
        # A spec invariant fails in the state after a step, the others before it.
        step = stop.cursor - 1 if violated in self.invariants else stop.cursor
        action = trace.steps[step - 1].action if 1 <= step <= len(trace.steps) else "Init"
        return FileVerdict(
            str(path), "rejected", len(trace.steps), step, action, _reason(violated, step)
        )

    def check(self, group: _Group, max_runs: int) -> tuple[list[FileVerdict], list[TlcResult]]:
        """Verdicts for every file of ``group``, and the TLC runs that produced them."""
        verdicts: dict[Path, FileVerdict] = {}
        runs: list[TlcResult] = []
        todo = [_Group(group.number, list(group.paths), list(group.traces))]
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
                except TraceCheckError as exc:
                    if len(left.traces) > 1:  # replay each alone: find the one at fault
                        todo += [
                            _Group(group.number, [p], [t])
                            for p, t in zip(left.paths, left.traces, strict=True)
                        ]
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


def _groups(paths: Sequence[Path], traces: Sequence[Trace]) -> list[_Group]:
    by_key: dict[tuple[object, ...], _Group] = {}
    for p, t in zip(paths, traces, strict=True):
        group = by_key.setdefault(t.header.same_constants(), _Group(len(by_key), [], []))
        group.paths.append(p)
        group.traces.append(t)
    return list(by_key.values())


def check_traces(
    paths: Sequence[Path],
    *,
    install: TlcInstall | None = None,
    tla_dir: Path | None = None,
    jobs: int = 2,
    max_runs: int = 8,
    keep: bool = False,
    allow_bug: bool = False,
    limits: HeaderLimits | None = None,
) -> TraceCheckResult:
    """Validate trace files with TLC; a malformed file raises ``TraceFormatError``.

    A header naming an injected bug is refused unless ``allow_bug``; one whose constants
    pass ``limits`` is refused too; both before TLC starts. Up to ``jobs`` groups run at
    once; each group gets at most ``max_runs`` TLC runs. The scratch directory is deleted
    when every trace is accepted (unless ``keep``).
    """
    if not paths:
        raise ModelError("no trace files given")
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
    groups = _groups([p for p, _ in todo], [t for _, t in todo])
    # Groups replay in helper threads, which never take SIGINT/SIGTERM: an interrupt
    # reaches this thread, which kills every run (else the executor waits for them all).
    with (
        latched(),
        ThreadPoolExecutor(max_workers=max(1, jobs), initializer=block_in_this_thread) as pool,
    ):
        try:
            done = list(pool.map(lambda g: replay.check(g, max_runs), groups))
        except BaseException:
            replay.runs.stop()
            raise
    by_path = {v.path: v for verdicts, _ in done for v in verdicts} | refused
    runs = [r for _, rs in done for r in rs]
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
