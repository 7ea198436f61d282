"""Published model geometry: the one place row bytes, top-K, layers and index leaders live.

``--model NAME`` on ``hisparse simulate`` and ``hisparse plan`` reads these; nothing else
restates them. Sources (each figure is from the model's published config unless said):

- DeepSeek-V3.2 (its published ``config.json``; checked here against the configs that
  NVIDIA NeMo's ``DeepseekV32Config`` and Modular MAX's ``DeepseekV3_2Config`` publish):
  61 layers (``num_hidden_layers``), MLA ``kv_lora_rank`` 512 + ``qk_rope_head_dim`` 64,
  ``index_topk`` 2048, ``index_head_dim`` 128, every layer owns its indexer. The FP8
  sparse-MLA row the engines page is 656 bytes (512 FP8 NoPE bytes, 4 FP32 scales = 16
  bytes, 64 BF16 RoPE values = 128 bytes); the indexer key is 128 FP8 bytes plus one FP32
  scale = 132 bytes per token per indexer layer; the sparse path pages 64-token blocks.
- GLM-5.2 (``zai-org/GLM-5.2`` ``config.json`` ``indexer_types``, as llama.cpp's
  ``src/models/glm-dsa.cpp`` ``GLM_5_2_DEFAULT_INDEXER_TYPES`` quotes it; the Hugging
  Face file itself was not read here): 78 layers, a
  full indexer at layers 0, 1, 2 and every fourth layer from 6 to 74 (21 leaders); each
  other layer reuses the top-K of the last full layer before it. GLM-5 and GLM-5.1 have
  a full indexer on every layer (llama.cpp: "BC for GLM 5, 5.1 (full indexers)"), so
  GLM-5.2 is the index-sharing model here. ``kv_lora_rank`` 512, ``qk_rope_head_dim`` 64,
  ``index_head_dim`` 128 and ``index_topk`` 2048 are GLM-5's published figures (its
  technical report; NVIDIA NeMo's ``GlmMoeDsaConfig``); that GLM-5.2 keeps them, and that
  its engines use the same 656-byte FP8 row and 64-token blocks as DeepSeek-V3.2, is
  assumed, not confirmed from GLM-5.2's own config.
"""

from __future__ import annotations

from dataclasses import dataclass

# FP8 sparse MLA row: 512 NoPE bytes + 4 FP32 scales (16 bytes) + 64 BF16 RoPE (128 bytes)
MLA_FP8_ROW_BYTES = 512 + 16 + 128
# FP8 indexer key: 128 FP8 bytes + one FP32 scale, per token per indexer-owning layer
INDEXER_FP8_KEY_BYTES = 128 + 4


@dataclass(frozen=True)
class ModelGeometry:
    """What HiSparse sizing needs of a model: bytes per token, top-K, block, layers."""

    name: str
    layers: int
    row_bytes: int  # one token's sparse-MLA row in one layer
    top_k: int
    block_tokens: int
    index_leaders: tuple[int, ...]  # per layer, the layer whose top-K it uses
    indexer_key_bytes: int  # one token's indexer key in one indexer-owning layer
    source: str

    @property
    def indexers(self) -> int:
        """Layers that own an indexer (and so an LRU state and indexer keys)."""
        return sum(1 for i, lead in enumerate(self.index_leaders) if i == lead)

    @property
    def kv_bytes_per_token(self) -> int:
        """Sparse-MLA bytes of one token over every layer (what HiSparse pages)."""
        return self.row_bytes * self.layers

    @property
    def indexer_bytes_per_token(self) -> int:
        """Indexer-key bytes of one token (HiSparse leaves them on the GPU)."""
        return self.indexer_key_bytes * self.indexers

    @property
    def block_bytes(self) -> int:
        """One KV block over every layer (GPU and host blocks are the same size)."""
        return self.block_tokens * self.kv_bytes_per_token


def _glm52_leaders(layers: int) -> tuple[int, ...]:
    full = [i < 3 or (i - 2) % 4 == 0 for i in range(layers)]
    out: list[int] = []
    for i, own in enumerate(full):
        out.append(i if own else out[i - 1])
    return tuple(out)


MODELS: dict[str, ModelGeometry] = {
    "deepseek-v3.2": ModelGeometry(
        name="deepseek-v3.2", layers=61, row_bytes=MLA_FP8_ROW_BYTES, top_k=2048,
        block_tokens=64, index_leaders=tuple(range(61)),
        indexer_key_bytes=INDEXER_FP8_KEY_BYTES,
        source="DeepSeek-V3.2 config.json, as NeMo and MAX publish it",
    ),
    "glm-5.2": ModelGeometry(
        name="glm-5.2", layers=78, row_bytes=MLA_FP8_ROW_BYTES, top_k=2048,
        block_tokens=64, index_leaders=_glm52_leaders(78),
        indexer_key_bytes=INDEXER_FP8_KEY_BYTES,
        source="zai-org/GLM-5.2 config.json indexer_types (via llama.cpp glm-dsa.cpp); "
        "other dimensions GLM-5's, assumed unchanged",
    ),
}


def model(name: str) -> ModelGeometry:
    """The geometry of ``name``, or ``ValueError`` naming the known ones."""
    try:
        return MODELS[name]
    except KeyError:
        raise ValueError(
            f"unknown model {name!r}; choose one of {', '.join(MODELS)}"
        ) from None
