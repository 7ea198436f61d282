"""Rule: ``check_traces`` refuses what it must before it reads or fetches anything it
does not need -- rules that survivors of the trace checker's mutants (run against
tests/test_trace_encoding_rules.py, docs/mutation-run7) showed. No TLC runs here.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, cast

import pytest

from hisparse.spec.trace import read_trace
from hisparse.tlc.acquire import TlcInstall
from hisparse.tlc.errors import ModelError
from hisparse.tlc.output import parse_output
from hisparse.tlc.runner import TlcResult
from hisparse.tracecheck import check
from hisparse.tracecheck.admit import HeaderLimits
from tests.test_tlc_rules_nojava import TLA

GOLDEN = Path(__file__).parent / "data" / "trace_golden" / "imports.jsonl"


def _no_fetch() -> Any:
    raise AssertionError("TLC fetched for a check that needs no TLC run")


def test_a_check_whose_every_trace_is_refused_fetches_no_tlc(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every trace refused by its header (here: more blocks than the limits allow): the
    result says so, and TLC is neither fetched nor run.
    (kills hisparse/tracecheck/check.py:374:reorder:2, which fetched TLC first)"""
    monkeypatch.setattr(check, "ensure_tlc", _no_fetch)
    res = check.check_traces([GOLDEN], limits=HeaderLimits(blocks=1))
    assert not res.accepted and res.tlc_runs == 0
    (v,) = res.files
    assert v.verdict == "refused" and v.path == str(GOLDEN)


def test_a_missing_invariant_source_is_refused_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spec sources without the config the invariants come from: a ModelError naming it,
    not an OSError from reading it.
    (kills hisparse/tracecheck/check.py:378:raise:3, which went on without it, and
    379:reorder:3, which read it before the check)"""
    monkeypatch.setattr(check, "ensure_tlc", _no_fetch)
    install = object()  # never used: the check stops before any run
    with pytest.raises(ModelError, match=r"MC_pd\.cfg is missing: it lists the invariants"):
        check.check_traces([GOLDEN], tla_dir=tmp_path, install=install)  # type: ignore[arg-type]


def test_jobs_below_one_are_refused_before_any_file_is_read(tmp_path: Path) -> None:
    """``jobs`` < 1 is refused as such, before the trace files are read (a file that
    is not a trace does not change the error).
    (kills hisparse/tracecheck/check.py:364:reorder:1, which read the files first)"""
    bad = tmp_path / "not-a-trace.jsonl"
    bad.write_text("{not json\n")
    with pytest.raises(ModelError, match="jobs must be 1 or more, not 0"):
        check.check_traces([bad], jobs=0)


def test_a_bug_trace_is_refused_unless_allowed_whatever_else_is_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A trace recorded with an injected bug is refused (before TLC) unless ``allow_bug``;
    keeping the scratch folder does not allow it.
    (kills hisparse/tracecheck/check.py:368:var:15, which took ``keep`` for
    ``allow_bug``)"""
    monkeypatch.setattr(check, "ensure_tlc", _no_fetch)
    bug = GOLDEN.with_name("bug.jsonl")
    res = check.check_traces([bug], keep=True)
    (v,) = res.files
    assert v.verdict == "refused" and "bug" in (v.reason or "") and res.tlc_runs == 0


def test_window_zero_never_splits_and_none_splits_by_jobs() -> None:
    """``window_size``: 0 never splits a trace, None gives each of ``jobs`` windows an
    equal share once each gets ``MIN_WINDOW`` steps, a positive size is taken as asked.
    (kills hisparse/tracecheck/check.py:278:none:0, which took 0 for None and split)"""
    steps = 4 * check.MIN_WINDOW
    assert check.window_size(steps, 4, 0) == steps
    assert check.window_size(steps, 4, None) == check.MIN_WINDOW
    assert check.window_size(steps, 4, 7) == 7
    assert check.window_size(steps - 4, 4, None) == steps - 4  # shares below MIN_WINDOW


def _rejects(tmp: Path, label: str, tr: int, violated: str = "MatchPost", cursor: int = 2
             ) -> TlcResult:
    """A failed replay, stopped in trace ``tr`` at ``cursor`` by ``violated`` (as TLC
    prints it: the invariant, then the last state's cursor variables)."""
    text = (
        f"Error: Invariant {violated} is violated.\n"
        "Error: The behavior up to this point is:\n"
        f"State 1: <Initial predicate>\n/\\ tr = {tr}\n/\\ cursor = {cursor}\n\n"
    )
    return TlcResult("M", "M.cfg", [], 1.0, tmp / f"{label}.log", parse_output(text, 12),
                     text)


@pytest.mark.parametrize(("violated", "cursor", "step"), [
    ("TypeOK", 1, 0),  # a spec invariant fails in the state after the step before
    ("TypeOK", 2, 1),
    ("MatchPost", 1, 1),  # a trace check fails before its step
])
def test_a_rejection_names_the_step_and_its_action_or_init(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, violated: str, cursor: int, step: int
) -> None:
    """A rejected trace's verdict names the step it stopped at and that step's action;
    step 0 (a spec invariant broken by the initial state) is ``Init``, step 1 the first
    recorded action.
    (kills hisparse/tracecheck/check.py:212:int:5 and 212:cmp:22, which called step 1
    ``Init`` too)"""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    trace = read_trace(GOLDEN)
    replay = check._Replay(cast(TlcInstall, object()), tmp_path, ["TypeOK"])
    group = check._Group(0, [GOLDEN], [trace])
    v = replay.verdict(group, _rejects(tmp_path, "run0", 1, violated, cursor), [])
    action = trace.steps[0].action if step == 1 else "Init"
    assert (v.verdict, v.step, v.action) == ("rejected", step, action)
    assert action != "Init" or step == 0


# --- the replay's bookkeeping, TLC answered by a stand-in ----------------------------

IMPORTS, SHARED = GOLDEN, GOLDEN.with_name("shared.jsonl")
BUG = GOLDEN.with_name("bug.jsonl")


def _twin(tmp: Path) -> Path:
    """A second trace file with the imports trace's constants (the same group)."""
    twin = tmp / "twin.jsonl"
    twin.write_text(IMPORTS.read_text())
    return twin


def _ok(tmp: Path, label: str) -> TlcResult:
    text = "Model checking completed. No error has been found.\n"
    return TlcResult("M", "M.cfg", [], 1.0, tmp / f"{label}.log", parse_output(text, 0), text)


class StandIn:
    """Answers ``_Replay.run`` (one TLC run of a group) by ``rule``; keeps the replays
    and the groups it was asked about."""

    def __init__(self, rule: Any) -> None:
        self.rule = rule
        self.replays: list[Any] = []
        self.asked: list[Any] = []

    def install(self, monkeypatch: pytest.MonkeyPatch, tmp: Path) -> None:
        monkeypatch.setattr(tempfile, "tempdir", str(tmp))
        monkeypatch.setattr(check, "ensure_tlc", lambda: object())

        def run(replay: Any, group: Any, label: str, *, diagnose_at: int | None = None
                ) -> TlcResult:
            self.replays.append(replay)
            self.asked.append(group)
            return cast(TlcResult, self.rule(tmp, group, f"g{group.number}-{label}"))

        monkeypatch.setattr(check._Replay, "run", run)


def test_an_accepted_check_deletes_its_scratch_and_marks_only_bug_traces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every trace accepted and ``keep`` not asked: the scratch folder is deleted (also
    when bug traces were allowed), and only a trace recorded with an injected bug carries
    its name.
    (kills hisparse/tracecheck/check.py:417:call:8, which left the folder; 416:var:48,
    which kept it when bugs were allowed; 257:cmp:23, which marked the clean trace
    "none" and not the bug trace)"""
    tlc = StandIn(lambda tmp, group, label: _ok(tmp, label))
    tlc.install(monkeypatch, tmp_path)
    res = check.check_traces([IMPORTS, BUG], jobs=1, allow_bug=True, tla_dir=TLA)
    assert res.accepted and res.workdir is None
    assert tlc.replays and not tlc.replays[0].root.exists()
    assert [(v.verdict, v.bug) for v in res.files] == [
        ("accepted", None), ("accepted", "double_allocation")]


def test_the_logs_are_those_of_the_runs_that_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One group of two traces (same constants): the first run rejects the first trace,
    the second accepts the other. Only the failed run's log is listed.
    (kills hisparse/tracecheck/check.py:438:cmp:41, which listed the clean runs')"""
    tlc = StandIn(lambda tmp, group, label: _rejects(tmp, label, 1) if label.endswith(
        "run0") else _ok(tmp, label))
    tlc.install(monkeypatch, tmp_path)
    res = check.check_traces([IMPORTS, _twin(tmp_path)], jobs=1, tla_dir=TLA)
    assert [v.verdict for v in res.files] == ["rejected", "accepted"]
    assert res.logs == [str(tmp_path / "g0-run0.log")]


def test_a_group_gets_at_most_max_runs_tlc_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each run rejects the first trace left of a group of two (same constants): with
    ``max_runs`` 1 the second is left unchecked, with 2 both are rejected.
    (kills hisparse/tracecheck/check.py:232:cmp:28, which allowed one run more)"""
    tlc = StandIn(lambda tmp, group, label: _rejects(tmp, label, 1))
    tlc.install(monkeypatch, tmp_path)
    both = [IMPORTS, _twin(tmp_path)]
    one = check.check_traces(both, jobs=1, max_runs=1, tla_dir=TLA, keep=True)
    assert [v.verdict for v in one.files] == ["rejected", "unchecked"] and one.tlc_runs == 1
    two = check.check_traces(both, jobs=1, max_runs=2, tla_dir=TLA, keep=True)
    assert [v.verdict for v in two.files] == ["rejected", "rejected"] and two.tlc_runs == 2


def test_windows_whose_handoff_fails_are_replayed_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trace cut into windows whose handoff check fails is replayed whole, and the
    whole replay's verdict is the file's.
    (kills hisparse/tracecheck/check.py:411:var:42, which took the windows' verdicts)"""
    def rule(tmp: Path, group: Any, label: str) -> TlcResult:
        if group.whole:  # a window
            return _rejects(tmp, label, 1, violated="TrHandoff")
        return _ok(tmp, label)

    tlc = StandIn(rule)
    tlc.install(monkeypatch, tmp_path)
    res = check.check_traces([IMPORTS], jobs=1, window=10, tla_dir=TLA)
    assert [v.verdict for v in res.files] == ["accepted"]
    assert any(g.whole for g in tlc.asked) and not tlc.asked[-1].whole


def test_each_windowed_trace_is_judged_by_its_own_windows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two traces cut into windows: the last window of the second rejects it, the
    first's are all clean. Each file's verdict comes from its own windows.
    (kills hisparse/tracecheck/check.py:401:arith:1, which read the second trace's
    verdict from the wrong windows)"""
    def rule(tmp: Path, group: Any, label: str) -> TlcResult:
        if group.paths == [SHARED] and group.offset == 30:  # its last window
            return _rejects(tmp, label, 1)
        return _ok(tmp, label)

    tlc = StandIn(rule)
    tlc.install(monkeypatch, tmp_path)
    res = check.check_traces([IMPORTS, SHARED], jobs=1, window=10, tla_dir=TLA, keep=True)
    assert [v.verdict for v in res.files] == ["accepted", "rejected"]
    assert res.files[1].step == 32  # the window's offset, plus the step it stopped at


def test_an_interrupt_stops_every_run_and_reaches_the_caller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ctrl-C while groups replay (here: raised by a run) stops the replay's other runs
    and is raised to the caller, not swallowed.
    (kills hisparse/tracecheck/check.py:336:raise:6, which swallowed it, and 335:call:13,
    which left the other runs going)"""
    def rule(tmp: Path, group: Any, label: str) -> TlcResult:
        raise KeyboardInterrupt

    tlc = StandIn(rule)
    tlc.install(monkeypatch, tmp_path)
    with pytest.raises(KeyboardInterrupt):
        check.check_traces([IMPORTS], jobs=1, tla_dir=TLA)
    assert tlc.replays[0].runs._stopped


def test_the_default_jobs_are_the_cores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without ``jobs``, the windows are planned for every core.
    (kills hisparse/tracecheck/check.py:361:bool:5, which planned for one)"""
    seen: list[int] = []

    def spy(steps: int, jobs: int, window: int | None) -> int:
        seen.append(jobs)
        return steps

    tlc = StandIn(lambda tmp, group, label: _ok(tmp, label))
    tlc.install(monkeypatch, tmp_path)
    monkeypatch.setattr(check, "window_size", spy)
    assert check.check_traces([IMPORTS], tla_dir=TLA).accepted
    assert seen == [os.cpu_count() or 1]


def test_every_group_and_window_replays_in_its_own_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A whole group (a bug trace, never cut) and two traces cut into windows: every unit
    writes its module into a folder of its own, and all are accepted.
    (kills hisparse/tracecheck/check.py:391:arith:9, which numbered the second trace's
    windows from below the first's, so one of its folders was the whole group's)"""
    folders: list[Path] = []

    def run_tlc(module: Path, cfg: Path, gen_dir: Path, workers: object, **kw: object
                ) -> TlcResult:
        assert module.is_file() and cfg.is_file() and module.parent == gen_dir
        folders.append(gen_dir)
        return _ok(tmp_path, gen_dir.name)

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(check, "ensure_tlc", lambda: object())
    monkeypatch.setattr(check, "run_tlc", run_tlc)
    windows = -(-len(read_trace(IMPORTS).steps) // 10)  # 46 steps: 5 windows
    res = check.check_traces([BUG, IMPORTS, _twin(tmp_path)], jobs=1, window=10, tla_dir=TLA,
                             allow_bug=True)
    assert [v.verdict for v in res.files] == ["accepted"] * 3
    assert len(folders) == len(set(folders)) == 1 + 2 * windows == res.tlc_runs
