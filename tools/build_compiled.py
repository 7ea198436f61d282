"""Build the mypyc-compiled scheduler core into a directory of its own.

Pure Python is the default install; this build is for an engine that wants the
scheduler-side calls faster (``hisparse bench churn``: README), and the test suite runs
against it too (tests/test_compiled_build.py). It copies the package in its installed
layout (``spec/`` as ``hisparse/spec``, as pyproject.toml maps it) into ``--out`` and
compiles the hot modules there with mypyc (ships with mypy, a dev dependency; needs a C
compiler and the Python headers). The checkout is not touched. Use it by putting the
directory first on the path:

    python tools/build_compiled.py --out build/compiled
    PYTHONPATH=build/compiled hisparse bench churn --requests 100000
    cd build/compiled && python -m pytest -q -p no:cacheprovider -m "not tlc" tests/...

(A path entry is searched before the editable install's import hook. The tests, the
pytest configuration and the models are copied alongside, because pytest puts the
test tree's root first on the path: run from the checkout, they would import the
sources.) ProtocolMachine, ProtocolState and HiSparseCoordinator compile to native classes
(spec/native.py says what that asks of code that uses them).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from hisparse.spec.native import COMPILED

ROOT = Path(__file__).resolve().parents[1]
# installed package -> directory in the checkout (pyproject.toml's package-dir)
LAYOUT = {"hisparse": "hisparse", "hisparse/spec": "spec", "hisparse/executor": "executor",
          "hisparse/tla": "tla"}
# copied as they are, to run the test suite against the build
ALONGSIDE = ("tests", "tla", "docs", "pyproject.toml")


def copy_tree(out: Path) -> None:
    """The package as it installs, without caches or earlier builds."""
    if out.exists():
        shutil.rmtree(out)
    skip = shutil.ignore_patterns("__pycache__", "*.so", "*.pyc")
    for dst, src in LAYOUT.items():
        shutil.copytree(ROOT / src, out / dst, ignore=skip)


def copy_alongside(out: Path) -> None:
    """The tests and their configuration (after compiling: mypyc's own setuptools run
    and type check would read pyproject.toml)."""
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ALONGSIDE:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, out / name, ignore=skip)
        else:
            shutil.copy2(ROOT / name, out / name)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="directory to build into")
    a = p.parse_args()
    out = a.out.resolve()
    copy_tree(out)
    # mypyc type-checks the hot modules (and what they import) and compiles them in place
    hot = [name.replace(".", "/") + ".py" for name in COMPILED]  # (installed layout)
    cmd = [sys.executable, "-m", "mypyc", *hot]
    done = subprocess.run(cmd, cwd=out, check=False)
    if done.returncode:
        return done.returncode
    shutil.rmtree(out / "build", ignore_errors=True)
    copy_alongside(out)
    built = sorted(str(x.relative_to(out)) for x in out.rglob("*.so"))
    print("compiled:", *built, sep="\n  ")
    print(f"use: PYTHONPATH={out} hisparse ...")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
