"""What the CLI says besides its figures, and what it leaves behind: ``--version``, the help
sections a flag is listed under, the run's time and the bench's start on stderr, the metrics
endpoint stopped when the run ends, and a reader that left (``| head``) ending the run quietly."""

from __future__ import annotations

import argparse
import os
import re
import socket
import sys
from dataclasses import replace
from typing import Any

import pytest

import hisparse
from hisparse.cli import BENCH_TARGETS, build_parser, main


def _sections(text: str) -> dict[str, set[str]]:
    """The help's sections (``title:`` at column 0) and the flags each one lists."""
    out: dict[str, set[str]] = {}
    title = ""
    for line in text.splitlines():
        if line and not line[0].isspace() and line.endswith(":"):
            title = line[:-1]
            out[title] = set()
        elif title and line.startswith("  -"):
            out[title] |= {f.split()[0] for f in line.split(", ") if f.lstrip().startswith("-")}
    return out


def _simulate_help() -> str:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return str(sub.choices["simulate"].format_help())


def test_simulate_help_lists_the_pd_import_flags_and_the_sizes_under_their_own_headings() -> None:
    # (cli.py:400:var:25 and 406:var:27 listed --pd-share and --staging-slots under
    # "workload"; 388:var:21 listed --speculative there instead of under "sizes")
    sections = _sections(_simulate_help())
    # the three flags `--model` refuses together ("drop --pd-share, --transport and
    # --staging-slots") are the P/D import section, and only they
    assert sections["P/D import"] == {"--pd-share", "--transport", "--staging-slots"}
    # every setting of the pool and model geometry that the run's `sizes` line reports
    assert sections["sizes"] == {"--gpu-blocks", "--host-blocks", "--host-gib", "--block-tokens",
                                 "--row-bytes", "--top-k", "--layers", "--max-running",
                                 "--speculative"}
    assert not sections["workload"] & (sections["P/D import"] | sections["sizes"])
    # (and cli.py:378:var:16, 391:var:22, 409:var:28, once argued equivalent as parsing
    # the same: --block-tokens, --indexer-offload and --executor listed under "workload")
    assert sections["indexer offload"] == {"--indexer-offload", "--indexer-gpu-blocks",
                                           "--offload-blocks"}
    assert {"--executor", "--backing", "--tp", "--worker-processes"} <= \
        sections["run and output"]


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    # (cli.py:643:call:82 dropped --version: an unknown flag, exit 2)
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out == f"hisparse {hisparse.__version__}\n"


def test_simulate_says_how_long_the_run_took_on_stderr(
        capsys: pytest.CaptureFixture[str]) -> None:
    # stdout holds the report alone; the run's wall time is one line on stderr
    # (cli.py:541:call:76 dropped it)
    assert main(["simulate", "--requests", "2", "--steps", "10", "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert re.fullmatch(r"ran in \d+\.\d s\n", captured.err), captured.err
    assert "ran in" not in captured.out


def test_simulate_stops_serving_metrics_when_the_run_ends(
        capsys: pytest.CaptureFixture[str]) -> None:
    # the endpoint lives as long as the run: afterwards its port refuses connections
    # (cli.py:540:call:118 left the server running in its thread after main returned)
    assert main(["simulate", "--requests", "2", "--steps", "10", "--no-progress",
                 "--metrics-port", "0"]) == 0
    err = capsys.readouterr().err
    found = re.search(r"^metrics: http://127\.0\.0\.1:(\d+)/metrics$", err, re.M)
    assert found, err
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", int(found[1])), timeout=10).close()


def test_bench_says_which_bench_runs_before_it_runs(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    # a bench can run for minutes: before it starts, one line on stderr says which one is
    # running (cli.py:615:call:80 dropped it)
    said: list[str] = []

    def bench(args: argparse.Namespace) -> dict[str, Any]:
        said.append(capsys.readouterr().err)  # what the user had read when it started
        print("figures")
        return {}

    target = BENCH_TARGETS["protocol"]
    monkeypatch.setitem(BENCH_TARGETS, "protocol", replace(target, main=bench))
    assert main(["bench", "protocol"]) == 0
    assert said == ["bench protocol: running ...\n"]
    assert capsys.readouterr() == ("figures\n", "")


def test_a_reader_that_left_ends_the_run_quietly(monkeypatch: pytest.MonkeyPatch) -> None:
    # `hisparse simulate | head`: the reader closed the pipe. main returns 0, and stdout then
    # leads nowhere, so the interpreter's last flush of stdout at exit cannot fail again
    # ("Exception ignored ... BrokenPipeError", exit 120) (cli.py:692:call:124 left stdout
    # on the broken pipe)
    read, write = os.pipe()
    os.close(read)  # the reader has left before the first line
    out = os.fdopen(write, "w", buffering=1)  # line-buffered, as to a terminal
    try:
        monkeypatch.setattr(sys, "stdout", out)
        assert main(["simulate", "--requests", "1", "--steps", "1", "--no-progress"]) == 0
        out.write("what exit flushes\n")  # the line the header left unwritten, and this one
        out.flush()
    finally:
        monkeypatch.undo()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, write)  # the mutant's pipe too: closing must not raise again
        os.close(devnull)
        out.close()
