"""Executors that drive the HiSparse protocol against real memory.

Installed as ``hisparse.executor``. ``base`` is the interface every executor implements;
``reference`` is the NumPy oracle; the resolver's rules are in ``docs/resolver.md``.
``hisparse.executor.cuda`` is the CUDA executor (CuPy); it is not imported here, so this
package never needs CuPy.
"""

from hisparse.executor.base import CachePools, Executor, ResolveBatch, ResolveResult
from hisparse.executor.errors import (
    BadBatch,
    BadHostRead,
    BadPlan,
    BadTransfer,
    ExecutorConfigError,
    ExecutorError,
    HotCapacityError,
    PendingHostWrite,
)
from hisparse.executor.layout import PoolSpec, min_hot_rows
from hisparse.executor.reference import ReferenceExecutor, ReferencePools

__all__ = [
    "BadBatch",
    "BadHostRead",
    "BadPlan",
    "BadTransfer",
    "CachePools",
    "Executor",
    "ExecutorConfigError",
    "ExecutorError",
    "HotCapacityError",
    "PendingHostWrite",
    "PoolSpec",
    "ReferenceExecutor",
    "ReferencePools",
    "ResolveBatch",
    "ResolveResult",
    "min_hot_rows",
]
