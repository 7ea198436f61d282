"""Sparse MLA decode attention over cache rows chosen by index: fused (Triton) or torch.

``Model.attention`` projects the queries (absorbed form: ``[E, H, 512 + 64]``) and the
output; between them is the part that costs per request: read each entry's ``K``
selected 656-byte rows, dequantize, score, softmax, and sum the latents. The torch path
(``latent_torch``) does it in about twenty kernels through fp32 temporaries of the
gathered rows; ``latent_fused`` does it in one (two when the top-K is split across
programs) reading the rows where they are. Both see the rows in the top-K's order, so two
caches holding the same bytes give the same bits either way (the engine's lockstep).
"""

from __future__ import annotations

from typing import Any

import torch

from hisparse.engine.backend import EngineUnavailable
from hisparse.engine.config import LATENT_DIM, ROPE_DIM, ROW_BYTES
from hisparse.engine.kvrow import gather_rows, unpack_rows
from hisparse.engine.tiling import FusedTiling, pick_tiling

MASKED = -1.0e30
"""Score of a padding position: finite, so a row with nothing to attend gives zeros."""
def latent_torch(q: torch.Tensor, words: torch.Tensor, rows: torch.Tensor,
                 sm_scale: float) -> torch.Tensor:
    """bf16 [E, H, 512]: softmax(q . kv / sqrt) . latent over rows ``rows`` [E, K] (-1:
    padding) of ``words`` (int64 [R, 82]); ``q`` bf16 [E, H, 576]."""
    gathered = gather_rows(words, rows)
    pad = rows < 0
    latent, rope = unpack_rows(gathered)
    kv = torch.cat([latent, rope], -1).masked_fill(pad.unsqueeze(-1), 0)  # [E, K, 576]
    scores = torch.bmm(q, kv.transpose(1, 2)).float()
    scores = (scores * sm_scale).masked_fill(pad.unsqueeze(1), MASKED)
    probs = torch.softmax(scores, -1).to(torch.bfloat16)  # [E, H, K]
    return torch.bmm(probs, kv[..., :LATENT_DIM])


_KERNELS: Any = None


def _kernels() -> Any:
    global _KERNELS
    if _KERNELS is None:
        try:
            import triton

            from hisparse.engine.attention_kernel import attend, combine
        except ImportError as exc:
            raise EngineUnavailable(f"fused sparse attention needs triton ({exc})") from exc
        _KERNELS = (triton, attend, combine)
    return _KERNELS


def _dot_type(triton: Any) -> Any:
    """bf16 operands for the tensor cores; float32 under Triton's CPU interpreter."""
    import os

    tl = triton.language
    return tl.float32 if os.environ.get("TRITON_INTERPRET") == "1" else tl.bfloat16


def fused_available(device: torch.device) -> bool:
    """Whether ``latent_fused`` can run on ``device`` (CUDA with triton importable)."""
    if device.type != "cuda":
        return False
    try:
        _kernels()
    except EngineUnavailable:
        return False
    return True


def latent_fused(q: torch.Tensor, words: torch.Tensor, rows: torch.Tensor, sm_scale: float,
                 tiling: FusedTiling | None = None) -> torch.Tensor:
    """``latent_torch`` in one kernel (plus a merge when the top-K is split), reading each
    row from ``words`` by index. Launch shapes depend only on ``q`` and ``rows``'s
    shapes, so a captured graph replays it with new inputs. ``tiling``: by default the
    measured best for this many entries (``tiling.pick_tiling``)."""
    triton, attend, combine = _kernels()
    e, h, d = q.shape
    if d != LATENT_DIM + ROPE_DIM:
        raise ValueError(f"queries must be [E, H, {LATENT_DIM + ROPE_DIM}], got {tuple(q.shape)}")
    k = rows.shape[1]
    assert LATENT_DIM == 4 * 128 and ROW_BYTES == 656, "the kernel reads V3.2's row format"
    raw = words.view(torch.uint8)
    if raw.dim() != 2 or raw.shape[1] != ROW_BYTES or not raw.is_contiguous():
        raise ValueError(f"rows must be a contiguous [R, {ROW_BYTES}] byte view")
    f32, bf16 = raw.view(torch.float32), raw.view(torch.bfloat16)
    q = q.contiguous()
    tiling = tiling if tiling is not None else pick_tiling(e)
    rows = rows.contiguous()
    s = tiling.splits(e, h, k)
    ks = -(-k // s)
    ks = -(-ks // tiling.rows) * tiling.rows
    s = -(-k // ks)
    out = torch.empty((e, h, LATENT_DIM), dtype=torch.bfloat16, device=q.device)
    if s > 1:
        part = torch.empty((e, s, h, LATENT_DIM), dtype=torch.float32, device=q.device)
        ml = torch.empty((e, s, h, 2), dtype=torch.float32, device=q.device)
    else:
        part = ml = torch.empty(1, dtype=torch.float32, device=q.device)  # unused
    grid = (e, triton.cdiv(h, tiling.heads), s)
    attend[grid](q, raw, bf16, f32, rows, out, part, ml, h, k, ks, float(sm_scale),
                 BH=tiling.heads, BK=tiling.rows, DR=ROPE_DIM, ROW=ROW_BYTES,
                 MASKED=MASKED, SPLIT=s > 1, DOT=_dot_type(triton), num_warps=tiling.warps,
                 num_stages=tiling.stages)
    if s > 1:
        combine[(e, h)](part, ml, out, h, s, BS=triton.next_power_of_2(s), DL=LATENT_DIM,
                        num_warps=4)
    return out
