"""What a P/D import needs of an executor, beside ``Executor``'s own calls.

An import lands a request's prefill KV either directly in resident GPU blocks (device
target: the transport READs into the memory ``import_memory`` returns, registered with
it) or through the staging pool into host blocks (host target: ``write_host_block``),
mirroring the pages needed immediately into their resident blocks
(``Executor.write_device_rows``). The NumPy reference implements both on host memory;
the CUDA executor returns its resident region in VRAM (registered as NIXL ``VRAM``) and
copies a staged page from a staging slot in VRAM into pinned host memory on its stream
(``CudaExecutor.staging_pool``).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray


class ImportExecutor(Protocol):
    """The import calls of an executor (``ReferenceExecutor`` and ``CudaExecutor`` implement
    them; the CUDA one returns and accepts CuPy arrays where this says NumPy)."""

    def import_memory(self, pools: Any) -> NDArray[np.uint8]:
        """The resident region of ``pools``' device memory as one contiguous byte array
        ``[resident_rows, row_bytes]``: what a transport registers for direct landing."""
        ...

    def write_host_block(
        self, pools: Any, host_block: int, data: NDArray[np.uint8]
    ) -> None:
        """Write a whole host block (``[block_tokens, row_bytes]``): a staged page's copy
        into its host source block. Refused while a spill copy is queued into it."""
        ...

    def write_device_rows(
        self, pools: Any, rows: NDArray[np.int64], data: NDArray[np.uint8]
    ) -> None:
        """Write whole device rows (the mirror of a staged page; a device page's tail)."""
        ...
