"""One kernel that turns a step's top-K into the resolver's inputs, on the device.

Per position: the resident row (its page on the GPU), else the host row (its page on
the host), from the page tables the engine uploads before the step; per entry: its
slot, or -1 (padding) for an inactive entry; and the top-K itself, narrowed to the
resolver's int32. One launch instead of a dozen elementwise torch operations (and the
copy of the top-K into the resolver's buffer) keeps the resolver's share of a step small.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hisparse.executor.cuda.backend import load_cupy

_SOURCE = r"""
extern "C" __global__ void hisparse_engine_inputs(
    const long long* __restrict__ inputs,   // [3, E]: token, position, active
    const int* __restrict__ gpu_table,      // [N, P]: GPU block of each page, or -1
    const int* __restrict__ host_table,     // [N, P]: host block of each page, or -1
    const long long* __restrict__ topk_in,  // [E, K]: positions, -1 = padding
    int E, int K, int P, int per_slot, int bt,
    int* __restrict__ slots, int* __restrict__ topk, int* __restrict__ resident,
    int* __restrict__ host)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)E * K) return;
    const int e = (int)(i / K);
    const int slot = e / per_slot;
    const bool active = inputs[2LL * E + e] != 0;
    const int p = (int)topk_in[i];
    topk[i] = p;
    int r = -1, h = -1;
    if (active && p >= 0) {
        const int page = p / bt, off = p - page * bt;
        const int g = gpu_table[(long long)slot * P + page];
        if (g >= 0) {
            r = g * bt + off;
        } else {
            const int hb = host_table[(long long)slot * P + page];
            h = hb >= 0 ? hb * bt + off : -1;
        }
    }
    resident[i] = r;
    host[i] = h;
    if (i == (long long)e * K) slots[e] = active ? slot : -1;
}
"""

THREADS = 256


class ResolveInputs:
    """The compiled kernel, bound to a step's fixed buffers (CuPy views of torch's)."""

    def __init__(self, inputs: Any, gpu_table: Any, host_table: Any, *, per_slot: int,
                 block_tokens: int) -> None:
        cupy = load_cupy()
        self.kernel = cupy.RawKernel(_SOURCE, "hisparse_engine_inputs")
        self.inputs = cupy.from_dlpack(inputs)
        self.gpu_table = cupy.from_dlpack(gpu_table)
        self.host_table = cupy.from_dlpack(host_table)
        self.per_slot = per_slot
        self.block_tokens = block_tokens

    def launch(self, topk: Any, buffers: Any) -> None:
        """Fill ``buffers.slots``, ``topk``, ``resident_row`` and ``host_row`` from the
        int64 top-K ``topk`` [E, K] (in the current CuPy stream)."""
        e, k = buffers.topk.shape
        if tuple(topk.shape) != (e, k) or topk.dtype != np.int64:
            raise ValueError(f"the top-K must be int64 [{e}, {k}], got {topk.dtype} "
                             f"{tuple(topk.shape)}")
        pages = self.gpu_table.shape[1]
        blocks = -(-e * k // THREADS)
        self.kernel(
            (blocks,), (THREADS,),
            (self.inputs, self.gpu_table, self.host_table, topk, np.int32(e),
             np.int32(k), np.int32(pages), np.int32(self.per_slot),
             np.int32(self.block_tokens), buffers.slots, buffers.topk,
             buffers.resident_row, buffers.host_row),
        )
