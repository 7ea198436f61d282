"""The executors by name: one place that builds the executor a run or a worker process
asks for, so ``simulate`` and ``workerproc`` both use it without importing each other."""

from __future__ import annotations

from typing import Any

from hisparse.config import HiSparseConfig
from hisparse.executor.accounting import AccountingExecutor
from hisparse.executor.base import Executor
from hisparse.executor.reference import ReferenceExecutor

EXECUTORS = ("reference", "cuda", "accounting")


def make_executor(name: str, config: HiSparseConfig, max_positions: int) -> Executor[Any]:
    """The executor ``name`` (``reference`` runs anywhere; ``cuda`` needs CuPy and a GPU),
    shaped by ``config``."""
    if name == "reference":
        return ReferenceExecutor()
    if name == "accounting":  # residency, hot rows and LRU exactly; no bytes
        return AccountingExecutor()
    if name == "cuda":
        from hisparse.executor.cuda import CudaExecutor

        return CudaExecutor(
            top_k=config.top_k,
            num_speculative_tokens=config.num_speculative_tokens,
            max_positions=max_positions,
        )
    raise ValueError(f"unknown executor {name!r}; choose one of {', '.join(EXECUTORS)}")
