"""DeepSeek-V3.2's FP8 indexer keys, and the fused scan that scores them.

A key is ``index_dim`` FP8 (e4m3) values and one float32 scale per token, stored as two
arrays (values, scales), 132 bytes a token at 128 dims, as V3.2's indexer cache holds
them. The score of entry ``e`` at position ``t`` is
``scale[t] * sum_h w[e, h] * relu(q[e, h] . k[t])``: the scale is positive, so it moves
out of the ReLU, and the scan reads each key's 132 bytes once (a Triton kernel on the
tensor cores, one program per entry and 128 positions). ``scores_reference`` is the same
function in plain torch (float32, unfused), for tests.
"""

from __future__ import annotations

from typing import Any

import torch

from hisparse.engine.backend import EngineUnavailable
from hisparse.engine.kvrow import FP8_MAX
from hisparse.engine.tiling import SCAN_TILES, SCAN_WARPS

BLOCK_T = 128
"""Positions per tile of the fused scan."""



def quantize_keys(keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """uint8 [n, Di] FP8 bits and float32 [n] scales of bf16 keys [n, Di]."""
    kf = keys.float()
    scale = kf.abs().amax(-1).clamp(min=1e-8) / FP8_MAX
    fp8 = (kf / scale.unsqueeze(-1)).to(torch.float8_e4m3fn)
    return fp8.view(torch.uint8), scale


def quantize_queries(q: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """FP8 bits uint8 [E, Hi, Di] of queries ``q`` [E, Hi, Di], one scale per head, and
    the head weights ``w`` [E, Hi] with those scales folded in: a scale is positive, so
    ``w * relu(s * q8 . k) == (w * s) * relu(q8 . k)`` (V3.2's indexer does the same)."""
    e, hi, di = q.shape
    bits, scale = quantize_keys(q.reshape(e * hi, di))
    return bits.view(e, hi, di), w.float() * scale.view(e, hi)


def scores_reference(
    q: torch.Tensor, w: torch.Tensor, fp8: torch.Tensor, scale: torch.Tensor,
    pos: torch.Tensor, per_slot: int,
) -> torch.Tensor:
    """float32 [E, T]: queries ``q`` bf16 [E, Hi, Di] (or their FP8 bits, uint8), head
    weights ``w`` float32 [E, Hi], keys ``fp8`` uint8 [N, T, Di] and ``scale`` [N, T] of
    each entry's slot, -inf past each entry's position ``pos`` [E]."""
    e, hi, di = q.shape
    n, t, _ = fp8.shape
    k = fp8.view(torch.float8_e4m3fn).float()
    qf = q.view(torch.float8_e4m3fn).float() if q.dtype == torch.uint8 else q.float()
    logits = torch.bmm(qf.view(n, per_slot * hi, di), k.transpose(1, 2))
    gated = torch.relu(logits).view(e, hi, t)
    scores = torch.bmm(w.float().unsqueeze(1), gated).squeeze(1)
    scores = scores * scale.repeat_interleave(per_slot, 0)
    future = torch.arange(t, device=q.device).unsqueeze(0) > pos.unsqueeze(1)
    return scores.masked_fill(future, float("-inf"))


_KERNEL: Any = None


def _kernel() -> Any:
    """(triton, the scan kernel), imported once; ``EngineUnavailable`` without triton."""
    global _KERNEL
    if _KERNEL is None:
        try:
            import triton

            from hisparse.engine.indexer_scan import scan
        except ImportError as exc:
            raise EngineUnavailable(f"the FP8 indexer scan needs triton ({exc})") from exc
        _KERNEL = (triton, scan)
    return _KERNEL


def scores_fused(
    q: torch.Tensor, w: torch.Tensor, fp8: torch.Tensor, scale: torch.Tensor,
    pos: torch.Tensor, per_slot: int, tiles: int | None = None, warps: int | None = None,
) -> torch.Tensor:
    """``scores_reference`` in one kernel launch (in the current torch stream)."""
    triton, scan = _kernel()
    e, hi, di = q.shape
    t = fp8.shape[1]
    tiles = SCAN_TILES if tiles is None else tiles
    out = torch.empty((e, t), dtype=torch.float32, device=q.device)
    grid = (e, triton.cdiv(t, BLOCK_T * tiles))
    scan[grid](q.contiguous(), w.float().contiguous(), fp8, scale, pos, out, t, per_slot,
               HI=hi, DI=di, BT=BLOCK_T, TILES=tiles, Q8=q.dtype == torch.uint8,
               num_warps=SCAN_WARPS if warps is None else warps)
    return out
