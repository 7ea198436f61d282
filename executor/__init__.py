"""Executors that drive the HiSparse protocol against real memory.

Installed as ``hisparse.executor``. ``base`` is the interface every executor implements;
``reference`` is the NumPy oracle; ``accounting`` keeps its decisions without bytes;
the resolver's rules are in ``docs/resolver.md``.
``hisparse.executor.cuda`` is the CUDA executor (CuPy); it is not imported here, so this
package never needs CuPy.
"""

from hisparse.executor.accounting import AccountingExecutor, AccountingPools
from hisparse.executor.base import CachePools, Executor, ResolveBatch, ResolveResult
from hisparse.executor.errors import (
    BadBatch,
    BadHostRead,
    BadPlan,
    BadTransfer,
    CopyWaitExpired,
    ExecutorConfigError,
    ExecutorError,
    HotCapacityError,
    LaunchConflict,
    LaunchRefused,
    PendingHostWrite,
    StaleStep,
)
from hisparse.executor.layout import PoolLayout, min_hot_rows
from hisparse.executor.reference import ReferenceExecutor, ReferencePools

__all__ = [
    "AccountingExecutor",
    "AccountingPools",
    "BadBatch",
    "BadHostRead",
    "BadPlan",
    "BadTransfer",
    "CachePools",
    "CopyWaitExpired",
    "Executor",
    "ExecutorConfigError",
    "ExecutorError",
    "HotCapacityError",
    "LaunchConflict",
    "LaunchRefused",
    "PendingHostWrite",
    "PoolLayout",
    "ReferenceExecutor",
    "ReferencePools",
    "ResolveBatch",
    "ResolveResult",
    "StaleStep",
    "min_hot_rows",
]
