"""The suite's markers say what a test needs: one taking the ``tlc`` fixture is a ``tlc`` test.

A host without Java (a lent GPU machine running the mutation tool's whole-suite phase
with ``-m "not tlc and not gpu"``) must not start a test that fails there only because
Java is missing: such a failure once counted as 23 mutants' kills.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FILE = "tests/test_rule_uncovered_cliengine.py"
TAKES_TLC = f"{FILE}::test_setup_names_the_artifact_jar_version_and_verified_digest"
NO_TLC = f"{FILE}::test_check_says_each_tlc_run_it_starts_on_stderr_indented"


def _collected(marks: str) -> set[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "-m", marks, FILE],
        cwd=ROOT, capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode in (0, 5), proc.stdout + proc.stderr
    return {line for line in proc.stdout.splitlines() if "::" in line}


def test_a_test_taking_the_tlc_fixture_is_left_out_by_not_tlc() -> None:
    assert TAKES_TLC not in _collected("not tlc and not gpu")
    assert NO_TLC in _collected("not tlc and not gpu")


def test_a_test_taking_the_tlc_fixture_is_selected_by_tlc() -> None:
    selected = _collected("tlc")
    assert TAKES_TLC in selected
    assert NO_TLC not in selected
