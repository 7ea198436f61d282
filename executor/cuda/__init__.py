"""The CUDA executor (CuPy): installed as ``hisparse.executor.cuda``.

Importing this package needs neither CuPy nor a GPU; constructing ``CudaExecutor``
does, and raises ``CudaUnavailable`` with what to install when either is missing.
"""

from hisparse.executor.cuda.backend import CudaUnavailable, cuda_available
from hisparse.executor.cuda.executor import CudaExecutor
from hisparse.executor.cuda.pools import CudaPools
from hisparse.executor.cuda.results import CudaResolveResult, DevicePlan, ResolveBuffers

__all__ = [
    "CudaExecutor",
    "CudaPools",
    "CudaResolveResult",
    "CudaUnavailable",
    "DevicePlan",
    "ResolveBuffers",
    "cuda_available",
]
