"""The CLI fails first and says what it does: bad numbers and paths exit 2 with one line
before any work, every flag has help and shows its default, exit codes are in --help,
each bench target takes only its own flags, and an interrupt leaves no temp folder."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hisparse.cli import build_parser, main


def parsers(p: argparse.ArgumentParser, name: str = "hisparse") -> list[tuple[str, argparse.ArgumentParser]]:
    out = [(name, p)]
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            for sub, sp in a.choices.items():
                out += parsers(sp, f"{name} {sub}")
    return out


def test_every_flag_has_help_and_shows_its_default() -> None:
    for name, p in parsers(build_parser()):
        text = p.format_help()
        assert "exit status:" in text and "2  error" in text, name
        for a in p._actions:
            if isinstance(a, argparse._HelpAction | argparse._VersionAction):
                continue
            assert a.help, f"{name}: {a.dest} has no help"
            if a.option_strings and a.default not in (None, False):
                shown = p._get_formatter()._get_help_string(a) or ""
                assert "(default: " in shown, f"{name}: {a.option_strings[-1]} hides its default"
                assert shown.split("(default: ")[0].strip() in " ".join(text.split()), name


BAD = [
    ["simulate", "--requests", "-5"],
    ["simulate", "--speculative", "-1"],
    ["simulate", "--steps", "0"],
    ["simulate", "--seed", "x"],
    ["simulate", "--abort-rate", "1.5"],
    ["simulate", "--host-gib", "0"],
    ["simulate", "--arrival-rate", "nan"],
    ["simulate", "--metrics-port", "70000"],
    ["simulate", "--json", "/no/such/folder/run.json"],
    ["bench", "protocol", "--lifecycles", "0"],
    ["bench", "coordinator", "--requests", "-1"],
    ["bench", "resolver", "--batches", "1,,4"],
    ["bench", "protocol", "--reps", "3"],  # a resolver flag: not silently ignored
    ["check", "--workers", "0"],
    ["check", "--trace", "/no/such/trace.jsonl"],
    ["report", "/no/such/run.json"],
]


@pytest.mark.parametrize("argv", BAD, ids=[" ".join(a) for a in BAD])
def test_bad_arguments_exit_2_with_one_line(argv: list[str],
                                            capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "error:" in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["simulate", "--row-bytes", "20"], "not a multiple of 16"),
        (["simulate", "--workload", "mooncake", "--block-tokens", "96", "TRACE"], "does not divide"),
        (["simulate", "TRACE"], "only for --workload mooncake"),
        (["simulate", "--workload", "mooncake", "BADTRACE"], "BADTRACE.jsonl:1: not JSON"),
    ],
)
def test_refused_before_the_run(argv: list[str], message: str, tmp_path: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    trace = Path(__file__).parent / "data" / "mooncake_small.jsonl"
    bad = tmp_path / "BADTRACE.jsonl"
    bad.write_text("nope\n")
    out = tmp_path / "run.json"
    argv = [str(trace) if a == "TRACE" else str(bad) if a == "BADTRACE" else a for a in argv]
    assert main([*argv, "--no-progress", "--json", str(out)]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and len(captured.err.strip().splitlines()) == 1
    assert captured.out == "" and not out.exists()  # no work started, nothing written


def test_output_folder_is_refused_before_the_run(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--trace", str(tmp_path)])
    assert exc.value.code == 2 and "is a folder" in capsys.readouterr().err


def test_help_names_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "0  ok" in out and "1  violation" in out and "2  error" in out
    assert "Each subcommand" not in out  # the user's description, not the module docstring


def test_bench_targets_are_subcommands() -> None:
    p = build_parser()
    (bench,) = [sp for n, sp in parsers(p) if n == "hisparse bench"]
    assert {n.split()[-1] for n, _ in parsers(bench, "bench")} >= {
        "protocol", "coordinator", "resolver", "spill"}


@pytest.mark.tlc
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupted_check_removes_its_temp_folders(tmp_path: Path, sig: int) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    proc = subprocess.Popen([sys.executable, "-m", "hisparse", "check", "--model", "ci",
                             "--workers", "1"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not list(tmp.rglob("tlc.log")):  # TLC has started in its scratch folder
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    time.sleep(1.0)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, (proc.returncode, err, out)
    assert list(tmp.iterdir()) == [], f"left behind: {list(tmp.rglob('*'))[:5]}"


def test_help_names_no_default_for_a_flag_that_is_off() -> None:
    # a store_true flag's False is not a default worth printing (cli.py:79:drop:1)
    from hisparse.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert isinstance(sub.choices, dict)
    text = sub.choices["simulate"].format_help()
    assert "--no-progress" in text and "(default: False)" not in text
    assert "(default: " in text  # flags with a value still show theirs
