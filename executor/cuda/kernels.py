"""Compiling and sizing the CUDA kernels (``kernels.cu``).

The source is compiled once per process and device by NVRTC through CuPy; shared
memory is sized from the pool shape at configuration time, so a launch does no checks.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources
from typing import Any

from hisparse.executor.cuda.backend import load_cupy
from hisparse.executor.errors import ExecutorConfigError

RESOLVE_THREADS = 1024
"""Threads of one resolver block (one slot's run of entries); also the copy width."""

COPY_THREADS = 512
"""Threads per block of the replay and spill copy kernels."""

SMEM_LIMIT = 227 * 1024
"""Dynamic shared memory one block may use on sm_80 and later (Hopper: 227 KiB)."""


def hash_capacity(hot_rows: int, top_k: int) -> int:
    """Power-of-two open-addressing table for the slot's tags plus one entry's misses,
    at most three quarters full, so probes stay short."""
    need = -(-(hot_rows + top_k) * 4 // 3)
    cap = 32
    while cap < need:
        cap *= 2
    return cap


def resolve_smem_bytes(hot_rows: int, top_k: int) -> int:
    """Dynamic shared memory of ``hisparse_resolve``; mirrors the layout in kernels.cu."""
    cap = hash_capacity(hot_rows, top_k)
    ints = 2 * cap + 2 * hot_rows + 2 * top_k + 33 + (hot_rows + 31) // 32
    return 4 * ints


@dataclass(frozen=True)
class ResolverShape:
    """The shape limits one resolver configuration is built for, checked once."""

    hot_rows: int
    top_k: int
    cap: int
    smem: int

    @classmethod
    def of(cls, hot_rows: int, top_k: int, entries_per_slot: int) -> ResolverShape:
        if top_k < 1 or top_k >= 1 << 16:
            raise ExecutorConfigError(f"top_k must be in 1..65535, got {top_k}")
        if entries_per_slot < 1:
            raise ExecutorConfigError(f"entries_per_slot must be >= 1, got {entries_per_slot}")
        if hot_rows < entries_per_slot * top_k:
            raise ExecutorConfigError(
                f"hot_rows {hot_rows} < entries_per_slot {entries_per_slot} x top_k {top_k}: "
                "the kernel cannot refuse a batch mid-launch, so hot rows must make "
                "HotCapacityError impossible; raise hot_rows or lower top_k"
            )
        if hot_rows >= 1 << 24:
            raise ExecutorConfigError(f"hot_rows must be below 2**24, got {hot_rows}")
        smem = resolve_smem_bytes(hot_rows, top_k)
        if smem > SMEM_LIMIT:
            raise ExecutorConfigError(
                f"hot_rows {hot_rows} with top_k {top_k} needs {smem} bytes of shared "
                f"memory per block, above {SMEM_LIMIT}; lower hot_rows"
            )
        return cls(hot_rows, top_k, hash_capacity(hot_rows, top_k), smem)


@dataclass(frozen=True)
class Kernels:
    """The three compiled kernels of one device."""

    resolve: Any
    replay: Any
    spill: Any


@functools.cache
def compile_kernels(device_id: int) -> Kernels:
    """Compile ``kernels.cu`` for ``device_id`` (cached per process)."""
    cupy = load_cupy()
    source = resources.files("hisparse.executor.cuda").joinpath("kernels.cu").read_text()
    with cupy.cuda.Device(device_id):
        module = cupy.RawModule(code=source, options=("-std=c++17",))
        return Kernels(
            resolve=module.get_function("hisparse_resolve"),
            replay=module.get_function("hisparse_replay"),
            spill=module.get_function("hisparse_spill"),
        )
