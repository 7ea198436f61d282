"""Where the TLA+ sources and the TLC cache live.

The TLA+ files are not package data: ``tla/`` sits at the repository root and is found
relative to this file, which is only right for an editable install (the supported mode).
``HISPARSE_TLA_DIR`` overrides it, e.g. for a non-editable install or a toy spec.
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


def tla_dir() -> Path:
    """Directory with the ``*.tla``/``*.cfg`` model files; fails if it does not exist."""
    override = os.environ.get(TLA_DIR_ENV)
    path = Path(override).expanduser() if override else repo_root() / "tla"
    if not path.is_dir():
        how = f"{TLA_DIR_ENV}={override}" if override else f"<repo>/tla ({path})"
        raise ModelError(
            f"TLA+ directory not found: {how}. Use an editable install "
            f"(`pip install -e .`) from a checkout, or set {TLA_DIR_ENV}."
        )
    return path


def cache_dir() -> Path:
    """Directory for the TLC jar and its private Maven repository."""
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override).expanduser()
    return Path.home() / ".cache" / "hisparse" / "tlc"
