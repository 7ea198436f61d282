"""HiSparseConfig: the one configuration object an engine builds.

Invalid values fail at construction with a message that says what to change,
so nothing downstream (pools, kernels, the coordinator) re-validates shapes.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

GIB = 1 << 30
# DeepSeek-V3.2 FP8 sparse MLA row: 512 NoPE bytes + 16 scale bytes + 128 RoPE bytes.
DSV32_ROW_BYTES = 512 + 16 + 128


class HiSparseConfig(BaseModel):
    """Sizes of the host tier, the hot rows and the layers sharing an indexer.

    ``host_pool_gib`` is the usable host capacity per data-parallel replica; the
    realized pool is rounded down to whole host blocks (``host_blocks``).
    ``index_leaders[i]`` is the layer whose top-K layer ``i`` uses (itself for a
    layer that owns an indexer); followers hold no LRU state of their own.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    host_pool_gib: float = Field(gt=0)
    block_tokens: int = Field(default=64, ge=1)
    row_bytes: int = Field(default=DSV32_ROW_BYTES, ge=1)
    top_k: int = Field(default=2048, ge=1)
    num_speculative_tokens: int = Field(default=0, ge=0)
    hot_rows: int | None = Field(default=None, description="per request; None = default")
    layers: int = Field(default=1, ge=1)
    index_leaders: tuple[int, ...] | None = Field(
        default=None, description="per layer, the layer owning its indexer; None = all own"
    )

    @model_validator(mode="after")
    def _check(self) -> HiSparseConfig:
        if self.row_bytes % 16:
            raise ValueError(
                f"row_bytes={self.row_bytes} is not a multiple of 16: pad rows to 16-byte "
                "alignment (DeepSeek-V3.2 FP8 MLA uses 656)"
            )
        if self.hot_rows is not None and self.hot_rows < self.min_hot_rows:
            raise ValueError(
                f"hot_rows={self.hot_rows} is below {self.min_hot_rows} = "
                f"(num_speculative_tokens + 1) x top_k: one decode step could not hold its "
                f"top-K; raise hot_rows to at least {self.min_hot_rows} "
                f"(default {self.default_hot_rows})"
            )
        if self.host_blocks < 1:
            raise ValueError(
                f"host_pool_gib={self.host_pool_gib} holds no whole host block of "
                f"{self.host_block_bytes} bytes: raise host_pool_gib"
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
        return (self.num_speculative_tokens + 1) * self.top_k

    @property
    def default_hot_rows(self) -> int:
        """2 x top_k; (num_speculative_tokens + 2) x top_k with speculation."""
        return (self.num_speculative_tokens + 2) * self.top_k

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
        return int(self.host_pool_gib * GIB) // self.host_block_bytes

    @property
    def host_pool_bytes(self) -> int:
        """Realized host bytes (host_blocks x host_block_bytes)."""
        return self.host_blocks * self.host_block_bytes

    @property
    def leaders(self) -> tuple[int, ...]:
        return self.index_leaders or tuple(range(self.layers))

    def is_follower(self, layer: int) -> bool:
        return self.leaders[layer] != layer
