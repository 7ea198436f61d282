"""CLI rules met by the whole mutation run's sixteenth pass
(docs/mutation-survivors.md): ``python -m hisparse.cli`` is the same program as
``python -m hisparse`` and the ``hisparse`` script, exit status included
(``cli.py:698:call:83`` dropped its ``sys.exit(main())``: it ran nothing, and exited 0)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

MOONCAKE = Path(__file__).parent / "data" / "mooncake_small.jsonl"


def _run(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True,
                          text=True, timeout=120, check=False)


@pytest.mark.parametrize("case", ["help", "refused"])
def test_the_cli_module_run_as_main_is_the_hisparse_program(case: str, tmp_path: Path) -> None:
    missing = tmp_path / "missing.jsonl"
    args = ["--help"] if case == "help" else ["check", "--trace", str(missing)]
    via_cli, via_package = _run("hisparse.cli", *args), _run("hisparse", *args)
    got = (via_cli.returncode, via_cli.stdout, via_cli.stderr)
    assert got == (via_package.returncode, via_package.stdout, via_package.stderr)
    if case == "help":
        assert via_cli.returncode == 0 and via_cli.stdout.startswith("usage: hisparse")
    else:
        assert via_cli.returncode == 2
        assert via_cli.stderr == (f"hisparse check: error: argument --trace: no such file: "
                                  f"{missing}\n")


@pytest.mark.parametrize("workload", ["synthetic", "mooncake"])
def test_each_workload_is_a_choice_of_simulate(workload: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    # both workloads can be named, the default too (workload.py:26:drop:0 left
    # "synthetic" out of the choices: only the flag's absence could still run it)
    from hisparse.cli import main

    args = ["simulate", "--workload", workload, "--requests", "3", "--steps", "10"]
    if workload == "mooncake":
        args += [str(MOONCAKE), "--max-decode", "2"]
    assert main(args) == 0
    assert capsys.readouterr().out.startswith(f"workload     {workload}")
