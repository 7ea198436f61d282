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

WS_INTS = 68
"""Ints of block-scan scratch (33 int64) plus two broadcast slots at the head of the
resolver's shared memory. The one definition: passed to kernels.cu as ``HS_WS_INTS``."""

CTRL_OWNER, CTRL_LAST_STEP, CTRL_TICKETS, CTRL_DONE = 0, 1, 2, 3
CTRL_FRONT, CTRL_PUBLISHED, CTRL_BIG, CTRL_REFUSED = 4, 5, 6, 7
"""Indices of the int64 launch-control words of one pools (``CudaPools.ctrl``): owner
word, step of the last completed launch, tickets, blocks done, the copy queue's front,
runs published and big runs published (all but the step reset by a launch's last
block); refused blocks of code ``c`` are counted at ``CTRL_REFUSED + c``."""

LAUNCH_WORDS = (CTRL_OWNER, CTRL_TICKETS, CTRL_DONE, CTRL_FRONT, CTRL_PUBLISHED, CTRL_BIG)
"""The words a launch's last block resets (all but the step and the refusal counts)."""

REFUSE_STALE, REFUSE_CONFLICT, REFUSE_TIMEOUT = 1, 2, 3
"""Refusal codes; also the index of each count in the mapped host status words."""

CTRL_WORDS = CTRL_REFUSED + REFUSE_TIMEOUT + 1

CONTROL = {
    "CTRL_OWNER": CTRL_OWNER, "CTRL_LAST_STEP": CTRL_LAST_STEP,
    "CTRL_TICKETS": CTRL_TICKETS, "CTRL_DONE": CTRL_DONE, "CTRL_REFUSED": CTRL_REFUSED,
    "CTRL_FRONT": CTRL_FRONT, "CTRL_PUBLISHED": CTRL_PUBLISHED, "CTRL_BIG": CTRL_BIG,
    "REFUSE_STALE": REFUSE_STALE, "REFUSE_CONFLICT": REFUSE_CONFLICT,
    "REFUSE_TIMEOUT": REFUSE_TIMEOUT,
}
"""What kernels.cu is compiled with (``-D``): the one definition of the layout above."""

SORT_MIN_BATCH = 32
"""Launches of at least this many entries copy each big entry's misses in host-row order
(passed to kernels.cu); below it the sort would lengthen a short, latency-bound launch."""


def resolve_smem_bytes(hot_rows: int, top_k: int) -> int:
    """Dynamic shared memory of ``hisparse_resolve``; mirrors the layout in kernels.cu:
    WS_INTS ints of scratch, then used[H], victims[K], first_row[K] and new_order[H]
    ints, then (8-byte aligned) the copy-order sort keys: int64 [top_k rounded up to a
    power of two]."""
    ints = WS_INTS + 2 * hot_rows + 2 * top_k
    return 4 * (ints + ints % 2) + 8 * (1 << (top_k - 1).bit_length())


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
        cls, hot_rows: int, top_k: int, num_speculative_tokens: int, max_positions: int
    ) -> ResolverShape:
        if not 1 <= top_k <= MAX_TOP_K:
            raise ExecutorConfigError(
                f"top_k must be in 1..{MAX_TOP_K} (each resolver thread keeps "
                f"ceil(top_k / {RESOLVE_THREADS}) positions in registers), got {top_k}"
            )
        if num_speculative_tokens < 0:
            raise ExecutorConfigError(
                f"num_speculative_tokens must be >= 0, got {num_speculative_tokens}"
            )
        # the kernel cannot refuse a batch mid-launch: hot rows make HotCapacityError impossible
        if why := hot_rows_problem(hot_rows, top_k, num_speculative_tokens):
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
    # a tuning build may set its own sort threshold (hisparse bench resolver)
    own = any(d.startswith("-DSORT_MIN_BATCH=") for d in defines)
    sort = () if own else (f"-DSORT_MIN_BATCH={SORT_MIN_BATCH}",)
    with cupy.cuda.Device(device_id):
        module = cupy.RawModule(
            code=source,
            options=("-std=c++17", f"-DHS_WS_INTS={WS_INTS}", *sort,
                     *(f"-D{name}={value}" for name, value in CONTROL.items()), *defines),
        )
        return Kernels(
            resolve=module.get_function("hisparse_resolve"),
            replay=module.get_function("hisparse_replay"),
            spill=module.get_function("hisparse_spill"),
            module=module,
        )
