"""Rule: every CLI argument type (``hisparse/cliargs.py``) accepts exactly its range: the
bounds themselves are in, one step past them is a typed ``ArgumentTypeError`` that says
what to change, and no infinity (either sign) or NaN passes a number check.

The CLI tests try a few bad values each; an off-by-one bound (mutant ``cmp``: ``n < 1``
-> ``n <= 1`` refused 1) or one infinity dropped from the forbidden values (mutant
``drop``: ``inf`` accepted as a positive float) passed them.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from hisparse import cliargs

# (argument type, values it accepts with their result, values it refuses, words of the refusal)
BOUNDS: dict[str, tuple[Callable[[str], Any], dict[str, Any], list[str], str]] = {
    "positive_int": (cliargs.positive_int, {"1": 1, "7": 7},
                     ["0", "-1", "1.5", "x", ""], "must be a positive integer"),
    "nonneg_int": (cliargs.nonneg_int, {"0": 0, "1": 1},
                   ["-1", "0.5", "x"], "must be an integer >= 0"),
    "port": (cliargs.port, {"0": 0, "65535": 65535, "8080": 8080},
             ["-1", "65536", "x"], "must be a port number"),
    "positive_float": (cliargs.positive_float, {"5e-324": 5e-324, "2.5": 2.5, "1e308": 1e308},
                       ["0", "-0.0", "-1", "inf", "-inf", "nan", "Infinity", "1e999", "x"],
                       "must be a number > 0"),
    "probability": (cliargs.probability, {"0": 0.0, "1": 1.0, "0.5": 0.5},
                    ["-1e-9", "1.0000001", "inf", "-inf", "nan", "x"],
                    "must be a number between 0 and 1"),
    "fault_rate": (cliargs.fault_rate, {"0": 0.0, repr(1 / 3): 1 / 3},
                   ["-1e-9", "0.33333333333333337", "0.5", "inf", "-inf", "nan", "x"],
                   "must be a number between 0 and 1/3"),
    "workers": (cliargs.workers, {"auto": "auto", "1": 1, "4": 4},
                ["0", "-1", "Auto", "x"], "must be a positive integer"),
}


@pytest.mark.parametrize("name", sorted(BOUNDS))
def test_each_type_accepts_its_bounds_and_refuses_one_past(name: str) -> None:
    parse, good, bad, words = BOUNDS[name]
    for text, value in good.items():
        assert parse(text) == value, (name, text)
    for text in bad:
        with pytest.raises(argparse.ArgumentTypeError, match=words):
            parse(text)


@pytest.mark.parametrize("text", ["inf", "-inf", "+inf", "nan", "-nan", "infinity", "-Infinity",
                                  "1e999", "-1e999"])
def test_no_float_type_takes_an_infinity_or_nan(text: str) -> None:
    for parse in (cliargs.positive_float, cliargs.probability, cliargs.fault_rate,
                  cliargs.csv_of(cliargs.positive_float)):
        with pytest.raises(argparse.ArgumentTypeError, match=re.escape(f"got {text!r}")):
            parse(text)


def test_a_list_is_non_empty_items_each_checked() -> None:
    parse = cliargs.csv_of(cliargs.probability)
    assert parse("0, 1 ,0.25") == (0.0, 1.0, 0.25)
    assert parse("1") == (1.0,)
    for text in ("", ",", "0,,1", "0,"):
        with pytest.raises(argparse.ArgumentTypeError, match="comma-separated list"):
            parse(text)
    with pytest.raises(argparse.ArgumentTypeError, match="between 0 and 1"):
        parse("0.5,2")


def test_paths(tmp_path: Path) -> None:
    f = tmp_path / "in.txt"
    f.write_text("x")
    assert cliargs.in_file(str(f)) == f
    assert cliargs.out_path(str(tmp_path / "new.json")) == tmp_path / "new.json"
    assert cliargs.out_path(str(f)) == f  # an existing, writable file may be replaced
    cases: list[tuple[Callable[[str], Path], str, str]] = [
        (cliargs.in_file, str(tmp_path / "none.txt"), "no such file"),
        (cliargs.in_file, str(tmp_path), "no such file"),
        (cliargs.out_path, str(tmp_path), "is a folder, not a file"),
        (cliargs.out_path, str(tmp_path / "no" / "x.json"), "does not exist"),
    ]
    for parse, text, words in cases:
        with pytest.raises(argparse.ArgumentTypeError, match=words):
            parse(text)



@pytest.mark.parametrize("unwritable", ["folder", "file"])
def test_an_unwritable_folder_or_file_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unwritable: str
) -> None:
    """Either one unwritable refuses the path (``os.access`` answers for the test: the
    suite may run as root, for whom every file is writable)."""
    existing = tmp_path / "old.json"
    existing.write_text("{}")
    denied = tmp_path if unwritable == "folder" else existing
    real = os.access

    def access(path: str | os.PathLike[str], mode: int) -> bool:
        return False if Path(path) == denied and mode == os.W_OK else real(path, mode)

    monkeypatch.setattr(cliargs.os, "access", access)
    new = tmp_path / "new.json"
    with pytest.raises(argparse.ArgumentTypeError, match="is not writable"):
        cliargs.out_path(str(new if unwritable == "folder" else existing))
    if unwritable == "file":  # a new file beside it: the folder is writable
        assert cliargs.out_path(str(new)) == new


def test_an_input_file_that_cannot_be_read_is_refused(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # root reads any file, so unreadability is stood in for (cliargs.py:108:raise:11)
    f = tmp_path / "t.jsonl"
    f.write_text("{}\n")
    assert cliargs.in_file(str(f)) == f
    monkeypatch.setattr(cliargs, "os", SimpleNamespace(access=lambda path, mode: False,
                                                       R_OK=os.R_OK))
    with pytest.raises(argparse.ArgumentTypeError, match=rf"^{f} is not readable$"):
        cliargs.in_file(str(f))


def test_a_host_budget_of_no_whole_block_is_refused_in_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    # (cli.py:466:raise:4: no test gave a host budget below one block)
    from hisparse.cli import main

    assert main(["simulate", "--host-gib", "0.0000001", "--requests", "2", "--steps", "5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--host-gib 1e-07 holds no whole" in err
    assert err.rstrip().endswith("-byte host block")


def test_a_host_budget_of_exactly_one_block_is_taken() -> None:
    # the bound is one whole block, not two (cli.py:465:cmp:19)
    from hisparse.cli import _simulate_options, build_parser
    from hisparse.config import GIB

    args = build_parser().parse_args(["simulate", "--block-tokens", "1", "--row-bytes", "16",
                                      "--layers", "1", "--requests", "2"])
    for blocks in (1, 2):
        args.host_gib = blocks * 16 / GIB
        assert _simulate_options(args).host_blocks == blocks
