"""Rules of the command line that survivors of the whole mutation run showed
(docs/mutation-run7): SIGTERM unwinds a command run in the main thread (and ``main`` in
another thread leaves signals alone), each command's help line and description, the
``simulate`` flags listed under "run and output", and ``bench engine-kernels --reps``."""

from __future__ import annotations

import argparse
import re
import signal
import tempfile
import threading
from pathlib import Path
from types import FrameType

import pytest

import hisparse.cli as cli
from tests.test_rule_cli_survivors import _sections


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


# -- SIGTERM ------------------------------------------------------------------------------


def test_sigterm_during_a_command_unwinds_it_with_exit_143_and_removes_its_scratch_folder(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # main, in the main thread, makes SIGTERM unwind like Ctrl-C: SystemExit(143) out of
    # the running command, its scratch folder removed whole. (kills cli.py:680:call:108,
    # which installed no handler, and cli.py:679:cmp:10, which installed it only outside
    # the main thread)
    assert threading.current_thread() is threading.main_thread()
    fallback: list[int] = []  # a mutant's SIGTERM lands here instead of killing pytest

    def record(signum: int, frame: FrameType | None) -> None:
        fallback.append(signum)

    scratch: list[Path] = []

    def handler(args: argparse.Namespace) -> int:
        root = Path(tempfile.gettempdir())  # the run's scratch folder
        (root / "tlc.log").write_text("running")
        scratch.append(root)
        signal.raise_signal(signal.SIGTERM)
        return cli.EXIT_OK

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setitem(cli.COMMANDS, "docs", (cli.COMMANDS["docs"][0], handler))
    before = signal.signal(signal.SIGTERM, record)
    mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # deliverable here
    try:
        with pytest.raises(SystemExit) as exc:
            cli.main(["docs", "--check"])
        installed = signal.getsignal(signal.SIGTERM)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        signal.signal(signal.SIGTERM, before)
    assert exc.value.code == 128 + signal.SIGTERM == 143
    assert fallback == []
    assert installed is cli._terminate
    [root] = scratch
    assert root.parent == tmp_path and root.name.startswith("hisparse-")
    assert not root.exists()
    assert list(tmp_path.iterdir()) == []


def test_main_outside_the_main_thread_runs_the_command_and_leaves_sigterm_alone(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # signal handlers belong to the main thread: main called from another thread runs the
    # command and leaves SIGTERM's handler as it found it (kills cli.py:679:cmp:10, which
    # called signal.signal there: ValueError, no command run)
    bad = tmp_path / "run.json"
    bad.write_text("not json")
    results: list[int] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(cli.main(["report", str(bad)]))
        except BaseException as exc:  # reported below
            errors.append(exc)

    before = signal.getsignal(signal.SIGTERM)
    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert errors == []
    assert results == [cli.EXIT_ERROR]
    assert signal.getsignal(signal.SIGTERM) is before
    err = capsys.readouterr().err
    assert err == f"hisparse: error: {bad} is not JSON (Expecting value)\n"


# -- help lines and descriptions ------------------------------------------------------------


def test_hisparse_help_lists_each_command_with_its_one_line_help(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # (kills cli.py:97:var:1, which listed each command with its own name as its help)
    monkeypatch.setenv("COLUMNS", "200")
    text = cli.build_parser().format_help()
    expected = {
        "docs": "regenerate docs/ files derived from the code (in a checkout)",
        "report": "print (and plot) a saved hisparse simulate --json run",
        "bench": "run a benchmark and print its figures",
        "simulate": "run a decode workload through the whole system",
        "setup": "fetch and verify the pinned TLC jar (Maven)",
    }
    for name, line in expected.items():
        assert re.search(rf"^    {name} +{re.escape(line)}$", text, re.MULTILINE), (name, text)
    bench = _subparsers(cli.build_parser())["bench"].format_help()
    assert re.search(r"^    churn +request lifecycles through the connector: cost by decile, RSS$",
                     bench, re.MULTILINE), bench


def test_a_command_without_a_longer_description_opens_its_help_with_its_help_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # `hisparse docs --help` says what docs does, not "docs" (kills cli.py:97:var:2, which
    # made the command's name its description)
    monkeypatch.setenv("COLUMNS", "200")
    commands = _subparsers(cli.build_parser())
    for name, line in [("docs", "regenerate docs/ files derived from the code (in a checkout)"),
                       ("report", "print (and plot) a saved hisparse simulate --json run"),
                       ("bench", "run a benchmark and print its figures")]:
        parser = commands[name]
        assert parser.description == line
        paragraphs = parser.format_help().split("\n\n")
        assert paragraphs[1] == line, (name, paragraphs[:3])
    kernels = _subparsers(commands["bench"])["engine-kernels"]
    assert kernels.description == ("the step's attention and indexer-scan kernels, A/B "
                                   "(NVIDIA GPU)")


# -- simulate's "run and output" ----------------------------------------------------------


def test_simulate_help_lists_the_output_and_checking_flags_under_run_and_output() -> None:
    # how the run is executed and what it writes are one section, "run and output", and
    # only there (kills cli.py:422:var:32, 424:var:33, 426:var:34, 428:var:35, 430:var:36,
    # 432:var:37, which listed --no-check, --json, --plot, --trace, --metrics-port and
    # --no-progress under "workload")
    sections = _sections(_subparsers(cli.build_parser())["simulate"].format_help())
    run_and_output = {"--executor", "--worker-processes", "--tp", "--backing", "--no-check",
                      "--json", "--plot", "--trace", "--metrics-port", "--no-progress"}
    assert sections["run and output"] == run_and_output
    for title, flags in sections.items():
        if title != "run and output":
            assert not flags & run_and_output, (title, flags & run_and_output)


# -- bench engine-kernels --reps ----------------------------------------------------------


def test_bench_engine_kernels_takes_reps_timed_calls_per_variant_20_by_default(
        capsys: pytest.CaptureFixture[str]) -> None:
    # (kills bench/cli.py:288:call:33, which dropped --reps: an unknown flag, and no
    # args.reps for the run)
    parser = cli.build_parser()
    assert parser.parse_args(["bench", "engine-kernels"]).reps == 20
    assert parser.parse_args(["bench", "engine-kernels", "--reps", "3"]).reps == 3
    help_text = _subparsers(_subparsers(parser)["bench"])["engine-kernels"].format_help()
    assert re.search(r"--reps REPS\s+timed calls per variant \(default: 20\)", help_text), \
        help_text
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(["bench", "engine-kernels", "--reps", "0"])
    assert exc.value.code == cli.EXIT_ERROR
    err = capsys.readouterr().err
    assert err.startswith("hisparse bench engine-kernels: error: argument --reps: ")
    assert err.count("\n") == 1
