// HiSparse CUDA kernels: the fused top-K resolver, its copy-only follower replay, and
// the batched spill copy. Compiled at run time by NVRTC through CuPy's RawModule.
//
// The resolver follows docs/resolver.md rule for rule; hisparse.executor.resolver.decide
// is the oracle it is tested against bit for bit. One thread block serves one slot's run
// of consecutive entries (speculative steps), so the slot's hot state is private to the
// block for the whole launch: no inter-block synchronization, no host round trip.
//
// Per-slot state in global memory: hot_tag / hot_stamp (int64 [slots, H], the public
// LRU state) and lru_order (int32 [slots, H]): the slot's rows sorted by (stamp, row),
// a cache of information the stamps already hold. It turns "the m least recently used
// rows not in use" into one prefix sum instead of a sort.

typedef long long i64;

#define EMPTY_KEY (-1)
#define ABSENT 0x7fffffff        // hash value: key known, position not hot
#define MISS_BASE (1 << 24)      // hash values below are hot-row indices (H < 2^24)
#define FIRST_BIT (1 << 30)      // occ[] flag: first occurrence of a miss in its entry
#define OCC_NONE (-1)            // occ[]: padding or resident, nothing to do
#define OCC_LOOKUP (-2)          // occ[]: needs a hot lookup
#define OCC_HOT (-3)             // occ[]: resolved as a hot hit

__device__ __forceinline__ unsigned hash_slot(int p, unsigned mask) {
    unsigned h = (unsigned)p * 0x9E3779B1u;
    h ^= h >> 15;
    return h & mask;
}

__device__ __forceinline__ int warp_inclusive_scan(int v) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        int up = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += up;
    }
    return v;
}

// Exclusive prefix sum of one int per thread across the block (blockDim.x % 32 == 0).
// `ws` is 33 ints of shared scratch; the block total is returned through `total`.
__device__ int block_exclusive_scan(int v, int* ws, int* total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int warps = blockDim.x >> 5;
    const int incl = warp_inclusive_scan(v);
    if (lane == 31) ws[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        const int w = lane < warps ? ws[lane] : 0;
        const int wi = warp_inclusive_scan(w);
        if (lane < warps) ws[lane] = wi - w;
        if (lane == warps - 1) ws[32] = wi;
    }
    __syncthreads();
    const int out = ws[warp] + incl - v;
    *total = ws[32];
    __syncthreads();  // ws may be reused at once
    return out;
}

__device__ __forceinline__ bool bit_get(const unsigned* bits, int j) {
    return (bits[j >> 5] >> (j & 31)) & 1u;
}

__device__ __forceinline__ void bit_set(unsigned* bits, int j) {
    atomicOr(&bits[j >> 5], 1u << (j & 31));
}

// Copy `count` rows named by int2 pairs (dst device row, src host row), `rv` 16-byte
// vectors per row, with the whole block; four loads in flight per thread before the
// stores, so a block keeps enough PCIe reads outstanding to stream pinned host memory.
__device__ __forceinline__ void copy_pairs(
    const int2* __restrict__ pairs, int count, int rv,
    const uint4* __restrict__ src, uint4* __restrict__ dst, int start, int stride) {
    const int total = count * rv;
    for (int base = start; base < total; base += 4 * stride) {
        uint4 buf[4];
        i64 to[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            const int idx = base + u * stride;
            to[u] = -1;
            if (idx < total) {
                const int r = idx / rv, v = idx - r * rv;
                const int2 pr = pairs[r];
                buf[u] = __ldg(src + (i64)pr.y * rv + v);
                to[u] = (i64)pr.x * rv + v;
            }
        }
#pragma unroll
        for (int u = 0; u < 4; ++u)
            if (to[u] >= 0) dst[to[u]] = buf[u];
    }
}

extern "C" __global__ void __launch_bounds__(1024, 1) hisparse_resolve(
    const int* __restrict__ slots,       // [n], -1 = padding entry
    const int* __restrict__ topk,        // [n, K]
    const int* __restrict__ resident,    // [n, K]
    const int* __restrict__ host_row,    // [n, K]
    const i64* __restrict__ step_ptr,    // [1], read on the device (graph replays)
    int n, int K,
    i64* __restrict__ hot_tag,           // [slots, H]
    i64* __restrict__ hot_stamp,         // [slots, H]
    int* __restrict__ lru_order,         // [slots, H]
    const uint4* __restrict__ host_pool, // mapped pinned host rows
    uint4* __restrict__ device_pool,     // packed resident + hot rows
    int H, int cap, int R, int rv,
    int* __restrict__ rows,              // [n, K] out
    int* __restrict__ plan,              // [n, K, 2] out: first plan_count[e] pairs valid
    int* __restrict__ plan_count,        // [n] out
    int* __restrict__ counters)          // [n, 3] out: resident, hot, miss
{
    extern __shared__ int smem[];
    const int e0 = blockIdx.x;
    if (e0 >= n) return;
    const int s = slots[e0];
    if (s >= 0 && e0 > 0 && slots[e0 - 1] == s) return;  // not the head of its run
    int e1 = e0 + 1;
    if (s >= 0)
        while (e1 < n && slots[e1] == s) ++e1;

    const int tid = threadIdx.x, T = blockDim.x;
    const unsigned mask = (unsigned)cap - 1u;
    int* keys = smem;                    // [cap] positions, EMPTY_KEY = free
    int* vals = keys + cap;              // [cap] hot row, or MISS_BASE + first index, or ABSENT
    int* tag32 = vals + cap;             // [H] the slot's tags as this launch sees them
    int* order = tag32 + H;              // [H] rows by (stamp, row) at launch start
    int* victims = order + H;            // [K] the entry's victims, in LRU order
    int* occ = victims + K;              // [K] per-occurrence state (OCC_* or hash slot)
    int* ws = occ + K;                   // [33] scan scratch
    unsigned* inuse = (unsigned*)(ws + 33);  // [ceil(H/32)] rows used by this launch

    const int ipt = (K + T - 1) / T;     // occurrences per thread, contiguous chunks
    const int hpt = (H + T - 1) / T;     // hot rows per thread, contiguous chunks
    const i64 step = *step_ptr;
    const int hot0 = R + s * H;
    bool built = false;

    for (int e = e0; e < e1; ++e) {
        const int* tp = topk + (i64)e * K;
        const int* rp = resident + (i64)e * K;
        int* out = rows + (i64)e * K;

        // Rules 1-2: padding and resident positions, counted; everything else looks up.
        int mine = 0;  // resident count | lookup count << 16 (K < 65536)
        for (int c = 0; c < ipt; ++c) {
            const int i = tid * ipt + c;
            if (i >= K) break;
            const int p = s >= 0 ? tp[i] : -1;
            int o = OCC_NONE, row = -1;
            if (p >= 0) {
                const int r = rp[i];
                if (r >= 0) { row = r; mine += 1; }
                else { o = OCC_LOOKUP; mine += 1 << 16; }
            }
            out[i] = row;
            occ[i] = o;
        }
        int both;
        block_exclusive_scan(mine, ws, &both);
        const int n_res = both & 0xffff, n_look = both >> 16;
        if (n_look == 0) {  // fully resident (or padding): no hot state touched
            if (tid == 0) {
                counters[e * 3 + 0] = n_res; counters[e * 3 + 1] = 0; counters[e * 3 + 2] = 0;
                plan_count[e] = 0;
            }
            continue;
        }

        if (!built) {  // the slot's hot state, loaded once per launch
            for (int j = tid; j < H; j += T) {
                tag32[j] = (int)hot_tag[(i64)s * H + j];
                order[j] = lru_order[(i64)s * H + j];
            }
            for (int q = tid; q < cap; q += T) { keys[q] = EMPTY_KEY; vals[q] = ABSENT; }
            for (int w = tid; w < (H + 31) / 32; w += T) inuse[w] = 0u;
            __syncthreads();
            for (int j = tid; j < H; j += T) {
                const int p = tag32[j];
                if (p < 0) continue;
                unsigned h = hash_slot(p, mask);
                while (atomicCAS(&keys[h], EMPTY_KEY, p) != EMPTY_KEY) h = (h + 1) & mask;
                vals[h] = j;
            }
            __syncthreads();
            built = true;
        }

        // Rule 3: hot hits refresh their row; absent positions register as misses,
        // keeping the smallest occurrence index (first occurrence) per position.
        for (int c = 0; c < ipt; ++c) {
            const int i = tid * ipt + c;
            if (i >= K) break;
            if (occ[i] != OCC_LOOKUP) continue;
            const int p = tp[i];
            unsigned h = hash_slot(p, mask);
            for (;;) {
                const int old = atomicCAS(&keys[h], EMPTY_KEY, p);
                if (old == EMPTY_KEY || old == p) break;
                h = (h + 1) & mask;
            }
            const int v = atomicMin(&vals[h], MISS_BASE + i);
            if (v < MISS_BASE) {
                out[i] = hot0 + v;
                bit_set(inuse, v);
                occ[i] = OCC_HOT;
            } else {
                occ[i] = (int)h;
            }
        }
        __syncthreads();

        // First occurrences of misses, ranked in occurrence order.
        int firsts = 0;
        for (int c = 0; c < ipt; ++c) {
            const int i = tid * ipt + c;
            if (i >= K) break;
            const int o = occ[i];
            if (o >= 0 && vals[o] == MISS_BASE + i) { occ[i] = o | FIRST_BIT; ++firsts; }
        }
        int m;
        int rank = block_exclusive_scan(firsts, ws, &m);

        // Rule 4: victims are the first m rows of the (stamp, row) order not in use.
        int cands = 0;
        for (int c = 0; c < hpt; ++c) {
            const int q = tid * hpt + c;
            if (q < H && !bit_get(inuse, order[q])) ++cands;
        }
        int n_cand;
        int cpos = block_exclusive_scan(cands, ws, &n_cand);
        for (int c = 0; c < hpt; ++c) {
            const int q = tid * hpt + c;
            if (q < H && !bit_get(inuse, order[q])) {
                if (cpos < m) victims[cpos] = order[q];
                ++cpos;
            }
        }
        __syncthreads();
        const int filled = m < n_cand ? m : n_cand;  // the executor's shape check makes m <= n_cand

        for (int c = 0; c < ipt; ++c) {
            const int i = tid * ipt + c;
            if (i >= K) break;
            const int o = occ[i];
            if (o < 0 || !(o & FIRST_BIT)) continue;
            if (rank < filled) {
                const int j = victims[rank];
                const int old = tag32[j];
                if (old >= 0) {  // the evicted position is no longer hot
                    unsigned h = hash_slot(old, mask);
                    while (keys[h] != old) h = (h + 1) & mask;
                    vals[h] = ABSENT;
                }
                const int p = tp[i];
                tag32[j] = p;
                vals[o & ~FIRST_BIT] = j;
                bit_set(inuse, j);
                hot_tag[(i64)s * H + j] = p;
                const i64 pi = ((i64)e * K + rank) * 2;
                plan[pi] = hot0 + j;
                plan[pi + 1] = host_row[(i64)e * K + i];
                out[i] = hot0 + j;
            }
            ++rank;
        }
        __syncthreads();

        // Repeats of a missed position map to the row its first occurrence took.
        for (int c = 0; c < ipt; ++c) {
            const int i = tid * ipt + c;
            if (i >= K) break;
            const int o = occ[i];
            if (o >= 0 && !(o & FIRST_BIT)) {
                const int v = vals[o];
                out[i] = v < MISS_BASE ? hot0 + v : -1;
            }
        }
        if (tid == 0) {
            counters[e * 3 + 0] = n_res;
            counters[e * 3 + 1] = n_look - filled;
            counters[e * 3 + 2] = filled;
            plan_count[e] = filled;
        }
        __syncthreads();
    }
    if (!built) return;

    // Commit: used rows take this step's stamp; the (stamp, row) order becomes the
    // unused rows in their old order followed by the used rows by index.
    int unused = 0, used = 0;
    for (int c = 0; c < hpt; ++c) {
        const int q = tid * hpt + c;
        if (q >= H) break;
        if (!bit_get(inuse, order[q])) ++unused;
        if (bit_get(inuse, q)) ++used;
    }
    int n_unused, n_used;
    int upos = block_exclusive_scan(unused, ws, &n_unused);
    int kpos = block_exclusive_scan(used, ws, &n_used) + n_unused;
    int* lo = lru_order + (i64)s * H;
    for (int c = 0; c < hpt; ++c) {
        const int q = tid * hpt + c;
        if (q >= H) break;
        const int j = order[q];
        if (!bit_get(inuse, j)) lo[upos++] = j;
        if (bit_get(inuse, q)) {
            lo[kpos++] = q;
            hot_stamp[(i64)s * H + q] = step;
        }
    }

    // Miss copies for the whole run, straight from pinned host memory.
    for (int e = e0; e < e1; ++e)
        copy_pairs((const int2*)(plan + (i64)e * K * 2), plan_count[e], rv,
                   host_pool, device_pool, tid, T);
}

// Follower replay: entry e's first plan_count[e] (hot row, host row) pairs, copied from
// the follower's host pool into its device pool. grid = (n, blocks per entry).
extern "C" __global__ void __launch_bounds__(512) hisparse_replay(
    const int* __restrict__ plan, const int* __restrict__ plan_count, int K, int rv,
    const uint4* __restrict__ host_pool, uint4* __restrict__ device_pool)
{
    const int e = blockIdx.x;
    copy_pairs((const int2*)(plan + (i64)e * K * 2), plan_count[e], rv, host_pool,
               device_pool, blockIdx.y * blockDim.x + threadIdx.x, gridDim.y * blockDim.x);
}

// Spill: `count` whole blocks (src GPU block, dst host block) of `bv` 16-byte vectors,
// device pool -> mapped pinned host pool, one launch per batch of spills.
extern "C" __global__ void __launch_bounds__(512) hisparse_spill(
    const int2* __restrict__ blocks, int count, int bv,
    const uint4* __restrict__ device_pool, uint4* __restrict__ host_pool)
{
    const i64 total = (i64)count * bv;
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 base = (i64)blockIdx.x * blockDim.x + threadIdx.x; base < total; base += 4 * stride) {
        uint4 buf[4];
        i64 to[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            const i64 idx = base + u * stride;
            to[u] = -1;
            if (idx < total) {
                const int c = (int)(idx / bv), v = (int)(idx - (i64)c * bv);
                const int2 b = blocks[c];
                buf[u] = device_pool[(i64)b.x * bv + v];
                to[u] = (i64)b.y * bv + v;
            }
        }
#pragma unroll
        for (int u = 0; u < 4; ++u)
            if (to[u] >= 0) host_pool[to[u]] = buf[u];
    }
}
