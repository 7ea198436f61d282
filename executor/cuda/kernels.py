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
from hisparse.executor.layout import hot_rows_problem

RESOLVE_THREADS = 1024
"""Threads of one resolver block (one slot's run of entries); also the copy width."""

COPY_THREADS = 512
"""Threads per block of the replay and spill copy kernels."""

MAX_TOP_K = 8 * RESOLVE_THREADS
"""Largest top-K one resolver build supports (eight positions per thread)."""

SMEM_LIMIT = 227 * 1024
"""Dynamic shared memory one block may use on sm_80 and later (Hopper: 227 KiB)."""


def resolve_smem_bytes(hot_rows: int, top_k: int) -> int:
    """Dynamic shared memory of ``hisparse_resolve``; mirrors the layout in kernels.cu:
    WS_INTS ints of scratch, then used[H], victims[K], first_row[K] and new_order[H]
    ints."""
    return 4 * (68 + 2 * hot_rows + 2 * top_k)


def rows_per_thread(hot_rows: int) -> int:
    """Hot rows each resolver thread keeps in registers (a compile-time constant)."""
    return -(-hot_rows // RESOLVE_THREADS)


def positions_per_thread(top_k: int) -> int:
    """Top-K positions each resolver thread keeps in registers (a compile-time constant)."""
    return -(-top_k // RESOLVE_THREADS)


@dataclass(frozen=True)
class ResolverShape:
    """The shape limits one resolver configuration is built for, checked once."""

    hot_rows: int
    top_k: int
    max_positions: int
    smem: int

    @classmethod
    def of(
        cls, hot_rows: int, top_k: int, entries_per_slot: int, max_positions: int
    ) -> ResolverShape:
        if not 1 <= top_k <= MAX_TOP_K:
            raise ExecutorConfigError(
                f"top_k must be in 1..{MAX_TOP_K} (each resolver thread keeps "
                f"ceil(top_k / {RESOLVE_THREADS}) positions in registers), got {top_k}"
            )
        if entries_per_slot < 1:
            raise ExecutorConfigError(f"entries_per_slot must be >= 1, got {entries_per_slot}")
        # the kernel cannot refuse a batch mid-launch: hot rows make HotCapacityError impossible
        if why := hot_rows_problem(hot_rows, top_k, entries_per_slot - 1):
            raise ExecutorConfigError(why)
        if hot_rows >= 1 << 16:
            raise ExecutorConfigError(
                f"hot_rows must be below 65536 (the kernel packs row counts in 16 bits), "
                f"got {hot_rows}"
            )
        if not 1 <= max_positions < 1 << 31:
            raise ExecutorConfigError(f"max_positions must be in 1..2**31-1, got {max_positions}")
        smem = resolve_smem_bytes(hot_rows, top_k)
        if smem > SMEM_LIMIT:
            raise ExecutorConfigError(
                f"hot_rows {hot_rows} with top_k {top_k} needs {smem} bytes of shared "
                f"memory per block, above {SMEM_LIMIT}; lower hot_rows"
            )
        return cls(hot_rows, top_k, max_positions, smem)


@dataclass(frozen=True)
class Kernels:
    """The three compiled kernels of one device."""

    resolve: Any
    replay: Any
    spill: Any
    module: Any


@functools.cache
def compile_kernels(device_id: int, defines: tuple[str, ...] = ()) -> Kernels:
    """Compile ``kernels.cu`` for ``device_id`` (cached per process).

    ``defines`` are extra NVRTC options; ``("-DHISPARSE_PROFILE",)`` records phase
    timestamps of block 0 in the ``hisparse_prof`` device array, for tuning only.
    """
    cupy = load_cupy()
    source = resources.files("hisparse.executor.cuda").joinpath("kernels.cu").read_text()
    with cupy.cuda.Device(device_id):
        module = cupy.RawModule(code=source, options=("-std=c++17", *defines))
        return Kernels(
            resolve=module.get_function("hisparse_resolve"),
            replay=module.get_function("hisparse_replay"),
            spill=module.get_function("hisparse_spill"),
            module=module,
        )
