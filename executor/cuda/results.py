"""Device-side resolve outputs: fixed-size, so producing them needs no readback.

A resolve's miss plan has a data-dependent length; on the GPU it lives as ``[n, K, 2]``
pairs plus a per-entry count, which followers replay without the host ever learning
the length. ``to_host()`` is the explicit, synchronizing way to look at a result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from hisparse.executor.base import ResolveResult
from hisparse.executor.cuda.backend import load_cupy


@dataclass(frozen=True, eq=False)
class DevicePlan:
    """Miss plan on the device: entry ``e``'s copies are ``pairs[e, :counts[e]]``.

    ``copy_pairs`` (when the resolver wrote it) holds the same pairs in the order they
    are copied, host row ascending for big entries (pinned memory read in address
    order); ``pairs`` keeps the plan's own order, the one the reference defines.
    """

    pairs: Any  # int32 [n, K, 2]: (hot device row, host row)
    counts: Any  # int32 [n]
    copy_pairs: Any = None  # int32 [n, K, 2] or None: the copy order

    def to_host(self) -> np.ndarray:
        """The plan as ``ResolveResult.plan`` (int32 [m, 2], entry order); synchronizes."""
        cupy = load_cupy()
        pairs, counts = cupy.asnumpy(self.pairs), cupy.asnumpy(self.counts)
        parts = [pairs[e, : counts[e]] for e in range(len(counts))]
        return (np.concatenate(parts) if parts else np.zeros((0, 2), np.int32)).astype(np.int32)


@dataclass(eq=False)
class CudaResolveResult:
    """What ``CudaExecutor.resolve`` returns: device arrays, valid in stream order.

    ``rows`` (int32 [n, K]) is what attention indexes; ``plan`` goes to
    ``CudaExecutor.replay`` for followers; ``counters`` is int32 [n, 3] (resident, hot,
    miss per entry). Nothing here has been copied to the host. ``check`` (set by the
    executor's launch) raises what the device refused (``LaunchRefused``).
    """

    rows: Any
    plan: DevicePlan
    counters: Any
    take: Any = None  # int32 [n]: the launch's copy-queue claims (scratch)
    check: Callable[[], None] | None = None

    @classmethod
    def empty(cls, n: int, k: int) -> CudaResolveResult:
        """Uninitialized outputs: the kernel writes every field it promises (no fill launch)."""
        cupy = load_cupy()
        return cls(
            rows=cupy.empty((n, k), dtype=cupy.int32),
            plan=DevicePlan(
                pairs=cupy.empty((n, k, 2), dtype=cupy.int32),
                counts=cupy.empty(n, dtype=cupy.int32),
                copy_pairs=cupy.empty((n, k, 2), dtype=cupy.int32),
            ),
            counters=cupy.empty((n, 3), dtype=cupy.int32),
            take=cupy.empty(n, dtype=cupy.int32),
        )

    def to_host(self) -> ResolveResult:
        """Copy everything to the host as a ``ResolveResult``; synchronizes the stream, then
        raises ``LaunchRefused`` if the device refused blocks of the launch."""
        cupy = load_cupy()
        totals = cupy.asnumpy(self.counters).sum(axis=0) if self.counters.size else [0, 0, 0]
        if self.check is not None:
            self.check()
        return ResolveResult(
            rows=cupy.asnumpy(self.rows),
            plan=self.plan.to_host(),
            resident_hits=int(totals[0]),
            hot_hits=int(totals[1]),
            misses=int(totals[2]),
        )


@dataclass(frozen=True, eq=False)
class ResolveBuffers:
    """Fixed device buffers for graph capture: write inputs, replay the graph, read outputs.

    ``slots`` int32 [n] (-1 marks a padding entry), ``topk`` / ``resident_row`` /
    ``host_row`` int32 [n, K], ``step`` int64 [1]; outputs as in ``CudaResolveResult``.
    """

    slots: Any
    topk: Any
    resident_row: Any
    host_row: Any
    step: Any
    result: CudaResolveResult

    @classmethod
    def allocate(cls, n: int, k: int) -> ResolveBuffers:
        cupy = load_cupy()
        return cls(
            slots=cupy.full(n, -1, dtype=cupy.int32),
            topk=cupy.full((n, k), -1, dtype=cupy.int32),
            resident_row=cupy.full((n, k), -1, dtype=cupy.int32),
            host_row=cupy.full((n, k), -1, dtype=cupy.int32),
            step=cupy.zeros(1, dtype=cupy.int64),
            result=CudaResolveResult.empty(n, k),
        )
