"""Where the TLA+ sources and the TLC cache live.

``tla/`` sits at the repository root and ships in wheels as package data
``hisparse/tla/`` (``pyproject.toml`` maps the package ``hisparse.tla`` to ``tla``).
An installed wheel finds it next to this package; an editable install finds it in the
checkout. ``HISPARSE_TLA_DIR`` overrides both, e.g. for a toy spec.
"""

from __future__ import annotations

import os
from pathlib import Path

from hisparse.tlc.errors import ModelError

TLA_DIR_ENV = "HISPARSE_TLA_DIR"
CACHE_ENV = "HISPARSE_CACHE"


def repo_root() -> Path:
    """Repository root of an editable install (``hisparse/tlc/paths.py`` -> ``.``)."""
    return Path(__file__).resolve().parents[2]


def checkout_root() -> Path | None:
    """The source checkout this hisparse runs from, or None (installed from a wheel)."""
    root = repo_root()
    ours = (root / "hisparse" / "tlc" / "paths.py").resolve() == Path(__file__).resolve()
    return root if ours and (root / "pyproject.toml").is_file() else None


def tla_dir() -> Path:
    """Directory with the ``*.tla``/``*.cfg`` model files; fails if it does not exist."""
    override = os.environ.get(TLA_DIR_ENV)
    if override:
        path = Path(override).expanduser()
    else:
        packaged = Path(__file__).resolve().parents[1] / "tla"  # a wheel: hisparse/tla
        path = packaged if packaged.is_dir() else repo_root() / "tla"
    if not path.is_dir():
        how = f"{TLA_DIR_ENV}={override}" if override else f"{path}"
        raise ModelError(
            f"TLA+ directory not found: {how}. Reinstall hisparse (the wheel ships "
            f"hisparse/tla) or set {TLA_DIR_ENV}."
        )
    return path


def cache_dir() -> Path:
    """Directory for the TLC jar and its private Maven repository."""
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override).expanduser()
    return Path.home() / ".cache" / "hisparse" / "tlc"
