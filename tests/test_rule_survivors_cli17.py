"""CLI rules met by the whole mutation run's seventeenth pass (docs/mutation-survivors.md):
each executor ``hisparse simulate --executor`` documents is one the parser accepts
(``executors.py:13:drop:N`` left one out of the choices: only ``make_executor`` callers,
never the command line, could still pick it)."""

from __future__ import annotations

import pytest

from hisparse.cli import main


@pytest.mark.parametrize("executor", ["reference", "accounting"])
def test_each_cpu_executor_is_a_choice_of_simulate(executor: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    # kills executors.py:13:drop:0 and 13:drop:2
    assert main(["simulate", "--executor", executor, "--requests", "3", "--steps", "10"]) == 0
    sizes = capsys.readouterr().out.splitlines()[1]
    assert sizes.startswith("sizes ") and sizes.endswith(f", executor {executor}")


def test_the_cuda_executor_is_a_choice_of_simulate(capsys: pytest.CaptureFixture[str]) -> None:
    # kills executors.py:13:drop:1: without a usable GPU the refusal is the executor's
    # own (CuPy or CUDA missing), not the parser's "invalid choice"
    rc = main(["simulate", "--executor", "cuda", "--requests", "3", "--steps", "10"])
    out, err = capsys.readouterr()
    if rc == 0:
        assert out.splitlines()[1].endswith(", executor cuda")
    else:
        assert rc == 2 and "invalid choice" not in err
        assert err.startswith("hisparse: error: ") and "CUDA" in err
