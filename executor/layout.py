"""Pool sizes and the packed row layout every executor shares.

The device pool is one array of rows: the resident GPU blocks first, then each slot's
hot rows. Resident and hot leases share one packed allocation (seed: "Resident and hot
leases can still share one packed HMA allocation"), so a resolved row is a single
integer that attention can index without knowing which tier it came from.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from hisparse.executor.errors import ExecutorConfigError

ROW_ALIGN = 16
"""Row size granularity in bytes: the GPU copy kernel moves 16-byte vectors."""


@dataclass(frozen=True)
class PoolSpec:
    """Sizes of one cache's pools; validated on construction.

    ``hot_rows`` is H, the hot rows of one request slot; ``slots`` is the number of
    requests that can hold hot state at once.
    """

    gpu_blocks: int
    host_blocks: int
    block_tokens: int
    row_bytes: int
    hot_rows: int
    slots: int

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ExecutorConfigError(
                    f"{f.name} must be an int, got {type(value).__name__}"
                )
            if value < 1:
                raise ExecutorConfigError(f"{f.name} must be at least 1, got {value}")
        if self.row_bytes % ROW_ALIGN:
            up = -(-self.row_bytes // ROW_ALIGN) * ROW_ALIGN
            raise ExecutorConfigError(
                f"row_bytes must be a multiple of {ROW_ALIGN} for the GPU copy kernel, "
                f"got {self.row_bytes}; pad rows to {up}"
            )

    @property
    def resident_rows(self) -> int:
        """Rows of the resident region: rows below this are resident, rows at or above are hot."""
        return self.gpu_blocks * self.block_tokens

    @property
    def device_rows(self) -> int:
        """Rows of the packed device pool (resident region, then every slot's hot rows)."""
        return self.resident_rows + self.slots * self.hot_rows

    @property
    def host_rows(self) -> int:
        """Rows of the host pool."""
        return self.host_blocks * self.block_tokens

    def resident_row(self, gpu_block: int, offset: int) -> int:
        """Device row of token ``offset`` of resident GPU block ``gpu_block``."""
        return gpu_block * self.block_tokens + offset

    def hot_row(self, slot: int, index: int) -> int:
        """Device row of hot row ``index`` (0 .. H-1) of request slot ``slot``."""
        return self.resident_rows + slot * self.hot_rows + index

    def host_row(self, host_block: int, offset: int) -> int:
        """Host row of token ``offset`` of host block ``host_block``."""
        return host_block * self.block_tokens + offset


def hot_rows_needed(top_k: int, entries_per_slot: int) -> int:
    """Smallest H that makes ``HotCapacityError`` impossible.

    Each entry adds at most K distinct rows to the rows a batch holds for its slot, so
    ``entries_per_slot * K`` (speculative steps + 1) always leaves room for the last entry.
    """
    return top_k * entries_per_slot
