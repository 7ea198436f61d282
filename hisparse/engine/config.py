"""Shapes of the decoder and of its decode batch, checked once at construction."""

from __future__ import annotations

from dataclasses import dataclass

from hisparse.config import DSV32_ROW_BYTES

LATENT_DIM = 512
"""FP8 latent values per KV row (DeepSeek-V3.2 MLA)."""
SCALE_TILES = 4
"""One float32 scale per 128 latent values."""
ROPE_DIM = 64
"""bf16 RoPE values per KV row."""
ROW_BYTES = LATENT_DIM + 4 * SCALE_TILES + 2 * ROPE_DIM
assert ROW_BYTES == DSV32_ROW_BYTES  # 656: one place states the format, this checks it


class EngineConfigError(ValueError):
    """A model or batch shape the engine cannot run; says what to change."""


@dataclass(frozen=True)
class ModelShape:
    """The decoder: MLA attention over a 656-byte FP8 cache, a lightning-style indexer
    on the layers that own one (``index_leaders[i] == i``), a SwiGLU MLP."""

    layers: int = 4
    index_leaders: tuple[int, ...] = (0, 0, 2, 2)
    hidden: int = 2048
    heads: int = 16
    nope_dim: int = 128
    v_dim: int = 128
    mlp_dim: int = 4096
    vocab: int = 32768
    index_heads: int = 8
    index_dim: int = 128
    q_rank: int = 0
    """Query low-rank width (DeepSeek-V3.2: 1536): queries are ``norm(h @ wq_a) @ wq_b``
    and the indexer's queries come from the same latent; 0 projects ``h`` directly."""
    index_fp8: bool = False
    """Indexer keys stored as DeepSeek-V3.2 stores them: ``index_dim`` FP8 values and one
    float32 scale per token (132 bytes at 128), scored by a fused kernel; False: bf16."""
    seed: int = 0

    def __post_init__(self) -> None:
        if len(self.index_leaders) != self.layers:
            raise EngineConfigError(
                f"index_leaders has {len(self.index_leaders)} entries for {self.layers} layers"
            )
        for i, lead in enumerate(self.index_leaders):
            if not 0 <= lead <= i or self.index_leaders[lead] != lead:
                raise EngineConfigError(
                    f"layer {i} follows layer {lead}, which is not an earlier layer owning "
                    "its own indexer"
                )
        if self.q_rank < 0:
            raise EngineConfigError(f"q_rank must be >= 0, got {self.q_rank}")
        for name in ("hidden", "heads", "nope_dim", "v_dim", "mlp_dim", "vocab",
                     "index_heads"):
            if getattr(self, name) < 1:
                raise EngineConfigError(f"{name} must be at least 1")
        if self.index_dim < ROPE_DIM or self.index_dim % 2:
            raise EngineConfigError(
                f"index_dim must be even and at least {ROPE_DIM} (its first {ROPE_DIM} "
                f"dims carry RoPE), got {self.index_dim}"
            )

    @property
    def leaders(self) -> list[int]:
        return sorted(set(self.index_leaders))

    def kv_bytes_per_token(self) -> int:
        """All-resident HBM per token: a 656-byte row per layer, index keys per leader."""
        return self.layers * ROW_BYTES + len(self.leaders) * self.index_key_bytes

    @property
    def index_key_bytes(self) -> int:
        """One token's indexer key: FP8 values plus a float32 scale, or bf16 values."""
        return self.index_dim + 4 if self.index_fp8 else 2 * self.index_dim

    def weight_bytes(self) -> int:
        """bf16 weight bytes the decode step reads (every layer, embedding row gathers
        aside, plus the output head): the step's fixed cost."""
        d, h, qk = self.hidden, self.heads, self.nope_dim + ROPE_DIM
        q = d * self.q_rank + self.q_rank * h * qk if self.q_rank else d * h * qk
        attn = q + d * (LATENT_DIM + ROPE_DIM) + 2 * h * self.nope_dim * LATENT_DIM
        attn += h * self.v_dim * d
        mlp = 3 * d * self.mlp_dim
        index_in = self.q_rank or d
        index = index_in * self.index_heads * self.index_dim + d * (self.index_dim
                                                                     + self.index_heads)
        per_layer = attn + mlp
        return 2 * (self.layers * per_layer + len(self.leaders) * index + d * self.vocab)


@dataclass(frozen=True)
class EngineShape:
    """The decode batch: ``slots`` requests, each with ``num_speculative_tokens + 1`` query tokens
    per step (one verification entry each), attending to ``top_k`` of at most
    ``max_context`` positions."""

    slots: int
    max_context: int
    top_k: int = 2048
    num_speculative_tokens: int = 0
    block_tokens: int = 64

    def __post_init__(self) -> None:
        if self.slots < 1:
            raise EngineConfigError(f"slots must be at least 1, got {self.slots}")
        if self.num_speculative_tokens < 0:
            raise EngineConfigError(
                f"num_speculative_tokens must be >= 0, got {self.num_speculative_tokens}"
            )
        if self.block_tokens < 1:
            raise EngineConfigError(f"block_tokens must be >= 1, got {self.block_tokens}")
        if not 1 <= self.top_k <= self.max_context:
            raise EngineConfigError(
                f"top_k must be in 1..max_context ({self.max_context}), got {self.top_k}"
            )
        if self.max_context % self.block_tokens:
            raise EngineConfigError(
                f"max_context {self.max_context} is not a multiple of block_tokens "
                f"{self.block_tokens}"
            )

    @property
    def per_slot(self) -> int:
        """Verification entries per request per step."""
        return self.num_speculative_tokens + 1

    @property
    def entries(self) -> int:
        return self.slots * self.per_slot

    @property
    def max_pages(self) -> int:
        return self.max_context // self.block_tokens
