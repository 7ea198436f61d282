"""Finding CuPy and an NVIDIA GPU, lazily, with errors that say what to install.

Importing ``hisparse.executor.cuda`` never imports CuPy: engines and CI without a GPU
can import everything, and only constructing a ``CudaExecutor`` asks for the device.
"""

from __future__ import annotations

import functools
from typing import Any

from hisparse.executor.errors import ExecutorError


class CudaUnavailable(ExecutorError):
    """The CUDA executor cannot run here: no CuPy, no NVIDIA GPU, or an unsupported platform."""


@functools.cache
def load_cupy() -> Any:
    """The ``cupy`` module, checked to be a CUDA build that sees an NVIDIA GPU."""
    try:
        import cupy
    except ImportError as exc:
        raise CudaUnavailable(
            "the CUDA executor needs CuPy: pip install 'hisparse[cuda12]' (CUDA 12) or "
            f"'hisparse[cuda13]' (CUDA 13) ({exc})"
        ) from exc
    except Exception as exc:  # a CuPy wheel whose CUDA libraries fail to load
        raise CudaUnavailable(f"CuPy failed to import: {type(exc).__name__}: {exc}") from exc
    if getattr(cupy.cuda.runtime, "is_hip", False):
        raise CudaUnavailable(
            "CuPy is a ROCm build: the CUDA executor supports NVIDIA GPUs only "
            "(its kernels use CUDA-only warp intrinsics and mapped pinned memory)"
        )
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:
        raise CudaUnavailable(f"no usable NVIDIA GPU: the CUDA runtime says {exc}") from exc
    if count < 1:
        raise CudaUnavailable("no NVIDIA GPU is visible (CUDA reports 0 devices)")
    return cupy


def cuda_available() -> bool:
    """True when ``CudaExecutor()`` can be constructed here."""
    try:
        load_cupy()
    except CudaUnavailable:
        return False
    return True
