"""Sparse MLA decode attention as Triton kernels (imported only where triton is).

No ``from __future__ import annotations`` and no annotations but ``tl.constexpr``: Triton
reads a kernel's annotations itself. ``attend`` is split-K flash decoding: one program
takes ``BH`` heads of one entry over ``KS`` of its top-K positions, reads each selected
656-byte row straight from the cache (no gathered copy) and keeps an online softmax;
with one split it writes the output, else its partial sums, which ``combine`` merges.

The latent is four tiles of 128 FP8 values, one float32 scale each (``kvrow``). A tile's
scale multiplies the tile's dot products, not its 128 values: the scores are
``sum_t s_t * (q_t . k8_t)`` and the output tile ``t`` is ``(p * s_t) . k8_t``, so the
tensor cores take the FP8 values as they are (converted to bf16, exactly) and no
per-value scale is ever loaded or multiplied. Padding (row index -1) scores ``MASKED``
and contributes zeros. ``DOT`` is the dots' operand type: bf16 on the GPU; float32 (the
same values) under ``TRITON_INTERPRET=1``, whose CPU dots cannot take bf16.
"""

import triton
import triton.language as tl


@triton.jit
def _tile(u8_ptr, f32_ptr, base, r, pad, t: tl.constexpr, ROW: tl.constexpr,  # type: ignore[no-untyped-def]
          DOT: tl.constexpr):
    """FP8 tile ``t`` of the rows at ``base`` as [BK, 128] ``DOT`` values, and its scale
    per row (both zero for padding, whatever bytes a padded row holds)."""
    d = tl.arange(0, 128)
    k8 = tl.load(u8_ptr + base[:, None] + t * 128 + d[None, :])
    k = k8.to(tl.float8e4nv, bitcast=True).to(tl.bfloat16)
    k = tl.where(pad[:, None], 0.0, k).to(tl.bfloat16).to(DOT)
    s = tl.load(f32_ptr + r * (ROW // 4) + 128 + t)
    return k, tl.where(pad, 0.0, s)


@triton.jit
def attend(q_ptr, u8_ptr, bf16_ptr, f32_ptr, idx_ptr, out_ptr, part_ptr, ml_ptr,  # type: ignore[no-untyped-def]
           H, K, KS, sm_scale,
           BH: tl.constexpr, BK: tl.constexpr, DR: tl.constexpr, ROW: tl.constexpr,
           MASKED: tl.constexpr, SPLIT: tl.constexpr, DOT: tl.constexpr):
    e = tl.program_id(0).to(tl.int64)
    hb = tl.program_id(1)
    s = tl.program_id(2)
    nsplit = tl.num_programs(2)
    heads = hb * BH + tl.arange(0, BH)
    hlive = heads < H
    d = tl.arange(0, 128)
    dr = tl.arange(0, DR)
    qrow = (e * H + heads.to(tl.int64)) * (512 + DR)
    qm = hlive[:, None]
    q0 = tl.load(q_ptr + qrow[:, None] + d[None, :], mask=qm, other=0.0).to(DOT)
    q1 = tl.load(q_ptr + qrow[:, None] + 128 + d[None, :], mask=qm, other=0.0).to(DOT)
    q2 = tl.load(q_ptr + qrow[:, None] + 256 + d[None, :], mask=qm, other=0.0).to(DOT)
    q3 = tl.load(q_ptr + qrow[:, None] + 384 + d[None, :], mask=qm, other=0.0).to(DOT)
    qr = tl.load(q_ptr + qrow[:, None] + 512 + dr[None, :], mask=qm, other=0.0).to(DOT)
    m_i = tl.full((BH,), MASKED, tl.float32)
    l_i = tl.zeros((BH,), tl.float32)
    a0 = tl.zeros((BH, 128), tl.float32)
    a1 = tl.zeros((BH, 128), tl.float32)
    a2 = tl.zeros((BH, 128), tl.float32)
    a3 = tl.zeros((BH, 128), tl.float32)
    lo = s * KS
    hi = tl.minimum(lo + KS, K)
    for start in range(lo, hi, BK):
        k = start + tl.arange(0, BK)
        kin = k < hi
        r = tl.load(idx_ptr + e * K + k, mask=kin, other=-1).to(tl.int64)
        pad = r < 0
        r = tl.where(pad, 0, r)
        base = tl.multiple_of(r * ROW, 16)
        k0, s0 = _tile(u8_ptr, f32_ptr, base, r, pad, 0, ROW, DOT)
        k1, s1 = _tile(u8_ptr, f32_ptr, base, r, pad, 1, ROW, DOT)
        k2, s2 = _tile(u8_ptr, f32_ptr, base, r, pad, 2, ROW, DOT)
        k3, s3 = _tile(u8_ptr, f32_ptr, base, r, pad, 3, ROW, DOT)
        rope = tl.load(bf16_ptr + (r * (ROW // 2) + (ROW // 2 - DR))[:, None] + dr[None, :])
        rope = tl.where(pad[:, None], 0.0, rope).to(tl.bfloat16).to(DOT)
        sc = tl.dot(q0, tl.trans(k0)) * s0[None, :]
        sc += tl.dot(q1, tl.trans(k1)) * s1[None, :]
        sc += tl.dot(q2, tl.trans(k2)) * s2[None, :]
        sc += tl.dot(q3, tl.trans(k3)) * s3[None, :]
        sc += tl.dot(qr, tl.trans(rope))  # [BH, BK]
        sc = tl.where(pad[None, :], MASKED, sc * sm_scale)
        m_new = tl.maximum(m_i, tl.max(sc, 1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(sc - m_new[:, None])
        p = tl.where(kin[None, :], p, 0.0)
        l_i = l_i * alpha + tl.sum(p, 1)
        a0 = a0 * alpha[:, None] + tl.dot((p * s0[None, :]).to(tl.bfloat16).to(DOT), k0)
        a1 = a1 * alpha[:, None] + tl.dot((p * s1[None, :]).to(tl.bfloat16).to(DOT), k1)
        a2 = a2 * alpha[:, None] + tl.dot((p * s2[None, :]).to(tl.bfloat16).to(DOT), k2)
        a3 = a3 * alpha[:, None] + tl.dot((p * s3[None, :]).to(tl.bfloat16).to(DOT), k3)
        m_i = m_new
    if SPLIT:
        prow = ((e * nsplit + s) * H + heads.to(tl.int64)) * 512
        tl.store(part_ptr + prow[:, None] + d[None, :], a0, mask=qm)
        tl.store(part_ptr + prow[:, None] + 128 + d[None, :], a1, mask=qm)
        tl.store(part_ptr + prow[:, None] + 256 + d[None, :], a2, mask=qm)
        tl.store(part_ptr + prow[:, None] + 384 + d[None, :], a3, mask=qm)
        mrow = (e * nsplit + s) * H + heads.to(tl.int64)
        tl.store(ml_ptr + mrow * 2, m_i, mask=hlive)
        tl.store(ml_ptr + mrow * 2 + 1, l_i, mask=hlive)
    else:
        inv = 1.0 / tl.maximum(l_i, 1e-30)[:, None]
        orow = (e * H + heads.to(tl.int64)) * 512
        tl.store(out_ptr + orow[:, None] + d[None, :], (a0 * inv).to(tl.bfloat16), mask=qm)
        tl.store(out_ptr + orow[:, None] + 128 + d[None, :], (a1 * inv).to(tl.bfloat16),
                 mask=qm)
        tl.store(out_ptr + orow[:, None] + 256 + d[None, :], (a2 * inv).to(tl.bfloat16),
                 mask=qm)
        tl.store(out_ptr + orow[:, None] + 384 + d[None, :], (a3 * inv).to(tl.bfloat16),
                 mask=qm)


@triton.jit
def combine(part_ptr, ml_ptr, out_ptr, H, S,  # type: ignore[no-untyped-def]
            BS: tl.constexpr, DL: tl.constexpr):
    e = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1).to(tl.int64)
    s = tl.arange(0, BS)
    live = s < S
    row = (e * S + s) * H + h
    m = tl.load(ml_ptr + row * 2, mask=live, other=float("-inf"))
    lsum = tl.load(ml_ptr + row * 2 + 1, mask=live, other=0.0)
    w = tl.exp(m - tl.max(m, 0))
    w = tl.where(live, w, 0.0)
    dl = tl.arange(0, DL)
    acc = tl.load(part_ptr + row[:, None] * DL + dl[None, :], mask=live[:, None], other=0.0)
    out = tl.sum(acc * w[:, None], 0) / tl.maximum(tl.sum(lsum * w, 0), 1e-30)
    tl.store(out_ptr + (e * H + h) * DL + dl, out.to(tl.bfloat16))
