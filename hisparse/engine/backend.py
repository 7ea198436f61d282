"""Finding torch for the engine, with an error that says what to install."""

from __future__ import annotations

from typing import Any

from hisparse.executor.errors import ExecutorError


class EngineUnavailable(ExecutorError):
    """The engine cannot run here: torch is missing (a GPU is checked by CuPy)."""


def load_torch() -> Any:
    """The ``torch`` module, or ``EngineUnavailable`` naming the extra to install."""
    try:
        import torch
    except ImportError as exc:
        raise EngineUnavailable(
            f"the engine needs torch: pip install 'hisparse[engine]' ({exc})"
        ) from exc
    return torch
