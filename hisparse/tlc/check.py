"""``hisparse check``: run a model's safety and liveness configs, or prove a bug is caught.

Model ``M`` is ``tla/MC_M.tla`` checked with ``MC_M.cfg`` (safety, may use SYMMETRY) and,
if present, ``MC_M_live.cfg`` (temporal properties, no SYMMETRY). Injection generates a
module that overrides the ``Bug`` constant, and for liveness bugs checks one property per
run, because TLC does not say which temporal property failed.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hisparse.bugs import InjectedBug, get_bug
from hisparse.tlc import cfg as cfgfile
from hisparse.tlc.acquire import TlcInstall, ensure_tlc
from hisparse.tlc.counterexample import last_states
from hisparse.tlc.errors import ModelError
from hisparse.tlc.output import TEMPORAL, Verdict, worst
from hisparse.tlc.paths import tla_dir as default_tla_dir
from hisparse.tlc.runner import TlcResult, run_tlc
from hisparse.tlc.signals import held, latched

# tp / tpshared: two tensor-parallel ranks, private host pools / one shared pool;
# suffix: the indexer suffix rule (tla/IndexerSuffix.tla, a companion module)
MODELS = ("small", "ci", "deep", "tp", "tpshared", "suffix", "pd")
SUFFIX = "suffix"  # the companion spec: its own module, constants and bugs
INJECT_MODULE = "MCInject"
INJECT_OPERATOR = "InjectedBug"


@dataclass
class RunSummary:
    """Per-run figures as they appear under ``"runs"`` in the JSON report."""

    module: str
    cfg: str
    result: Verdict
    reason: str
    exit_code: int
    distinct_states: int
    states_generated: int
    depth: int
    seconds: float
    invariants: list[str]
    properties: list[str]
    violated: list[str]
    log: str
    counterexample: list[str] = field(default_factory=list)  # its last states, if any


@dataclass
class CheckReport:
    """Aggregate of all runs for one ``hisparse check`` (the ``--json`` document)."""

    model: str
    result: Verdict
    reason: str
    distinct_states: int
    states_generated: int
    depth: int
    seconds: float
    invariants: list[str]
    properties: list[str]
    tlc_version: str | None
    violated: list[str]
    injected: str | None = None
    caught_expected: bool | None = None
    runs: list[RunSummary] = field(default_factory=list)
    workdir: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ModelFiles:
    """The module and configs that make up one model."""

    module: Path
    safety: Path
    live: Path | None


def model_files(model: str, tla_dir: Path | None = None) -> ModelFiles:
    """Locate ``MC_<model>.tla``/``.cfg`` (required) and ``MC_<model>_live.cfg`` (optional)."""
    src = tla_dir or default_tla_dir()
    module, safety, live = (
        src / f"MC_{model}.tla",
        src / f"MC_{model}.cfg",
        src / f"MC_{model}_live.cfg",
    )
    missing = [p.name for p in (module, safety) if not p.is_file()]
    if missing:
        raise ModelError(f"model {model!r}: missing {', '.join(missing)} in {src}")
    return ModelFiles(module, safety, live if live.is_file() else None)


def summarize(run: TlcResult, cfg_text: str) -> RunSummary:
    """Reduce a run to its figures; a lone property stands in for TLC's anonymous temporal error."""
    props = cfgfile.properties(cfg_text)
    violated, reason = list(run.output.violated), run.output.reason
    if TEMPORAL in violated and len(props) == 1:
        violated[violated.index(TEMPORAL)] = props[0]
        reason = reason.replace(TEMPORAL, props[0])
    return RunSummary(
        module=run.module,
        cfg=run.cfg,
        result=run.output.result,
        reason=reason,
        exit_code=run.output.exit_code,
        distinct_states=run.output.distinct_states,
        states_generated=run.output.states_generated,
        depth=run.output.depth,
        seconds=round(run.seconds, 3),
        invariants=cfgfile.invariants(cfg_text),
        properties=props,
        violated=violated,
        log=str(run.log_path),
        counterexample=last_states(run.raw) if violated else [],
    )


def _union(lists: list[list[str]]) -> list[str]:
    out: list[str] = []
    for names in lists:
        out += [n for n in names if n not in out]
    return out


class _Session:
    """One check: a scratch directory plus the TLC settings shared by its runs."""

    def __init__(
        self,
        model: str,
        install: TlcInstall,
        workers: int | str,
        echo: bool,
        tla: Path,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.progress = progress
        self.root = Path(tempfile.mkdtemp(prefix=f"hisparse-check-{model}-"))
        self.gen = self.root / "generated"
        self.gen.mkdir()
        self.install, self.workers, self.echo, self.tla = install, workers, echo, tla
        self.runs: list[RunSummary] = []
        self.versions: list[str] = []

    def run(self, module: Path, cfg: Path) -> RunSummary:
        if self.progress is not None:
            self.progress(f"TLC {module.stem}/{cfg.name} ...")
        res = run_tlc(
            module,
            cfg,
            self.root,
            self.workers,
            tla_dir=self.tla,
            install=self.install,
            echo=self.echo,
        )
        if res.output.tlc_version:
            self.versions.append(res.output.tlc_version)
        summary = summarize(res, cfg.read_text())
        self.runs.append(summary)
        if self.progress is not None:
            self.progress(
                f"TLC {module.stem}/{cfg.name}: {summary.result}, "
                f"{summary.distinct_states:,} distinct states, {summary.seconds:.1f} s"
            )
        return summary

    def write(self, name: str, text: str) -> Path:
        path = self.gen / name
        path.write_text(text)
        return path

    def per_property(self, module: Path, live_text: str) -> list[RunSummary]:
        """Check each property of a live cfg on its own, so a violation has a name."""
        return [
            self.run(
                module,
                self.write(
                    f"{module.stem}_{prop}.cfg", cfgfile.with_only_property(live_text, prop)
                ),
            )
            for prop in cfgfile.properties(live_text)
        ]


def _plan_injection(s: _Session, files: ModelFiles, model: str, bug: InjectedBug) -> None:
    module = s.write(
        f"{INJECT_MODULE}.tla",
        f"---- MODULE {INJECT_MODULE} ----\nEXTENDS MC_{model}\n"
        f'{INJECT_OPERATOR} == "{bug.name}"\n====\n',
    )
    if bug.kind == "invariant":
        text = cfgfile.rebind_bug(files.safety.read_text(), INJECT_OPERATOR)
        s.run(module, s.write(f"{INJECT_MODULE}.cfg", text))
        return
    if files.live is None:
        raise ModelError(
            f"bug {bug.name} is caught by a property, but MC_{model}_live.cfg is missing"
        )
    s.per_property(module, cfgfile.rebind_bug(files.live.read_text(), INJECT_OPERATOR))


def _caught_exactly(bug: InjectedBug, named: list[str], properties: list[str]) -> bool:
    """An invariant bug must trip its invariant alone (TLC stops at the first failure);
    a property bug its own property, and no safety invariant or deadlock."""
    if bug.kind == "invariant":
        return named == [bug.catches]
    return bug.catches in named and all(n in properties for n in named)


def check_model(
    model: str,
    *,
    inject: str | None = None,
    workers: int | str = "auto",
    echo: bool = False,
    tla_dir: Path | None = None,
    install: TlcInstall | None = None,
    keep: bool = False,
    progress: Callable[[str], None] | None = None,
) -> CheckReport:
    """Run all configs of ``model`` (or the injection runs) and aggregate the verdicts.

    The scratch directory is deleted on success (for an injection: when the expected
    check caught the bug) and kept, with its logs, otherwise; an interrupt deletes it.
    ``progress`` is told when each TLC run starts and ends.
    """
    bug = get_bug(inject) if inject else None
    if bug is not None and (bug.model == SUFFIX) != (model == SUFFIX):
        spec = "tla/IndexerSuffix.tla" if bug.model == SUFFIX else "tla/HiSparse.tla"
        raise ModelError(f"bug {bug.name} is a bug of {spec} (model {bug.model}); "
                         f"model {model} cannot inject it")
    install = install or ensure_tlc()
    tla = tla_dir or default_tla_dir()
    files = model_files(model, tla)
    s = _Session(model, install, workers, echo, tla, progress)
    try:
        with latched():  # no interrupt is lost between TLC runs either
            if bug is not None:
                _plan_injection(s, files, model, bug)
            else:
                s.run(files.module, files.safety)
                if files.live is not None:
                    live = s.run(files.module, files.live)
                    if TEMPORAL in live.violated:
                        s.per_property(files.module, files.live.read_text())
    except BaseException:  # Ctrl-C, SIGTERM, errors: leave no scratch folder behind
        if not keep:
            with held():  # a second Ctrl-C waits until the folder is gone
                shutil.rmtree(s.root, ignore_errors=True)
        raise
    result = worst([r.result for r in s.runs])
    reasons = [f"{r.cfg}: {r.reason}" for r in s.runs if r.result == result]
    named = _union([r.violated for r in s.runs])
    properties = _union([r.properties for r in s.runs])
    if len(named) > 1 and TEMPORAL in named:
        named.remove(TEMPORAL)  # the follow-up per-property runs named it
    report = CheckReport(
        model=model,
        result=result,
        reason="; ".join(reasons),
        distinct_states=sum(r.distinct_states for r in s.runs),
        states_generated=sum(r.states_generated for r in s.runs),
        depth=max((r.depth for r in s.runs), default=0),
        seconds=round(sum(r.seconds for r in s.runs), 3),
        invariants=_union([r.invariants for r in s.runs]),
        properties=properties,
        tlc_version=s.versions[0] if s.versions else None,
        violated=named,
        injected=bug.name if bug else None,
        caught_expected=_caught_exactly(bug, named, properties) if bug else None,
        runs=s.runs,
        workdir=str(s.root),
    )
    expected = report.caught_expected if bug is not None else result == "ok"
    if expected and not keep:
        shutil.rmtree(s.root, ignore_errors=True)
        report.workdir = None
        for r in report.runs:
            r.log = ""  # deleted with the scratch folder
    return report
