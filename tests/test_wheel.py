"""A wheel built from the sources works on its own: installed (not editable) in a fresh
venv, away from the checkout, ``hisparse check`` and ``check --trace`` find the TLA+
models it ships, and ``hisparse docs`` refuses to write into site-packages.

Marker ``tlc``: it runs TLC. Dependencies are not downloaded again: the fresh venv sees
this environment's site-packages through a ``.pth`` line (which does not activate the
editable install's import hook), so ``hisparse`` itself can only come from the wheel.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "hisparse", "spec", "executor", "tla")


def run(*cmd: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True,
                          text=True, check=False, timeout=900)
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


def build_wheel(tmp: Path) -> Path:
    """Build from a copy of the sources, so the checkout gets no build/ or egg-info."""
    src = tmp / "src"
    src.mkdir()
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(path, src / name)
    out = tmp / "wheels"
    run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", out, src, cwd=tmp)
    (wheel,) = out.glob("hisparse-*.whl")
    return wheel


@pytest.mark.tlc
def test_wheel_checks_models_and_traces_in_a_fresh_venv(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {f"hisparse/tla/{p.name}" for p in (ROOT / "tla").glob("*.tla")}
    shipped |= {f"hisparse/tla/{p.name}" for p in (ROOT / "tla").glob("*.cfg")}
    assert shipped <= names, f"models missing from the wheel: {sorted(shipped - names)}"
    assert "hisparse/connectors/multi.py" in names  # every sub-package ships
    assert any(n.endswith("/licenses/LICENSE") or n.endswith("/LICENSE") for n in names)

    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv, cwd=tmp_path)
    py = venv / "bin" / "python"
    site = run(py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
               cwd=tmp_path).strip()
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(site) / "outer_deps.pth").write_text("\n".join(sorted(deps)) + "\n")
    run(py, "-m", "pip", "install", "-q", "--no-deps", "--no-index", wheel, cwd=tmp_path)

    env = {k: v for k, v in os.environ.items() if k not in ("HISPARSE_TLA_DIR", "PYTHONPATH")}
    where = run(py, "-c", "import hisparse; print(hisparse.__file__)", cwd=tmp_path, env=env)
    assert where.strip().startswith(site), f"hisparse not imported from the wheel: {where}"

    cli = venv / "bin" / "hisparse"
    out = run(cli, "check", "--model", "small", "--workers", "1", cwd=tmp_path, env=env)
    assert "result      OK" in out, out
    trace = tmp_path / "sim.jsonl"
    run(cli, "simulate", "--requests", "12", "--steps", "120", "--no-progress",
        "--trace", trace, cwd=tmp_path, env=env)
    out = run(cli, "check", "--trace", trace, cwd=tmp_path, env=env)
    assert out.splitlines()[0] == "accepted", out

    proc = subprocess.run([str(cli), "docs"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 2 and "source checkout" in proc.stderr, proc.stderr
    assert not (Path(site) / "docs").exists()
