"""GPU timing helpers shared by the GPU benchmarks: device-side times, no launch gaps.

Each timed region is preceded by a short spin kernel, so the host has queued the start
event, the work and the end event before the GPU reaches them: CUDA events then time
the work itself, not Python's launch overhead. An L2 flush before each repetition keeps
cached rows from flattering later repetitions.
"""

from __future__ import annotations

import platform
import statistics
from collections.abc import Callable
from typing import Any

from hisparse.executor.cuda.backend import load_cupy

_SOURCE = r"""
extern "C" __global__ void spin(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) { }
}

// Does nothing: a launch's own cost at a given grid, block and shared-memory size.
extern "C" __global__ void __launch_bounds__(1024, 1) idle() {
    extern __shared__ int unused[];
}

// Plain zero-copy gather: one 16-byte vector per thread, (dst, src) row pairs.
extern "C" __global__ void gather(const int2* __restrict__ pairs, long long total, int rv,
                                  const uint4* __restrict__ src, uint4* __restrict__ dst) {
    long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= total) return;
    int r = (int)(idx / rv), v = (int)(idx - (long long)r * rv);
    int2 p = pairs[r];
    dst[(long long)p.x * rv + v] = src[(long long)p.y * rv + v];
}
"""


class GpuTimer:
    """Median device time of a callable's GPU work, in microseconds."""

    def __init__(
        self, spin_us: float = 200.0, flush_bytes: int = 256 << 20, flush: bool = True
    ) -> None:
        cupy = load_cupy()
        self.cupy = cupy
        module = cupy.RawModule(code=_SOURCE)
        self.spin = module.get_function("spin")
        self.gather = module.get_function("gather")
        self.idle = module.get_function("idle")
        rate = cupy.cuda.runtime.deviceGetAttribute(cupy.cuda.runtime.cudaDevAttrClockRate, 0)
        self.clock_khz = rate
        self.spin_cycles = int(spin_us * rate / 1000)  # clock rate is in kHz
        self.flush = cupy.empty(flush_bytes if flush else 0, dtype=cupy.uint8)

    def time(
        self, work: Callable[[int], None], reps: int, *,
        before: Callable[[int], None] | None = None, warmup: int = 3, stream: Any = None,
        spin_us: float | None = None,
    ) -> dict[str, float]:
        """Run ``work(i)`` ``reps`` times after ``warmup`` runs; ``before(i)`` runs untimed.

        ``spin_us`` overrides the spin for work whose host side (Python building and
        queuing it) takes longer than the default spin: the GPU must still be spinning
        when the host has queued the end event, or the host's time is timed too.
        """
        cupy = self.cupy
        cycles = self.spin_cycles if spin_us is None else int(spin_us * self.clock_khz / 1000)
        stream = stream if stream is not None else cupy.cuda.get_current_stream()
        times: list[tuple[Any, Any]] = []
        with stream:
            for i in range(warmup + reps):
                if before is not None:
                    before(i)
                if self.flush.size:
                    self.flush.fill(i & 0xFF)
                self.spin((1,), (1,), (cupy.int64(cycles),))
                start, end = cupy.cuda.Event(), cupy.cuda.Event()
                start.record(stream)
                work(i)
                end.record(stream)
                if i >= warmup:
                    times.append((start, end))
        stream.synchronize()
        us = [cupy.cuda.get_elapsed_time(a, b) * 1000.0 for a, b in times]
        return {"median_us": statistics.median(us), "min_us": min(us), "reps": float(reps)}


def environment() -> dict[str, Any]:
    """GPU, driver, CUDA and CuPy versions for the benchmark record."""
    cupy = load_cupy()
    rt = cupy.cuda.runtime
    props = rt.getDeviceProperties(0)
    name = props["name"]
    return {
        "gpu": name.decode() if isinstance(name, bytes) else str(name),
        "sms": int(props["multiProcessorCount"]),
        "driver": _driver_version(),
        "cuda_runtime": rt.runtimeGetVersion(),
        "cuda_driver_api": rt.driverGetVersion(),
        "cupy": cupy.__version__,
        "python": platform.python_version(),
    }


def _driver_version() -> str:
    try:
        import subprocess

        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=False,
        )
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"
