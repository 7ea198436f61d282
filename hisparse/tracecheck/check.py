"""``hisparse check --trace``: is each recorded run a behaviour of ``tla/HiSparse.tla``?

Traces with the same constants are replayed in one TLC run (JVM start and parsing
dominate). TLC stops at the first failure, so a rejected trace is set aside and the
rest of its group replayed again, until the group passes or ``max_runs`` is spent;
traces that never got a clean run are reported ``unchecked``.
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
from hisparse.tlc.runner import TlcResult, run_tlc
from hisparse.tracecheck import module as gen
from hisparse.tracecheck.errtrace import StopPoint, stop_point

# The spec's safety invariants are the ones the small model checks.
INVARIANTS_FROM = "MC_small.cfg"

Verdict = Literal["accepted", "rejected", "unchecked"]


@dataclass
class FileVerdict:
    """The verdict on one trace file; ``step``/``action``/``reason`` only when rejected."""

    path: str
    verdict: Verdict
    steps: int
    step: int | None = None
    action: str | None = None
    reason: str | None = None

    def line(self) -> str:
        """The CLI's line for a rejected or unchecked file."""
        if self.verdict == "rejected":
            return f"rejected: {self.path} at step {self.step} (action {self.action})"
        return f"{self.verdict}: {self.path}"


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

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["result"] = "accepted" if self.accepted else "rejected"
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
        self.root = Path(tempfile.mkdtemp(prefix="hisparse-trace-"))

    def run(self, group: _Group, label: str, *, diagnose: bool = False) -> TlcResult:
        gen_dir = self.root / f"group{group.number}-{label}"
        gen_dir.mkdir(parents=True)
        module = gen_dir / f"{gen.MODULE}.tla"
        module.write_text(gen.module_text(group.traces))
        cfg = gen_dir / f"{gen.MODULE}.cfg"
        cfg.write_text(gen.cfg_text(self.invariants, diagnose=diagnose))
        return run_tlc(module, cfg, gen_dir, "auto", tla_dir=self.tla, install=self.install)

    def stop(self, res: TlcResult, count: int) -> tuple[str, StopPoint]:
        """The first violation of a failed run and where it stopped, or TraceCheckError."""
        out = res.output
        stop = stop_point(res.raw) if out.result == "violation" else None
        if stop is None or not out.violated or not 1 <= stop.tr <= count:
            raise TraceCheckError(f"TLC could not replay the traces: {out.reason}", res.log_path)
        return out.violated[0], stop

    def diagnose(self, group: _Group, idx: int, runs: list[TlcResult]) -> str:
        """Re-run one trace that deadlocked with the diagnostic invariants, for a reason."""
        alone = _Group(group.number, [group.paths[idx]], [group.traces[idx]])
        res = self.run(alone, f"diagnose{len(runs)}", diagnose=True)
        runs.append(res)
        return self.stop(res, 1)[0]

    def verdict(self, group: _Group, res: TlcResult, runs: list[TlcResult]) -> FileVerdict:
        """Reject the trace a failed run stopped in, and drop it from ``group``."""
        violated, stop = self.stop(res, len(group.traces))
        idx = stop.tr - 1
        if violated == DEADLOCK:
            violated = self.diagnose(group, idx, runs)
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
        left = _Group(group.number, list(group.paths), list(group.traces))
        while left.traces and len(runs) < max_runs:
            res = self.run(left, f"run{len(runs)}")
            runs.append(res)
            if res.output.result == "ok":
                for p, t in zip(left.paths, left.traces, strict=True):
                    verdicts[p] = FileVerdict(str(p), "accepted", len(t.steps))
                left = _Group(group.number, [], [])
                break
            rejected = self.verdict(left, res, runs)
            verdicts[Path(rejected.path)] = rejected
        for p, t in zip(left.paths, left.traces, strict=True):
            verdicts[p] = FileVerdict(str(p), "unchecked", len(t.steps))
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
) -> TraceCheckResult:
    """Validate trace files with TLC; a malformed file raises ``TraceFormatError``.

    Up to ``jobs`` groups run at once; each group gets at most ``max_runs`` TLC runs.
    The scratch directory is deleted when every trace is accepted (unless ``keep``).
    """
    if not paths:
        raise ModelError("no trace files given")
    traces = [read_trace(p) for p in paths]
    install = install or ensure_tlc()
    tla = tla_dir or default_tla_dir()
    source = tla / INVARIANTS_FROM
    if not source.is_file():
        raise ModelError(f"{source} is missing: it lists the invariants a trace must keep")
    invariants = cfgfile.invariants(source.read_text())
    replay = _Replay(install, tla, invariants)
    groups = _groups(list(map(Path, paths)), traces)
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        done = list(pool.map(lambda g: replay.check(g, max_runs), groups))
    by_path = {v.path: v for verdicts, _ in done for v in verdicts}
    runs = [r for _, rs in done for r in rs]
    files = [by_path[str(Path(p))] for p in paths]
    accepted = all(f.verdict == "accepted" for f in files)
    result = TraceCheckResult(
        accepted=accepted,
        files=files,
        tlc_seconds=round(sum(r.seconds for r in runs), 3),
        tlc_runs=len(runs),
        steps=sum(len(t.steps) for t in traces),
        longest=max(len(t.steps) for t in traces),
        invariants=invariants,
        workdir=str(replay.root),
        logs=[str(r.log_path) for r in runs if r.output.result != "ok"],
    )
    if accepted and not keep:
        shutil.rmtree(replay.root, ignore_errors=True)
        result.workdir = None
    return result
