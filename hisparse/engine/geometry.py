"""DeepSeek-V3.2's per-layer geometry for the engine, with V3.2's or GLM-5.2's index leaders.

Every figure that is V3.2's comes from its published config (``hisparse.models`` cites
it): hidden 7168, 128 heads of 128 NoPE + 64 RoPE dims, values 128, query rank 1536, the
512 + 64 latent row, an indexer of 64 heads x 128 dims with FP8 keys, top-K 2048, 64-token
blocks. What is not V3.2's, and why:

- the MoE is one dense SwiGLU MLP of the routed experts' *active* width (8 routed + 1
  shared expert of 2048 = 18432; V3.2's three dense layers have that width too), so a
  step reads the weights one token's MoE path reads, not the 256 experts a large batch
  would touch;
- weights are bf16 (V3.2 ships FP8 weights): a step's fixed weight read is about twice
  the real model's per layer;
- ``layers`` layers, not 61, and a vocabulary of 16384 (129280 x 8 / 61, rounded to a power
  of two), so that the output head stands to the layers about as it does in V3.2.
"""

from __future__ import annotations

from hisparse.engine.config import EngineConfigError, ModelShape
from hisparse.models import MODELS

V32_MLP_ACTIVE = (8 + 1) * 2048
"""V3.2's active MoE width per token: 8 routed experts and 1 shared, 2048 wide each."""

SHARING = ("v3.2", "glm-5.2")
"""``v3.2``: every layer owns its indexer. ``glm-5.2``: GLM-5.2's ``indexer_types``
over the first ``layers`` layers (full at 0, 1, 2, 6, 10, ...; others replay the last)."""


def leaders(layers: int, sharing: str) -> tuple[int, ...]:
    """Each layer's index leader under ``sharing``."""
    if sharing == "v3.2":
        return tuple(range(layers))
    if sharing == "glm-5.2":
        pattern = MODELS["glm-5.2"].index_leaders
        if layers > len(pattern):
            raise EngineConfigError(f"GLM-5.2 has {len(pattern)} layers, asked for {layers}")
        return pattern[:layers]
    raise EngineConfigError(f"sharing must be one of {', '.join(SHARING)}, got {sharing!r}")


def v32_model(layers: int = 8, sharing: str = "v3.2", *, vocab: int = 16384,
              seed: int = 0) -> ModelShape:
    """DeepSeek-V3.2's layer geometry, ``layers`` deep, index leaders by ``sharing``."""
    return ModelShape(
        layers=layers, index_leaders=leaders(layers, sharing), hidden=7168, heads=128,
        nope_dim=128, v_dim=128, mlp_dim=V32_MLP_ACTIVE, vocab=vocab, index_heads=64,
        index_dim=128, q_rank=1536, index_fp8=True, seed=seed,
    )
