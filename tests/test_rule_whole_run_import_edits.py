"""Rules that survivors among the whole mutation run's edits at import (module constants,
run by their guards and then the whole non-TLC suite; docs/mutation-run7) showed no test
stated: each test names the mutants it kills."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from hisparse.bench.cli import _sharings
from hisparse.engine.config import EngineConfigError
from hisparse.engine.geometry import leaders
from hisparse.spec.native import COMPILED

ROOT = Path(__file__).resolve().parents[1]


def _carries_a_mypyc_hint(path: Path) -> bool:
    """Whether a module decorates a class with ``mypyc_attr`` (a hint only mypyc reads)."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for d in node.decorator_list:
                f = d.func if isinstance(d, ast.Call) else d
                if isinstance(f, ast.Name) and f.id == "mypyc_attr":
                    return True
    return False


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts if rel.parts[0] == "hisparse" else ("hisparse", *rel.parts)
    return ".".join(parts)


def test_every_module_that_carries_a_mypyc_hint_is_compiled() -> None:
    # a hint in a module the build leaves out is dead: its class stays a Python class and
    # the compiled build's figures no longer measure it (native.py:23:drop:0..4 each left
    # one hinted module out of COMPILED; only the compiled-build test reads the list, and
    # it checks three classes)
    hinted = {_module_name(p) for d in ("spec", "hisparse", "executor")
              for p in sorted((ROOT / d).rglob("*.py")) if _carries_a_mypyc_hint(p)}
    assert {"hisparse.spec.machine", "hisparse.coordinator"} <= hinted  # the scan sees them
    assert hinted <= set(COMPILED), hinted - set(COMPILED)


def test_every_compiled_module_imports() -> None:
    for name in COMPILED:
        assert importlib.import_module(name).__name__ == name


@pytest.mark.parametrize("sharing", ["v3.2", "glm-5.2"])
def test_the_bench_flag_takes_each_sharing_the_geometry_knows(sharing: str) -> None:
    # geometry.py:26:drop:0..1 left one sharing out of SHARING: leaders() still knew it,
    # the bench's --sharing refused it
    assert len(leaders(8, sharing)) == 8
    assert _sharings(sharing) == (sharing,)
    assert _sharings("v3.2,glm-5.2") == ("v3.2", "glm-5.2")


def test_the_geometry_refusal_names_each_sharing() -> None:
    with pytest.raises(EngineConfigError, match=r"one of v3\.2, glm-5\.2, got 'x'"):
        leaders(8, "x")
