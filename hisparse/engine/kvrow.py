"""The 656-byte FP8 MLA cache row (DeepSeek-V3.2): written at decode, read in attention.

Bytes 0..511: the 512-value latent in FP8 (e4m3), one tile of 128 values per float32
scale; bytes 512..527: the four scales; bytes 528..655: the 64 RoPE values in bf16.
Attention dequantizes rows it has gathered, so every tier (resident, hot, host) holds
the same bytes and a row's meaning never depends on where it was read from.
"""

from __future__ import annotations

import torch

from hisparse.engine.config import LATENT_DIM, ROPE_DIM, ROW_BYTES, SCALE_TILES

FP8_MAX = 448.0
"""Largest finite float8_e4m3fn value."""
ROW_WORDS = ROW_BYTES // 8
"""A row as int64 words: caches are stored, written and gathered as 82 words per row
rather than 656 bytes (eight times fewer elements per copy)."""


def as_words(rows: torch.Tensor) -> torch.Tensor:
    """uint8 [..., 656] rows as int64 [..., 82] (the same bytes)."""
    return rows.view(torch.int64)


def gather_rows(words: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """uint8 [E, K, 656]: the rows ``rows`` [E, K] (-1: row 0, masked by attention)."""
    e, k = rows.shape
    return words.index_select(0, rows.clamp(min=0).view(-1)).view(torch.uint8).view(
        e, k, ROW_BYTES)


_TILE = LATENT_DIM // SCALE_TILES
_SCALES = slice(LATENT_DIM, LATENT_DIM + 4 * SCALE_TILES)
_ROPE = slice(LATENT_DIM + 4 * SCALE_TILES, ROW_BYTES)


def pack_rows(latent: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
    """uint8 [n, 656] rows from latent [n, 512] and RoPE [n, 64] values."""
    n = latent.shape[0]
    tiles = latent.float().view(n, SCALE_TILES, _TILE)
    scale = tiles.abs().amax(-1, keepdim=True).clamp(min=1e-8) / FP8_MAX
    fp8 = (tiles / scale).to(torch.float8_e4m3fn)
    out = torch.empty(n, ROW_BYTES, dtype=torch.uint8, device=latent.device)
    out[:, :LATENT_DIM] = fp8.view(n, LATENT_DIM).view(torch.uint8)
    out[:, _SCALES] = scale.view(n, SCALE_TILES).contiguous().view(torch.uint8)
    out[:, _ROPE] = rope.to(torch.bfloat16).contiguous().view(torch.uint8)
    return out


def unpack_rows(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Dequantized bf16 latent [..., 512] and RoPE [..., 64] of uint8 rows [..., 656]."""
    lead = rows.shape[:-1]
    fp8 = rows[..., :LATENT_DIM].view(torch.float8_e4m3fn).float()
    scale = rows[..., _SCALES].contiguous().view(torch.float32)
    latent = (fp8.view(*lead, SCALE_TILES, _TILE) * scale.unsqueeze(-1)).view(*lead, LATENT_DIM)
    rope = rows[..., _ROPE].contiguous().view(torch.bfloat16)
    assert rope.shape[-1] == ROPE_DIM
    return latent.to(torch.bfloat16), rope
