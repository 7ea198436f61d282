"""Pool sizes and the packed row layout every executor shares.

The device pool is one array of rows: the resident GPU blocks first, then each slot's
hot rows. Resident and hot leases share one packed allocation (seed: "Resident and hot
leases can still share one packed HMA allocation"), so a resolved row is a single
integer that attention can index without knowing which tier it came from.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from hisparse.executor.errors import HOT_ROWS_RULE, ExecutorConfigError

ROW_ALIGN = 16
"""Row size granularity in bytes: the GPU copy kernel moves 16-byte vectors."""


@dataclass(frozen=True)
class PoolLayout:
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
        if why := row_bytes_problem(self.row_bytes):
            raise ExecutorConfigError(why)

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


def row_bytes_problem(row_bytes: int) -> str | None:
    """Why ``row_bytes`` cannot be laid out (None: it can): the one alignment rule."""
    if row_bytes % ROW_ALIGN == 0:
        return None
    up = -(-row_bytes // ROW_ALIGN) * ROW_ALIGN
    return (
        f"row_bytes={row_bytes} is not a multiple of {ROW_ALIGN} for the GPU copy kernel: "
        f"pad rows to {up} (DeepSeek-V3.2 FP8 MLA uses 656)"
    )


def min_hot_rows(top_k: int, num_speculative_tokens: int) -> int:
    """Smallest H that makes ``HotCapacityError`` impossible.

    Each of a decode step's ``num_speculative_tokens + 1`` verification steps adds at
    most K distinct rows to the rows a batch holds for its slot, so that many times K
    always leaves room for the last one.
    """
    return (num_speculative_tokens + 1) * top_k


def default_hot_rows(top_k: int, num_speculative_tokens: int) -> int:
    """H when none is configured: the minimum plus one more top-K of reuse headroom
    (2 x top_k; (num_speculative_tokens + 2) x top_k with speculation)."""
    return min_hot_rows(top_k, num_speculative_tokens) + top_k


def hot_rows_problem(hot_rows: int, top_k: int, num_speculative_tokens: int) -> str | None:
    """Why ``hot_rows`` cannot hold one decode step's top-K (None: it can): the one
    hot-row rule, with its one message."""
    need = min_hot_rows(top_k, num_speculative_tokens)
    if hot_rows >= need:
        return None
    return (
        f"hot_rows={hot_rows} is below {need} = {HOT_ROWS_RULE}: one decode step could "
        f"not hold its top-K; raise hot_rows to at least {need}"
    )
