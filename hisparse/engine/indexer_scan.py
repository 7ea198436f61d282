"""The fused FP8 indexer scan as a Triton kernel (imported only where triton is).

No ``from __future__ import annotations`` and no annotations but ``tl.constexpr``: Triton
reads a kernel's annotations itself, and resolves every name in them inside the kernel.
One program scores ``TILES`` tiles of ``BT`` positions of one entry: ``s[t] = scale[t] *
sum_h w[h] * relu(q[h] . k[t])``, the dot on the tensor cores from the 128 FP8 bytes of
each key; with ``Q8`` the queries are FP8 bits too and the dot takes both as FP8.
"""

import triton
import triton.language as tl


@triton.jit
def scan(q_ptr, w_ptr, k_ptr, s_ptr, pos_ptr, out_ptr, T, per_slot,  # type: ignore[no-untyped-def]
         HI: tl.constexpr, DI: tl.constexpr, BT: tl.constexpr, TILES: tl.constexpr,
         Q8: tl.constexpr):
    e = tl.program_id(0)
    tb = tl.program_id(1)
    n = (e // per_slot).to(tl.int64)
    h = tl.arange(0, HI)
    d = tl.arange(0, DI)
    q = tl.load(q_ptr + e.to(tl.int64) * (HI * DI) + h[:, None] * DI + d[None, :])
    if Q8:  # FP8 queries: the dot takes both operands as FP8 (V3.2's indexer)
        q = q.to(tl.float8e4nv, bitcast=True)
    w = tl.load(w_ptr + e.to(tl.int64) * HI + h)
    p = tl.load(pos_ptr + e)
    for i in tl.static_range(TILES):  # the queries are loaded once for TILES key tiles
        t = (tb * TILES + i) * BT + tl.arange(0, BT)
        live = t < T
        row = n * T + t
        kb = tl.load(k_ptr + row[:, None] * DI + d[None, :], mask=live[:, None], other=0)
        k = kb.to(tl.float8e4nv, bitcast=True)
        if not Q8:
            k = k.to(tl.bfloat16)
        logits = tl.dot(q, tl.trans(k))  # [HI, BT] float32
        logits = tl.maximum(logits, 0.0)
        s = tl.sum(logits * w[:, None], axis=0)
        s = s * tl.load(s_ptr + row, mask=live, other=0.0)
        s = tl.where(t > p, float("-inf"), s)
        tl.store(out_ptr + e.to(tl.int64) * T + t, s, mask=live)
