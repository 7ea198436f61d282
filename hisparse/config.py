"""HiSparseConfig: the one configuration object an engine builds.

Invalid values fail at construction with a message that says what to change,
so nothing downstream (pools, kernels, the coordinator) re-validates shapes.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from hisparse.executor.layout import (
    PoolLayout,
    default_hot_rows,
    hot_rows_problem,
    min_hot_rows,
    row_bytes_problem,
)
from hisparse.spec.constants import ProtocolConfig

GIB = 1 << 30
# DeepSeek-V3.2 FP8 sparse MLA row: 512 NoPE bytes + 16 scale bytes + 128 RoPE bytes.
DSV32_ROW_BYTES = 512 + 16 + 128


def refusal_line(exc: ValidationError) -> str:
    """A config's refusal in one line, in the validator's own words (for a CLI's exit 2
    and ``PlanRefused``): pydantic's report spans lines and names its error types."""
    return "; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())


def blocks_in(gib: float, block_bytes: int) -> int:
    """Whole blocks of ``block_bytes`` in ``gib`` GiB (rounded down): the one conversion."""
    return int(gib * GIB) // block_bytes


class HiSparseConfig(BaseModel):
    """Sizes of the host tier, the hot rows and the layers sharing an indexer.

    ``host_pool_gib`` is the usable host capacity per data-parallel replica; the
    realized pool is rounded down to whole host blocks (``host_blocks``). A caller that
    counts in blocks gives ``host_pool_blocks`` instead (exactly one of the two).
    With the engine's GPU block count this is the only input: the protocol config
    (``protocol``) and the pools (``pool_layout``) take their shapes from it.
    ``index_leaders[i]`` is the layer whose top-K layer ``i`` uses (itself for a
    layer that owns an indexer); followers hold no LRU state of their own.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    host_pool_gib: float | None = Field(default=None, gt=0)
    host_pool_blocks: int | None = Field(default=None, ge=1)
    block_tokens: int = Field(default=64, ge=1)
    row_bytes: int = Field(default=DSV32_ROW_BYTES, ge=1)
    top_k: int = Field(default=2048, ge=1)
    num_speculative_tokens: int = Field(default=0, ge=0)
    hot_rows: int | None = Field(default=None, description="per request; None = default")
    layers: int = Field(default=1, ge=1)
    # tensor-parallel ranks, one worker each; their host pools are private per rank or
    # one shared allocation that rank 0 writes (docs/tensor-parallel.md)
    tp_ranks: int = Field(default=1, ge=1)
    backing: Literal["private", "shared"] = "private"
    index_leaders: tuple[int, ...] | None = Field(
        default=None, description="per layer, the layer owning its indexer; None = all own"
    )
    # a GPU KV budget (GiB) instead of a block count: ``gpu_blocks`` derives the resident
    # blocks left once ``hot_slots`` requests' hot rows (every layer) are reserved
    gpu_kv_gib: float | None = Field(default=None, gt=0)
    hot_slots: int = Field(default=1, ge=1, description="requests holding hot rows at once")

    @model_validator(mode="after")
    def _check(self) -> HiSparseConfig:
        if (self.host_pool_gib is None) == (self.host_pool_blocks is None):
            raise ValueError("give exactly one of host_pool_gib and host_pool_blocks")
        if why := row_bytes_problem(self.row_bytes):
            raise ValueError(why)
        if self.hot_rows is not None and (
            why := hot_rows_problem(self.hot_rows, self.top_k, self.num_speculative_tokens)
        ):
            raise ValueError(f"{why} (default {self.default_hot_rows})")
        if self.host_blocks < 1:
            raise ValueError(
                f"host_pool_gib={self.host_pool_gib} holds no whole host block of "
                f"{self.host_block_bytes} bytes: raise host_pool_gib"
            )
        if self.gpu_kv_gib is not None and self.gpu_blocks < 1:
            raise ValueError(
                f"gpu_kv_gib={self.gpu_kv_gib} holds no whole GPU block once "
                f"{self.hot_slots} requests' hot rows ({self.hot_bytes / GIB:.2f} GiB each) "
                "are reserved: raise gpu_kv_gib or lower the running requests"
            )
        leaders = self.index_leaders
        if leaders is not None:
            if len(leaders) != self.layers:
                raise ValueError(
                    f"index_leaders has {len(leaders)} entries for {self.layers} layers: "
                    "give one leader per layer"
                )
            for i, lead in enumerate(leaders):
                if not 0 <= lead <= i or leaders[lead] != lead:
                    raise ValueError(
                        f"layer {i} follows layer {lead}, which is not an earlier (or the "
                        "same) layer owning its own indexer"
                    )
        return self

    @property
    def min_hot_rows(self) -> int:
        return min_hot_rows(self.top_k, self.num_speculative_tokens)

    @property
    def default_hot_rows(self) -> int:
        return default_hot_rows(self.top_k, self.num_speculative_tokens)

    @property
    def hot(self) -> int:
        """Hot rows per request actually used."""
        return self.hot_rows if self.hot_rows is not None else self.default_hot_rows

    @property
    def host_block_bytes(self) -> int:
        """Bytes of one host block across all layers."""
        return self.block_tokens * self.row_bytes * self.layers

    @property
    def host_blocks(self) -> int:
        """Realized host blocks: the budget rounded down to whole blocks."""
        if self.host_pool_blocks is not None:
            return self.host_pool_blocks
        assert self.host_pool_gib is not None  # exactly one is given (checked above)
        return blocks_in(self.host_pool_gib, self.host_block_bytes)

    @property
    def hot_bytes(self) -> int:
        """GPU bytes of one request's hot rows over every layer."""
        return self.hot * self.row_bytes * self.layers

    @property
    def gpu_blocks(self) -> int:
        """Resident GPU blocks of the ``gpu_kv_gib`` budget after the hot rows of
        ``hot_slots`` requests: the one conversion from a GPU budget (needs the budget)."""
        if self.gpu_kv_gib is None:
            raise ValueError("gpu_blocks needs gpu_kv_gib (a budget in GiB)")
        return (int(self.gpu_kv_gib * GIB) - self.hot_slots * self.hot_bytes) // (
            self.host_block_bytes
        )

    @property
    def gpu_blocks_disabled(self) -> int:
        """GPU blocks of the same budget with HiSparse disabled: no hot rows, every
        page resident."""
        if self.gpu_kv_gib is None:
            raise ValueError("gpu_blocks_disabled needs gpu_kv_gib (a budget in GiB)")
        return blocks_in(self.gpu_kv_gib, self.host_block_bytes)

    @property
    def host_pool_bytes(self) -> int:
        """Realized host bytes (host_blocks x host_block_bytes)."""
        return self.host_blocks * self.host_block_bytes

    @property
    def leaders(self) -> tuple[int, ...]:
        return self.index_leaders or tuple(range(self.layers))

    def is_follower(self, layer: int) -> bool:
        return self.leaders[layer] != layer

    def protocol(self, gpu_blocks: int) -> ProtocolConfig:
        """The protocol's constants for a device pool of ``gpu_blocks`` blocks."""
        return ProtocolConfig(
            gpu_blocks=gpu_blocks,
            host_pool_bytes=self.host_pool_bytes,
            host_block_bytes=self.host_block_bytes,
            ranks=self.tp_ranks,
            backing=self.backing,
            writer=0,
        )

    def pool_layout(self, gpu_blocks: int, slots: int) -> PoolLayout:
        """The pools of one layer's cache: ``gpu_blocks`` resident blocks, ``slots``
        requests holding hot rows at once."""
        return PoolLayout(
            gpu_blocks=gpu_blocks,
            host_blocks=self.host_blocks,
            block_tokens=self.block_tokens,
            row_bytes=self.row_bytes,
            hot_rows=self.hot,
            slots=slots,
        )
