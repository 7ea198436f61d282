"""The mypyc build of the scheduler core (tools/build_compiled.py) is tested, not only
benchmarked: the churn rate of issue 9 is its figure, so CI runs the suite against it.

Built once per module into a temporary directory, away from the checkout. Then, in a
subprocess with the build first on the path: its hot classes are native (no instance
``__dict__``, so the tests' old instance patches would fail there), the whole suite except
TLC and this file passes against it, and a churn run drains to empty. Needs a C compiler
and the Python headers (``.ci/run`` and ``bootstrap.sh`` install them); without them the
tests fail, naming what is missing (as TLC's do: a missing tool is never a skip).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from hisparse.engine.workload import MOONCAKE_TRACE
from hisparse.spec.native import COMPILED

ROOT = Path(__file__).resolve().parents[1]


def missing_toolchain() -> str | None:
    """What the build lacks here (None: a C compiler and Python.h are present)."""
    cc = sysconfig.get_config_var("CC") or "cc"
    if shutil.which(str(cc).split()[0]) is None:
        return f"no C compiler ({cc!r} not on PATH)"
    include = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if not include.is_file():
        return f"no Python headers ({include} missing: python3-dev)"
    return None


def run(cmd: list[str], cwd: Path, timeout: int = 1200) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(cwd), "HISPARSE_MOONCAKE": str(MOONCAKE_TRACE)}
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                          check=False, timeout=timeout)


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    why = missing_toolchain()
    if why is not None:
        pytest.fail(f"the mypyc build needs a C compiler and the Python headers: {why} "
                    "(./bootstrap.sh installs gcc and python3-dev)", pytrace=False)
    out = tmp_path_factory.mktemp("compiled")
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "build_compiled.py"), "--out", str(out)],
        capture_output=True, text=True, check=False, timeout=900,
    )
    assert done.returncode == 0, f"build failed\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return out


def test_the_hot_classes_are_native_in_the_build(build: Path) -> None:
    probe = (
        "import importlib, json\n"
        f"mods = [importlib.import_module(n) for n in {COMPILED!r}]\n"
        "from hisparse.spec.machine import ProtocolMachine, machine_class\n"
        "from hisparse.coordinator import HiSparseCoordinator\n"
        "from hisparse.spec.state import ProtocolState\n"
        "print(json.dumps({'files': [m.__file__ for m in mods],\n"
        "  'dict': [hasattr(c, '__dictoffset__') and c.__dictoffset__ != 0\n"
        "           for c in (ProtocolMachine, HiSparseCoordinator, ProtocolState)],\n"
        "  'variant_base': machine_class('retire_inflight').__bases__[0] is ProtocolMachine}))\n"
    )
    done = run([sys.executable, "-c", probe], build)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert all(not f.endswith(".py") for f in seen["files"]), seen["files"]
    assert seen["dict"] == [False, False, False]  # native: no instance dictionary
    assert seen["variant_base"]


def test_the_suite_passes_against_the_build(build: Path) -> None:
    """Every test but TLC's (the pure build runs those) and this file's, on the build."""
    done = run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not tlc",
         "--ignore", "tests/test_compiled_build.py",
         # the mutation tool's tests test tools/, which the build does not copy
         "--ignore", "tests/test_mutation_tool.py", "--ignore", "tests/test_mutation_targets.py",
         "tests"],
        build,
    )
    tail = (done.stdout + done.stderr)[-6000:]
    assert done.returncode == 0, tail
    assert " passed" in tail and " failed" not in tail, tail


def test_churn_drains_on_the_build(build: Path) -> None:
    out = build / "churn.json"
    done = run(
        [sys.executable, "-m", "hisparse", "bench", "churn", "--requests", "3000",
         "--host-blocks", "256", "--json", str(out)],
        build,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    doc = json.loads(out.read_text())
    assert doc["build"].startswith("mypyc: hisparse.spec.machine"), doc["build"]
    assert doc["left_after_drain"] == []
    assert doc["retired"] == 3000 and doc["by_acks"]["split"]["retired"] == 3000
