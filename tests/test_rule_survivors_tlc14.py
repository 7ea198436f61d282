"""Rules of the TLC runner, the model check's refusals, the conformance replay's TLC run
and CLI, and the checkout lookup, stated without Java -- rules that survivors of the
model-checked modules (run against tests/test_tlc_rules_nojava.py, docs/mutation-run7)
showed: each line ran, but no test asserted its effect.
"""

from __future__ import annotations

import copy
import importlib.util
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hisparse import conformance
from hisparse.spec.catalogue import ACTIONS
from hisparse.spec.errors import ActionNotEnabled
from hisparse.tlc import acquire, check, counterexample, paths, runner, signals
from hisparse.tlc.errors import ModelError
from hisparse.tlc.output import TEMPORAL, parse_output
from hisparse.tlc.runner import TlcResult, TlcRuns
from tests.test_tlc_rules_nojava import (
    BY_ACTION,
    GRAPH,
    NO_TLC,
    TEMPORAL_TEXT,
    TLA,
    FakeRuns,
    _blocked,
    _toy_tla,
    fake_java,
    invariant_text,
    ok_text,
    script,
    stopping_signals_unblocked,  # noqa: F401 (autouse: signals deliverable in each test)
)


def _toy_run(tmp: Path, install: acquire.TlcInstall) -> TlcResult:
    """``run_tlc`` of the toy sources' module A with ``install``'s java."""
    return runner.run_tlc(_toy_tla(tmp) / "A.tla", tmp / "tla" / "A.cfg", tmp,
                          tla_dir=tmp / "tla", install=install)


def test_run_tlc_copies_a_module_from_outside_the_sources_and_times_the_run_it_made(
    tmp_path: Path,
) -> None:
    """A module and a config from outside the spec sources are both copied into the run
    folder TLC runs in, and the run's seconds lie within the call's.
    (kills hisparse/tlc/runner.py:127:var:5, which copied the config twice and never the
    module; runner.py:198:arith:0, which added the start time instead of subtracting)"""
    install = fake_java(tmp_path, ok_text(3, 2, 1), 0)
    src = _toy_tla(tmp_path)
    gen = tmp_path / "gen"
    gen.mkdir()
    (gen / "MC_x.tla").write_text("MC_x.tla")
    (gen / "MC_x.cfg").write_text("MC_x.cfg")
    work = tmp_path / "work"
    work.mkdir()
    t0 = time.monotonic()
    res = runner.run_tlc(gen / "MC_x.tla", gen / "MC_x.cfg", work, 1, tla_dir=src,
                         install=install)
    took = time.monotonic() - t0
    rec = (tmp_path / "rec.json").read_text()
    assert '"MC_x.tla"' in rec and '"MC_x.cfg"' in rec  # both in the folder TLC ran in
    run_dir = res.log_path.parent
    assert (run_dir / "MC_x.tla").read_text() == "MC_x.tla"
    assert 0 < res.seconds <= took
    assert not signals.LATCH._children  # the finished JVM is no longer one to kill


def test_latched_puts_back_a_default_handler() -> None:
    """Leaving ``latched`` restores each stopping signal's handler, the default one too
    (SIG_DFL is 0: falsy, and still a handler).
    (kills hisparse/tlc/signals.py:116:none:1, which left latched's handler in place of
    the default)"""
    old = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        with signals.latched():
            assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, old)


def test_a_signal_whose_handler_was_the_default_still_ends_the_process() -> None:
    """Under ``latched``, SIGTERM to a process whose handler was the default kills the
    process by that signal where it arrives, as it would have without the latch (not
    later, when the block ends).
    (kills hisparse/tlc/signals.py:82:call:13, which re-raised it into the latch's own
    handler; 83:call:14, which never re-raised it, and 81:cmp:3, which never chained to
    the default: the process ran on to the end of the block)"""
    code = textwrap.dedent("""
        import os, signal
        from hisparse.tlc.signals import latched
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        with latched():
            os.kill(os.getpid(), signal.SIGTERM)
            print("still alive", flush=True)
        print("after the block", flush=True)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == -signal.SIGTERM, done
    assert done.stdout == ""  # ended where the signal came, as without the latch


def test_a_bug_of_the_other_spec_is_refused_before_tlc_is_fetched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """check_model refuses an injected bug of the other spec before it looks for TLC: a
    refusal fetches no jar.
    (kills hisparse/tlc/check.py:243:reorder:1, which fetched TLC first)"""
    def fetch() -> Any:
        raise AssertionError("TLC fetched for a run that is refused")

    monkeypatch.setattr(check, "ensure_tlc", fetch)
    monkeypatch.setattr(check, "run_tlc", FakeRuns([]))
    with pytest.raises(ModelError, match=r"model small cannot inject it"):
        check.check_model("small", inject="restore_uncapped", tla_dir=TLA)


def _fake_tlc(code: int, dot: bool, seen: list[dict[str, Any]]) -> Any:
    def run(module: Path, cfg: Path, workdir: Path, workers: int, extra: list[str],
            **kw: Any) -> TlcResult:
        seen.append(kw)
        if dot:
            Path(extra[-1]).write_text(GRAPH)
        text = ok_text(1, 1, 1) if code == 0 else invariant_text("TypeOK")
        return TlcResult("MC_gen", cfg.name, [], 1.0, workdir / "tlc.log",
                         parse_output(text, code), text)
    return run


def test_dump_graph_reads_its_own_sources_and_trusts_only_a_clean_run_with_a_dump(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The graph is explored from the ``tla_dir`` given, and read only from a run that
    finished clean and wrote its dump: a violation that left a dump, or a clean run
    without one, is refused.
    (kills hisparse/conformance.py:94:bool:1, which explored the default sources instead
    of the ones given; conformance.py:101:bool:2, which read the dump of a failed run)"""
    mine = tmp_path / "tla"
    shutil.copytree(TLA, mine)
    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(conformance, "run_tlc", _fake_tlc(0, True, seen))
    g = conformance.dump_graph(install=NO_TLC, tla_dir=mine, workdir=tmp_path)
    assert len(g.states) == 18 and seen[-1]["tla_dir"] == mine
    for code, dot in ((12, True), (0, False)):
        monkeypatch.setattr(conformance, "run_tlc", _fake_tlc(code, dot, seen))
        with pytest.raises(ModelError, match="TLC could not explore MC_gen"):
            conformance.dump_graph(install=NO_TLC, tla_dir=mine, workdir=tmp_path)


def test_the_conformance_cli_refuses_an_unknown_flag_before_any_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``python -m hisparse.conformance`` takes no flag but ``--help``: another one is a
    usage error (exit 2), before TLC is asked for anything; run as a module, too.
    (kills hisparse/conformance.py:391:call:0, which never parsed the arguments;
    conformance.py:401:call:3, which never called main)"""
    def never() -> Any:
        raise AssertionError("TLC asked to explore for a bad command line")

    monkeypatch.setattr(conformance, "dump_graph", never)
    with pytest.raises(SystemExit) as e:
        conformance.main(["--nope"])
    assert e.value.code == 2 and "unrecognized arguments: --nope" in capsys.readouterr().err
    done = subprocess.run([sys.executable, "-m", "hisparse.conformance", "--nope"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done
    assert "unrecognized arguments: --nope" in done.stderr


def test_a_copy_outside_a_checkout_has_no_checkout_root(tmp_path: Path) -> None:
    """``checkout_root`` is the folder of ``pyproject.toml`` beside the package: the same
    module loaded from a tree without one (an install) has no checkout root.
    (kills hisparse/tlc/paths.py:29:bool:0, which took any tree for a checkout)"""
    copy = tmp_path / "site" / "hisparse" / "tlc" / "paths.py"
    copy.parent.mkdir(parents=True)
    shutil.copy2(Path(paths.__file__), copy)
    spec = importlib.util.spec_from_file_location("paths_copy", copy)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.repo_root() == tmp_path / "site"
    assert mod.checkout_root() is None
    (tmp_path / "site" / "pyproject.toml").write_text("")
    assert mod.checkout_root() == tmp_path / "site"


def test_progress_is_told_before_each_run_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``progress`` hears of each TLC run before it starts and of its verdict after.
    (kills hisparse/tlc/check.py:158:reorder:3, which announced a run once it was over)"""
    told: list[str] = []
    fake = FakeRuns([(ok_text(4, 2, 1), 0, 0.5), (ok_text(3, 2, 1), 0, 0.5)])

    def run(*args: Any, **kw: Any) -> TlcResult:
        told.append("run")
        return fake(*args, **kw)

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(check, "run_tlc", run)
    check.check_model("small", tla_dir=TLA, install=NO_TLC, progress=told.append)
    assert told == [
        "TLC MC_small/MC_small.cfg ...", "run",
        "TLC MC_small/MC_small.cfg: ok, 2 distinct states, 0.5 s",
        "TLC MC_small/MC_small_live.cfg ...", "run",
        "TLC MC_small/MC_small_live.cfg: ok, 2 distinct states, 0.5 s",
    ]


def test_a_temporal_violation_no_property_run_repeats_stays_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The live run violates TLC's anonymous temporal formula, and the follow-up run of
    each property alone names none: the report still names the temporal formula (it is
    dropped only when a property run named the culprit).
    (kills hisparse/tlc/check.py:266:var:7 and 266:cmp:11, which dropped it whenever the
    config had several properties, or named anything at all)"""
    ok = (ok_text(10, 10, 1), 0, 0.5)
    fake = FakeRuns([ok, (TEMPORAL_TEXT, 13, 0.5), ok, ok, ok, ok])
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(check, "run_tlc", fake)
    r = check.check_model("small", tla_dir=TLA, install=NO_TLC)
    assert len(fake.seen) == 6 and len(r.properties) == 4
    assert (r.result, r.violated) == ("violation", [TEMPORAL])


def test_a_jvm_that_cannot_start_lets_the_signals_through_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Starting the JVM fails (here: the OS refuses the process): the OSError reaches
    the caller, SIGINT and SIGTERM are deliverable again, and no child is left to kill.
    (kills hisparse/tlc/runner.py:166:call:10, which left them blocked, and 167:raise:0,
    which swallowed the error and went on without a process)"""
    install = fake_java(tmp_path, ok_text(1, 1, 1), 0)

    def refuse(*args: Any, **kw: Any) -> Any:
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(runner.subprocess, "Popen", refuse)
    before = _blocked()
    with pytest.raises(OSError, match="Resource temporarily unavailable"):
        _toy_run(tmp_path, install)
    assert _blocked() == before and not signals.LATCH._children


def test_runs_once_stopped_track_nothing_more() -> None:
    """``TlcRuns.add`` after ``stop`` refuses the process (the caller kills it) and does
    not track it: a refusal changes nothing.
    (kills hisparse/tlc/runner.py:70:reorder:0, which tracked it before refusing)"""
    runs = TlcRuns()
    runs.stop()
    proc = subprocess.Popen([sys.executable, "-c", "pass"], text=True)
    try:
        assert not runs.add(proc)
        assert proc not in runs._live
    finally:
        proc.wait(timeout=60)


def test_a_counterexample_spans_extra_blank_lines_and_ends_at_the_summary() -> None:
    """The first error trace's states are every state block up to TLC's summary: extra
    blank lines between blocks do not end it, and a state block printed after the
    summary (another trace) is not part of it.
    (kills hisparse/tlc/counterexample.py:30:loop:0, which ended the trace at a second
    blank line, and 29:not:1, which read past the summary)"""
    text = (
        "Error: Invariant Inv is violated.\n"
        "State 1: <Initial predicate>\n/\\ x = 0\n\n\n"
        "State 2: <Step line 3>\n/\\ x = 1\n\n"
        "4 states generated, 3 distinct states found.\n"
        "State 1: <Initial predicate>\n/\\ x = 9\n"
    )
    assert counterexample.states(text) == [
        "State 1: <Initial predicate>\n/\\ x = 0", "State 2: <Step line 3>\n/\\ x = 1"]


def test_a_stuttering_edge_first_in_its_state_still_lets_the_others_replay() -> None:
    """The replay takes every edge out of a state, whatever their order in the dump: a
    stuttering edge listed first (here: one more, on the initial state) is counted and
    the state's other edges still replay.
    (kills hisparse/conformance.py:345:loop:1, which stopped at the stuttering edge)"""
    g = conformance.parse_dot(GRAPH)
    (init,) = g.initial
    assert sum(1 for e in g.edges if e[0] == init) >= 1  # it has others to lose
    g.edges.insert(0, (init, init, conformance.STUTTER))
    r = conformance.replay_graph(g)
    assert (r.states, r.transitions, r.stutters, r.by_action) == (18, 20, 2, BY_ACTION)


def test_the_generic_search_tries_past_an_argument_python_refuses() -> None:
    """An action with no argument reader takes the first argument of its domain whose
    step lands on the target: one Python refuses is skipped, not the end of the search.
    Here Finish: r1 never arrived (Finish(r1) refused), r2 runs.
    (kills hisparse/conformance.py:296:loop:0, which gave up at the first refusal)"""
    m = conformance.new_machine()
    m.Arrive("r2", blocks=[0], hosts=[])
    target = copy.deepcopy(m)
    target.Finish("r2")
    v = conformance.canon_python(target)
    with pytest.raises(ActionNotEnabled):
        copy.deepcopy(m).Finish("r1")
    conformance._search(m, ACTIONS["Finish"], v)
    assert conformance.canon_python(m) == v


# --- an interrupt whose exception something swallowed ----------------------------------
# Python runs a signal's handler at whatever bytecode comes next; an exception raised
# where Python cannot raise is dropped. The latch records the signal (LATCH.signum) and
# kills the JVM whatever happens to the exception; these tests stand in for the swallow.


def _counting_popen(monkeypatch: pytest.MonkeyPatch, then: Any = None) -> list[object]:
    """``subprocess.Popen`` in the runner, counted; ``then`` runs once the process exists."""
    started: list[object] = []
    real = subprocess.Popen

    def popen(*args: Any, **kw: Any) -> Any:
        proc = real(*args, **kw)
        started.append(proc)
        if then is not None:
            then()
        return proc

    monkeypatch.setattr(runner.subprocess, "Popen", popen)
    return started


def _swallowed() -> None:
    signals.LATCH.signum = signal.SIGINT


@pytest.fixture
def latch_cleared() -> Iterator[None]:
    """The latch forgets any signal a test recorded in it."""
    try:
        yield
    finally:
        signals.LATCH.signum = None


def test_an_interrupt_already_recorded_starts_no_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, latch_cleared: None
) -> None:
    """A SIGINT recorded by the latch before the run, its exception swallowed: the run
    raises it before it starts any process (no launcher, no JVM).
    (kills hisparse/tlc/runner.py:153:call:3, which started the launcher first)"""
    install = fake_java(tmp_path, ok_text(1, 1, 1), 0)
    started = _counting_popen(monkeypatch)
    _swallowed()
    with pytest.raises(KeyboardInterrupt):
        _toy_run(tmp_path, install)
    assert started == [] and not (tmp_path / "rec.json").exists()


def test_an_interrupt_recorded_while_the_jvm_starts_stops_it_before_its_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, latch_cleared: None
) -> None:
    """A SIGINT recorded while the launcher starts (signals held), its exception
    swallowed: the launcher is killed before it is told to exec TLC; no JVM runs.
    (kills hisparse/tlc/runner.py:177:call:12, which gave the go and let TLC run)"""
    install = fake_java(tmp_path, ok_text(1, 1, 1), 0)
    started = _counting_popen(monkeypatch, then=_swallowed)
    with pytest.raises(KeyboardInterrupt):
        _toy_run(tmp_path, install)
    assert len(started) == 1 and not (tmp_path / "rec.json").exists()


def test_a_sigint_whose_handler_swallows_it_still_kills_the_jvm(
    tmp_path: Path, latch_cleared: None
) -> None:
    """TLC's JVM sends SIGINT to the run (as a Ctrl-C would arrive) and would go on for
    20 seconds; the handler in place before the run swallows the exception. The latch
    kills the JVM anyway: it never gets to its marker.
    (kills hisparse/tlc/runner.py:168:call:4, which never handed the JVM to the latch)"""
    marker = tmp_path / "ran-on"
    java = script(tmp_path / "java", (
        "import signal, time\n"
        "os.kill(os.getppid(), signal.SIGINT)\n"
        "time.sleep(20)\n"
        f"open({str(marker)!r}, 'w').close()\n"
    ))
    install = acquire.TlcInstall(jar=tmp_path / "t.jar", java=str(java), sha256="-")
    seen: list[int] = []
    old = signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
    try:
        res = _toy_run(tmp_path, install)
    finally:
        signal.signal(signal.SIGINT, old)
    assert not marker.exists() and res.output.exit_code == -signal.SIGKILL
    assert seen and set(seen) == {signal.SIGINT}
