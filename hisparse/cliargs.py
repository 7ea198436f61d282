"""Argument types for the ``hisparse`` CLI: every number and path is checked at parse
time, so a bad one fails before any work starts (exit 2, one line saying what to change)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path


def _int(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what}, got {text!r}") from None


def positive_int(text: str) -> int:
    """An integer >= 1."""
    n = _int(text, "must be a positive integer")
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {n}")
    return n


def nonneg_int(text: str) -> int:
    """An integer >= 0."""
    n = _int(text, "must be an integer >= 0")
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {n}")
    return n


def port(text: str) -> int:
    """A TCP port, 0 for any free one."""
    n = _int(text, "must be a port number (0 = any free port)")
    if not 0 <= n <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number 0..65535, got {n}")
    return n


def _float(text: str, what: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what}, got {text!r}") from None
    if x != x or x in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"{what}, got {text!r}")
    return x


def positive_float(text: str) -> float:
    """A finite number > 0."""
    x = _float(text, "must be a number > 0")
    if x <= 0:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text}")
    return x


def probability(text: str) -> float:
    """A number in [0, 1]."""
    x = _float(text, "must be a number between 0 and 1")
    if not 0 <= x <= 1:
        raise argparse.ArgumentTypeError(f"must be a number between 0 and 1, got {text}")
    return x


def fault_rate(text: str) -> float:
    """A chance per message of each of three faults: a number in [0, 1/3]."""
    x = _float(text, "must be a number between 0 and 1/3")
    if not 0 <= x <= 1 / 3:
        raise argparse.ArgumentTypeError(f"must be a number between 0 and 1/3, got {text}")
    return x


def csv_of(item: Callable[[str], float]) -> Callable[[str], tuple[float, ...]]:
    """A comma-separated, non-empty list of ``item``."""

    def parse(text: str) -> tuple[float, ...]:
        parts = [p.strip() for p in text.split(",")]
        if not all(parts):
            raise argparse.ArgumentTypeError(f"must be a comma-separated list, got {text!r}")
        return tuple(item(p) for p in parts)

    return parse


def out_path(text: str) -> Path:
    """A file we may write: its folder exists and is writable; not a folder itself."""
    path = Path(text).expanduser()
    parent = path.parent if str(path.parent) else Path()
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder, not a file")
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(f"folder {parent} does not exist (for {text})")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise argparse.ArgumentTypeError(f"{text} is not writable")
    return path


def in_file(text: str) -> Path:
    """A readable file."""
    path = Path(text).expanduser()
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"no such file: {text}")
    if not os.access(path, os.R_OK):
        raise argparse.ArgumentTypeError(f"{text} is not readable")
    return path


def workers(text: str) -> int | str:
    """TLC worker threads: ``auto`` or a positive integer."""
    return text if text == "auto" else positive_int(text)
