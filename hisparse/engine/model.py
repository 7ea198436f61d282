"""A small DeepSeek-V3.2-shaped decoder with random weights (torch).

Per layer: RMSNorm, MLA attention in the absorbed form (queries projected into the
512-wide latent space, scores against the dequantized cache row, values read back out
of the latent), a SwiGLU MLP; a lightning-style indexer (ReLU-gated multi-head dot
products, RoPE on the first 64 dims) on the layers that own one. Weights are drawn
from a seeded generator, so two engines built from one ``ModelShape`` are identical.

Prefill here is token-local: a prompt position's cache row and index key are the layer's
projections of that token's embedding at that position (no attention over the prompt).
The decode loop is what this model exists to exercise; token-local prefill keeps the
property prefix caching relies on (a page's bytes follow from its tokens and positions)
at a cost that allows 128k-token prompts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from hisparse.engine.attention import fused_available, latent_fused, latent_torch
from hisparse.engine.backend import EngineUnavailable
from hisparse.engine.config import LATENT_DIM, ROPE_DIM, ModelShape
from hisparse.engine.indexer import quantize_queries, scores_fused
from hisparse.engine.kvrow import pack_rows
from hisparse.engine.tiling import FusedTiling

ROPE_BASE = 10000.0


@dataclass(frozen=True, eq=False)
class LayerWeights:
    attn_norm: torch.Tensor  # [D]
    wq: torch.Tensor  # [Q, H * (nope + rope)]; Q = q_rank, or D without one
    wq_a: torch.Tensor | None  # [D, q_rank] (q_rank > 0 only)
    q_norm: torch.Tensor | None  # [q_rank]
    wdkv: torch.Tensor  # [D, 512]
    wkr: torch.Tensor  # [D, 64]
    wuk: torch.Tensor  # [H, nope, 512]
    wuv: torch.Tensor  # [H, 512, v]
    wo: torch.Tensor  # [H * v, D]
    mlp_norm: torch.Tensor  # [D]
    wgate: torch.Tensor  # [D, F]
    wup: torch.Tensor  # [D, F]
    wdown: torch.Tensor  # [F, D]
    wiq: torch.Tensor | None  # [Q, Hi * Di] (indexer owners only)
    wik: torch.Tensor | None  # [D, Di]
    wiw: torch.Tensor | None  # [D, Hi]


class Model:
    """Weights on one device and the per-layer functions the engine composes."""

    def __init__(self, shape: ModelShape, device: torch.device | str, *,
                 attention: str = "auto", tiling: FusedTiling | None = None,
                 scan_tiles: int | None = None) -> None:
        if attention not in ("auto", "fused", "torch"):
            raise ValueError(f"attention must be 'auto', 'fused' or 'torch', got {attention!r}")
        self.shape = shape
        self.device = torch.device(device)
        if attention == "fused" and not fused_available(self.device):
            raise EngineUnavailable("fused sparse attention needs a CUDA device and triton")
        self.fused_attention = attention == "fused" or (
            attention == "auto" and fused_available(self.device))
        """Attention through ``latent_fused`` (else the torch path): "auto" takes the
        fused kernel wherever it can run, so both engines of a lockstep use the same."""
        self.tiling = tiling  # None: tiling.pick_tiling by the launch's entries
        self.scan_tiles = scan_tiles  # key tiles per program of the FP8 scan (None: default)
        gen = torch.Generator(device=self.device).manual_seed(shape.seed)
        s = shape

        def w(*size: int, fan_in: int) -> torch.Tensor:
            t = torch.randn(*size, generator=gen, device=self.device, dtype=torch.float32)
            return (t / math.sqrt(fan_in)).to(torch.bfloat16)

        def ones() -> torch.Tensor:
            return torch.ones(s.hidden, device=self.device, dtype=torch.bfloat16)

        d, h = s.hidden, s.heads
        qin = s.q_rank or d
        self.embed = w(s.vocab, d, fan_in=1)
        self.layers: list[LayerWeights] = []
        for i in range(s.layers):
            owner = s.index_leaders[i] == i
            wq_a = w(d, s.q_rank, fan_in=d) if s.q_rank else None
            self.layers.append(LayerWeights(
                attn_norm=ones(),
                wq=w(qin, h * (s.nope_dim + ROPE_DIM), fan_in=qin),
                wq_a=wq_a,
                q_norm=(torch.ones(s.q_rank, device=self.device, dtype=torch.bfloat16)
                        if s.q_rank else None),
                wdkv=w(d, LATENT_DIM, fan_in=d),
                wkr=w(d, ROPE_DIM, fan_in=d),
                wuk=w(h, s.nope_dim, LATENT_DIM, fan_in=s.nope_dim),
                wuv=w(h, LATENT_DIM, s.v_dim, fan_in=LATENT_DIM),
                wo=w(h * s.v_dim, d, fan_in=h * s.v_dim),
                mlp_norm=ones(),
                wgate=w(d, s.mlp_dim, fan_in=d),
                wup=w(d, s.mlp_dim, fan_in=d),
                wdown=w(s.mlp_dim, d, fan_in=s.mlp_dim),
                wiq=w(qin, s.index_heads * s.index_dim, fan_in=qin) if owner else None,
                wik=w(d, s.index_dim, fan_in=d) if owner else None,
                wiw=w(d, s.index_heads, fan_in=d) if owner else None,
            ))
        self.final_norm = ones()
        self.lm_head = w(d, s.vocab, fan_in=d)
        self.softmax_scale = 1.0 / math.sqrt(s.nope_dim + ROPE_DIM)

    # -- pieces ---------------------------------------------------------------------

    @staticmethod
    def rmsnorm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)
        return xf.to(torch.bfloat16) * weight

    @staticmethod
    def rope(x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """Rotate the last dim of ``x`` (rotate-half) by positions ``pos`` (x.shape[:-1])."""
        half = x.shape[-1] // 2
        freqs = ROPE_BASE ** (
            -torch.arange(half, device=x.device, dtype=torch.float32) / half
        )
        ang = pos.unsqueeze(-1).float() * freqs
        cos, sin = ang.cos(), ang.sin()
        x1, x2 = x.float()[..., :half], x.float()[..., half:]
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).to(torch.bfloat16)

    def _index_rope(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.rope(x[..., :ROPE_DIM], pos), x[..., ROPE_DIM:]], -1)

    # -- cache writers ----------------------------------------------------------------

    def kv_rows(self, layer: int, h: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """uint8 [n, 656] cache rows of normed hidden states ``h`` [n, D] at ``pos`` [n]."""
        lw = self.layers[layer]
        return pack_rows(h @ lw.wdkv, self.rope(h @ lw.wkr, pos))

    def index_keys(self, layer: int, h: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """bf16 [n, Di] indexer keys (an indexer owner's layer only)."""
        wik = self.layers[layer].wik
        assert wik is not None
        return self._index_rope(h @ wik, pos)

    def _prefill_hidden(self, layer: int, tokens: torch.Tensor) -> torch.Tensor:
        return self.rmsnorm(self.embed[tokens], self.layers[layer].attn_norm)

    def prefill_rows(self, layer: int, tokens: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """Token-local prefill: the cache rows of ``tokens`` at ``pos``."""
        return self.kv_rows(layer, self._prefill_hidden(layer, tokens), pos)

    def prefill_keys(self, layer: int, tokens: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """Token-local prefill: the index keys of ``tokens`` at ``pos`` (indexer owners)."""
        return self.index_keys(layer, self._prefill_hidden(layer, tokens), pos)

    # -- decode -------------------------------------------------------------------------

    def query_input(self, layer: int, h: torch.Tensor) -> torch.Tensor:
        """What the attention and indexer queries project: the normed query latent
        ``norm(h @ wq_a)`` with a query rank, else ``h`` itself."""
        lw = self.layers[layer]
        if lw.wq_a is None or lw.q_norm is None:
            return h
        return self.rmsnorm(h @ lw.wq_a, lw.q_norm)

    def index_scores(
        self, layer: int, h: torch.Tensor, pos: torch.Tensor, keys: Any,
        per_slot: int, hq: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """float32 [E, T] indexer scores of entries ``h`` [E, D] over each entry's slot's
        keys (bf16 [N, T, Di], or FP8 values and scales ``(uint8 [N, T, Di], [N, T])``;
        E = N * per_slot), -inf past each query position. ``hq``: ``query_input``."""
        lw, s = self.layers[layer], self.shape
        assert lw.wiq is not None and lw.wiw is not None
        hq = self.query_input(layer, h) if hq is None else hq
        e = h.shape[0]
        di = s.index_dim
        q = self._index_rope((hq @ lw.wiq).view(e, s.index_heads, di),
                             pos.unsqueeze(-1).expand(e, s.index_heads))
        wts = (h @ lw.wiw).float() * (s.index_heads ** -0.5)  # [E, Hi]
        if s.index_fp8:  # FP8 keys and FP8 queries, both dots' operands on the tensor cores
            fp8, scale = keys
            q8, wq = quantize_queries(q, wts)
            return scores_fused(q8, wq, fp8, scale, pos, per_slot, tiles=self.scan_tiles)
        n, t, _ = keys.shape
        logits = torch.bmm(q.view(n, per_slot * s.index_heads, di), keys.transpose(1, 2))
        gated = torch.relu(logits).float().view(e, s.index_heads, t)
        scores = torch.bmm(wts.unsqueeze(1), gated).squeeze(1)  # [E, T]
        future = torch.arange(t, device=h.device).unsqueeze(0) > pos.unsqueeze(1)
        return scores.masked_fill(future, float("-inf"))

    def attention(
        self, layer: int, h: torch.Tensor, pos: torch.Tensor, words: torch.Tensor,
        rows: torch.Tensor, hq: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Sparse MLA over cache rows ``rows`` [E, K] of ``words`` (int64 [R, 82]; -1:
        padding). Returns the attention output [E, D]."""
        lw, s = self.layers[layer], self.shape
        e, nh = h.shape[0], s.heads
        hq = self.query_input(layer, h) if hq is None else hq
        q = (hq @ lw.wq).view(e, nh, s.nope_dim + ROPE_DIM)
        q_nope, q_rope = q[..., : s.nope_dim], q[..., s.nope_dim :]
        q_rope = self.rope(q_rope, pos.unsqueeze(-1).expand(e, nh))
        q_lat = torch.bmm(q_nope.transpose(0, 1), lw.wuk).transpose(0, 1)  # [E, H, 512]
        qcat = torch.cat([q_lat, q_rope], -1)  # [E, H, 576]
        if self.fused_attention:
            out_lat = latent_fused(qcat, words, rows, self.softmax_scale, self.tiling)
        else:
            out_lat = latent_torch(qcat, words, rows, self.softmax_scale)
        out = torch.bmm(out_lat.transpose(0, 1), lw.wuv).transpose(0, 1)  # [E, H, v]
        return out.reshape(e, nh * s.v_dim) @ lw.wo

    def mlp(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        lw = self.layers[layer]
        h = self.rmsnorm(x, lw.mlp_norm)
        return (torch.nn.functional.silu(h @ lw.wgate) * (h @ lw.wup)) @ lw.wdown

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return (self.rmsnorm(x, self.final_norm) @ self.lm_head).float()
