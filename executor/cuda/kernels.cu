// HiSparse CUDA kernels: the fused top-K resolver, its copy-only follower replay, and
// the batched spill copy. Compiled at run time by NVRTC through CuPy's RawModule.
//
// The resolver follows docs/resolver.md rule for rule; hisparse.executor.resolver.decide
// is the oracle it is tested against bit for bit. One thread block decides one slot's
// run of consecutive entries (speculative steps), so the slot's LRU state is private to
// that block for the launch; a big run's copies are drained by every block with
// nothing else to do (the copy queue), once the run's plan is published. One launch at
// a time owns a cache's pools (claim / release below). No host round trip anywhere.
//
// Per-slot state in global memory: hot_tag / hot_stamp (int64 [slots, H], the public
// LRU state) and two indexes derived from them, kept in step by the kernel:
// - lru_order (int32 [slots, H]): the rows sorted by (stamp, row), which turns "the m
//   least recently used rows not in use" into one prefix sum instead of a sort;
// - where (int32 [slots, P]): position -> hot row, so a lookup is one load instead of
//   a scan of H tags or a hash table rebuilt in shared memory every launch.

typedef long long i64;

#ifdef HISPARSE_PROFILE  // phase timestamps of the block deciding entry 0, for tuning only
__device__ long long hisparse_prof[16];
#define PROF(i) do { __syncthreads(); if (threadIdx.x == 0 && ticket == 0) hisparse_prof[i] = clock64(); } while (0)
#else
#define PROF(i) do { } while (0)
#endif

#define ABSENT 0x7fffffff        // where[]: the position is not hot in the slot
#define MISS_BASE (1 << 24)      // where[] values below are hot-row indices (H < 2^16)
#define OCC_NONE (-1)            // occ[]: padding or resident, nothing to do
#define OCC_LOOKUP (-2)          // occ[]: a miss; becomes its first occurrence's index
#define OCC_HOT (-3)             // occ[]: resolved as a hot hit
// HS_WS_INTS (ints of scan scratch + broadcast slots in shared memory) is defined once,
// in kernels.py (WS_INTS), which passes it here and sizes shared memory from it.
#ifndef HS_WS_INTS
#error "HS_WS_INTS must be passed by kernels.py (WS_INTS)"
#endif
#define WS_INTS HS_WS_INTS
#define BCAST (WS_INTS - 2)      // ws[]: the broadcast slot (ws[0..65] is scan scratch)
static_assert(BCAST >= 66 && WS_INTS % 2 == 0, "scan scratch is 33 long longs");

// Launch control, ctrl[] (int64, device memory, per pools). One launch at a time owns
// the pools: its blocks claim the owner word with the launch's step, draw tickets, and
// the last one out resets the tickets and releases the word. A block that finds the
// pools owned by another step (a concurrent launch, or one that never finished) or a
// step not above the last completed launch's (a graph replay without a new step)
// refuses: it touches no pool state, marks its entry's outputs empty (rows -1, no
// plan), and counts the refusal in host_status[] (mapped pinned host memory), which
// the host reads without a sync or a copy and raises as a typed error.
// The indices and codes below are defined once, in kernels.py (CONTROL), and passed in:
// CTRL_OWNER (0 idle, else OWNED | step; POISON sticks once set), CTRL_LAST_STEP (step
// of the last launch that completed), CTRL_TICKETS, CTRL_DONE, CTRL_REFUSED ([+ code]:
// refused blocks per code, device copy), CTRL_FRONT / CTRL_PUBLISHED / CTRL_BIG (the copy
// queue's lowest open entry, runs published, big runs published), REFUSE_STALE (step <= the last completed
// launch's), REFUSE_CONFLICT (pools held by another launch, or poisoned), REFUSE_TIMEOUT
// (a copy helper's wait for a plan expired; never expected).
#if !defined(CTRL_OWNER) || !defined(CTRL_LAST_STEP) || !defined(CTRL_TICKETS) || \
    !defined(CTRL_DONE) || !defined(CTRL_REFUSED) || !defined(REFUSE_STALE) || \
    !defined(CTRL_FRONT) || !defined(CTRL_PUBLISHED) || !defined(CTRL_BIG) || \
    !defined(REFUSE_CONFLICT) || !defined(REFUSE_TIMEOUT)
#error "launch-control indices must be passed by kernels.py (CONTROL)"
#endif
#define OWNED (1ull << 62)
#define POISON (1ull << 63)
#define STEP_BITS (OWNED - 1)
#ifndef HS_WAIT_NS
#define HS_WAIT_NS 60000000000ll // a helper's wait for a published plan, at most (60 s)
#endif
// SORT_MIN_BATCH (from kernels.py): a big entry's misses are copied in host-address order
// in launches of at least this many entries, where the copy is PCIe-bound and the sort's
// few microseconds before the plan is published are hidden; a large value turns it off.
#ifndef SORT_MIN_BATCH
#error "SORT_MIN_BATCH must be passed by kernels.py"
#endif

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

// The same over 64-bit values (three packed 21-bit counters).
__device__ long long block_exclusive_scan64(long long v, int* ws, long long* total) {
    long long* w64 = (long long*)ws;  // [33]: 32 warps' sums and the total
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int warps = blockDim.x >> 5;
    long long incl = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        long long up = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += up;
    }
    __syncthreads();  // ws may still be read by a previous scan's stragglers
    if (lane == 31) w64[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        long long x = lane < warps ? w64[lane] : 0;
        long long xi = x;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            long long up = __shfl_up_sync(0xffffffffu, xi, o);
            if (lane >= o) xi += up;
        }
        __syncwarp();
        if (lane < warps) w64[lane] = xi - x;
        if (lane == warps - 1) w64[32] = xi;
    }
    __syncthreads();
    const long long out = w64[warp] + incl - v;
    *total = w64[32];
    __syncthreads();
    return out;
}

// Load vector idx of a plan: the 16-byte piece idx % rv of the row pairs[idx / rv] =
// (dst row, src row). Returns where it goes (in vectors of dst). __ldcg: the plan may
// have been written by another block of the same launch (skip L1).
__device__ __forceinline__ i64 load_vec(const int2* pairs, int idx, int rv,
                                        const uint4* __restrict__ src, uint4& out) {
    const int r = idx / rv, v = idx - r * rv;
    const int2 pr = __ldcg(pairs + r);
    out = __ldg(src + (i64)pr.y * rv + v);
    return (i64)pr.x * rv + v;
}

// Copy vectors [lo, hi) of a plan. Thread `first` of `stride` takes every stride-th
// vector, four loads in flight before the stores, so a block keeps enough PCIe reads
// outstanding to stream pinned host memory.
__device__ __forceinline__ void copy_range(
    const int2* pairs, int lo, int hi, int rv, const uint4* __restrict__ src,
    uint4* __restrict__ dst, int first, int stride) {
    for (int base = lo + first; base < hi; base += 4 * stride) {
        uint4 buf[4];
        i64 to[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            const int idx = base + u * stride;
            to[u] = idx < hi ? load_vec(pairs, idx, rv, src, buf[u]) : -1;
        }
#pragma unroll
        for (int u = 0; u < 4; ++u)
            if (to[u] >= 0) dst[to[u]] = buf[u];
    }
}

#ifndef HS_IPT
#define HS_IPT 2   // top-K positions per thread: ceil(K / 1024), set by the executor
#endif
#ifndef HS_HPT
#define HS_HPT 4   // hot rows per thread: ceil(H / 1024), set by the executor
#endif

// This thread's contiguous chunk a[q0 .. q0 + HS_HPT) (-1 past H), with 16-byte loads
// where alignment allows: conflict-free in shared memory, coalesced in global memory.
__device__ __forceinline__ void load_chunk(const int* a, int q0, int H, int (&v)[HS_HPT]) {
#if HS_HPT % 4 == 0
    if (q0 + HS_HPT <= H && ((unsigned long long)(a + q0) & 15) == 0) {
#pragma unroll
        for (int k = 0; k < HS_HPT / 4; ++k) {
            const int4 x = reinterpret_cast<const int4*>(a + q0)[k];
            v[4 * k] = x.x; v[4 * k + 1] = x.y; v[4 * k + 2] = x.z; v[4 * k + 3] = x.w;
        }
        return;
    }
#endif
#pragma unroll
    for (int c = 0; c < HS_HPT; ++c) v[c] = q0 + c < H ? a[q0 + c] : -1;
}

// Entry e is the head of a run: a real slot, different from the previous entry's.
__device__ __forceinline__ bool is_head(const int* slots, int e) {
    const int s = slots[e];
    return s >= 0 && (e == 0 || slots[e - 1] != s);
}

// A run whose copies fit one round of one block (four 16-byte vectors per thread) is
// copied by its head alone; bigger runs go through the copy queue.
__device__ __forceinline__ bool small_copy(int misses, int rv) {
    return (i64)misses * rv <= 4 * (i64)blockDim.x;
}

// Copy a (small) run's whole miss plan with this block.
__device__ void copy_run(const int* plan, const int* plan_count, int e0, int e1, int K,
                         int rv, const uint4* host_pool, uint4* device_pool) {
    for (int e = e0; e < e1; ++e)
        copy_range((const int2*)(plan + (i64)e * K * 2), 0, __ldcg(plan_count + e) * rv, rv,
                   host_pool, device_pool, threadIdx.x, blockDim.x);
}

__device__ __forceinline__ int load_cg(const int* p) { return __ldcg(p); }
__device__ __forceinline__ i64 load_cg(const i64* p) { return __ldcg((const long long*)p); }

__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Count one refused block under `code`, on the device and in mapped host memory (a
// plain store of the new count: the host raises when it grows, no atomics over PCIe).
__device__ void report(int code, i64* ctrl, volatile i64* host_status) {
    unsigned long long* counts = (unsigned long long*)(ctrl + CTRL_REFUSED);
    const unsigned long long c = atomicAdd(counts + code, 1ull) + 1ull;
    host_status[code] = (i64)c;
    __threadfence_system();
}

// Thread 0 of each block: its ticket, or -code when the block must refuse. The owner
// word admits one launch (one step) at a time; a block of any other launch poisons it,
// so the conflict is refused until the host recovers the pools, and never waited on.
__device__ int claim(i64* ctrl, i64 step) {
    unsigned long long* w = (unsigned long long*)ctrl;
    const unsigned long long mine = OWNED | ((unsigned long long)step & STEP_BITS);
    // The step check and the claim fly together (one round trip less per block); a
    // stale block that took the idle word gives it back, so the pools stay idle.
    const i64 last = *((volatile i64*)(ctrl + CTRL_LAST_STEP));
    const unsigned long long old = atomicCAS(w + CTRL_OWNER, 0ull, mine);
    if (step <= last) {
        if (old == 0ull) atomicCAS(w + CTRL_OWNER, mine, 0ull);
        return -REFUSE_STALE;
    }
    if (old != 0ull && (old & ~POISON) != mine) {
        atomicOr(w + CTRL_OWNER, POISON);
        return -REFUSE_CONFLICT;
    }
    const unsigned long long t = atomicAdd(w + CTRL_TICKETS, 1ull);
    if (t >= gridDim.x) {  // more blocks than this launch has: a second one of this step
        atomicOr(w + CTRL_OWNER, POISON);
        return -REFUSE_CONFLICT;
    }
    return (int)t;
}

// Thread 0 of each block that drew a ticket: the last one out resets the tickets,
// records the step and releases the owner word (keeping POISON).
__device__ void release(i64* ctrl, i64 step) {
    unsigned long long* w = (unsigned long long*)ctrl;
    __threadfence();
    if (atomicAdd(w + CTRL_DONE, 1ull) == gridDim.x - 1ull) {
        atomicExch(w + CTRL_TICKETS, 0ull);
        atomicExch(w + CTRL_DONE, 0ull);
        atomicExch(w + CTRL_FRONT, 0ull);
        atomicExch(w + CTRL_PUBLISHED, 0ull);
        atomicExch(w + CTRL_BIG, 0ull);
        atomicExch(w + CTRL_LAST_STEP, (unsigned long long)step);
        __threadfence();
        atomicAnd(w + CTRL_OWNER, POISON);
    }
}

// A refused block: counts itself and leaves entry blockIdx.x empty (rows -1, no plan,
// zero counters) so nothing downstream reads a stale or uninitialized row.
__device__ void refuse(int code, i64* ctrl, volatile i64* host_status, int n, int K,
                       int* rows, int* plan_count, int* counters) {
    if (threadIdx.x == 0) report(code, ctrl, host_status);
    const int e = blockIdx.x;
    if (e < n) {
        for (int i = threadIdx.x; i < K; i += blockDim.x) rows[(i64)e * K + i] = -1;
        if (threadIdx.x < 3) counters[e * 3 + threadIdx.x] = 0;
        if (threadIdx.x == 0) plan_count[e] = 0;
    }
}

// Copy order of a big entry: its `m` packed copies (host row << 32 | plan index << 16 |
// hot row) sorted ascending by a bitonic sort in shared memory (ties cannot occur: the
// plan index is part of the key), then stored as (device row, host row) pairs, so the
// block reads pinned host memory in address order. Called by the whole block.
__device__ void sort_copies(i64* key, int m, int* out, int hot0) {
    int n2 = 1;
    while (n2 < m) n2 <<= 1;
    for (int i = m + threadIdx.x; i < n2; i += blockDim.x) key[i] = 0x7fffffffffffffffll;
    __syncthreads();
    for (int k = 2; k <= n2; k <<= 1) {
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int i = threadIdx.x; i < n2; i += blockDim.x) {
                const int p = i ^ j;
                if (p > i) {
                    const i64 a = key[i], b = key[p];
                    if ((a > b) == ((i & k) == 0)) { key[i] = b; key[p] = a; }
                }
            }
            __syncthreads();
        }
    }
    for (int i = threadIdx.x; i < m; i += blockDim.x) {
        const i64 v = key[i];
        out[2 * i] = hot0 + (int)(v & 0xffff);
        out[2 * i + 1] = (int)(v >> 32);
    }
}

__device__ __forceinline__ i64 load_volatile(const i64* p) { return *(const volatile i64*)p; }

// Wait (thread 0 of a block; bounded) until ready[s] holds this launch's step.
__device__ bool await_plan(const i64* ready, int s, i64 step, i64* ctrl,
                           volatile i64* host_status) {
    const unsigned long long t0 = global_ns();
    while (load_volatile(ready + s) != step) {
        if (global_ns() - t0 > (unsigned long long)HS_WAIT_NS) {
            report(REFUSE_TIMEOUT, ctrl, host_status);
            return false;
        }
        __nanosleep(100);
    }
    __threadfence();
    return true;
}

// Thread 0 of a deciding block, after a barrier that follows every write of the run's
// plan, rows and counters: one fence (cumulative, it orders the whole block's writes
// before the barrier) then the ready store, so a block that sees ready[s] == step reads
// the complete plan; then the counts the copy helpers wait on.
__device__ void publish(i64* ready, int s, i64 step, i64* ctrl, bool queued) {
    __threadfence();
    *((volatile i64*)(ready + s)) = step;
    if (queued) atomicAdd((unsigned long long*)(ctrl + CTRL_BIG), 1ull);
    __threadfence();
    atomicAdd((unsigned long long*)(ctrl + CTRL_PUBLISHED), 1ull);
}

// The entry-major copy queue. The misses of big runs (those not small_copy) are copied
// in chunks of QUEUE_CHUNK vectors, claimed through take[e], lowest entry first, by every
// block that has nothing else to do: every SM copies until the step's copies are done,
// as a plain gather does, instead of each block copying its own entry (which leaves
// SMs idle behind the biggest entries, and in waves when entries outnumber SMs). Warp 0
// scans 32 entries per step: padding, small or exhausted entries are skipped, the first
// unpublished one is waited for. A block waits only for entries <= lim, whose runs were
// decided by blocks with earlier tickets, and for entries whose run's ticket has been
// drawn (running blocks that publish before they wait): the queue cannot deadlock, and
// a block that finds nothing it may wait for exits, freeing its SM for later tickets.
#ifndef HS_QUEUE_ROUNDS
#define HS_QUEUE_ROUNDS 2        // a queue chunk: this many vectors per thread of a block
#endif
#define QUEUE_CHUNK (HS_QUEUE_ROUNDS * (int)blockDim.x)

// Warp 0: claim the next chunk at or after entry x. The block may wait for entries up
// to lim (its own run) and any entry below the tickets drawn so far (its run's deciding
// block is running). Returns the entry in *got_x (past the limit: none left, or a wait
// expired) and the chunk index in *got_c.
__device__ void claim_chunk(int x, int lim, int n, const int* slots, const i64* ready,
                            i64 step, const int* plan_count, int* take, i64* ctrl,
                            volatile i64* host_status, int rv, int* got_x, int* got_c) {
    const unsigned full = 0xffffffffu;
    const int lane = threadIdx.x;
    int cur = 0;
    if (lane == 0) {
        const i64 f = load_volatile(ctrl + CTRL_FRONT);
        cur = x > f ? x : (int)f;
        const i64 drawn = load_volatile(ctrl + CTRL_TICKETS);
        const i64 started = (drawn < n ? drawn : n) - 1;
        if (started > lim) lim = (int)started;
    }
    cur = __shfl_sync(full, cur, 0);
    lim = __shfl_sync(full, lim, 0);
    int gx = lim + 1, gc = -1;
    while (cur <= lim) {
        const int y = cur + lane;
        int state = 0, total = 0;  // 0 nothing to copy, 1 not yet published, 2 work
        if (y <= lim) {
            const int s = slots[y];
            if (s >= 0) {
                if (load_volatile(ready + s) != step) {
                    state = 1;
                } else {
                    total = __ldcg(plan_count + y) * rv;
                    const int t = __ldcg(take + y);
                    state = (t >= 0 && (i64)t * QUEUE_CHUNK < total) ? 2 : 0;
                }
            }
        }
        const unsigned pending = __ballot_sync(full, state != 0);
        if (pending == 0) { cur += 32; continue; }
        const int first = __ffs(pending) - 1;
        const int fs = __shfl_sync(full, state, first);
        if (lane == 0 && first > 0)  // entries before cur + first are done
            atomicMax((long long*)(ctrl + CTRL_FRONT), (long long)(cur + first));
        if (fs == 1) {
            int ok = 1;
            if (lane == 0) ok = await_plan(ready, slots[cur + first], step, ctrl, host_status);
            if (!__shfl_sync(full, ok, 0)) break;
            cur += first;
            continue;
        }
        int c = 0;
        if (lane == first) c = atomicAdd(take + y, 1);
        c = __shfl_sync(full, c, first);
        const int tot = __shfl_sync(full, total, first);
        if ((i64)c * QUEUE_CHUNK < tot) { gx = cur + first; gc = c; break; }
        cur += first;  // exhausted meanwhile: it reads as done next time
    }
    if (lane == 0) { *got_x = gx; *got_c = gc; }
}

// The whole block: claim and copy chunks until none is left at or below entry lim.
// Warp 0 claims the next chunk before it copies its part of the current one, so the
// claim's round trips overlap the other warps' copies.
__device__ void copy_queue(int lim, int n, const int* slots, const i64* ready, i64 step,
                           const int* plan_count, int* take, i64* ctrl,
                           volatile i64* host_status, const int* copy_plan, int K, int rv,
                           const uint4* __restrict__ host_pool, uint4* __restrict__ device_pool,
                           int* ws) {
    int* next = ws + BCAST;  // [2]: the claimed (entry, chunk)
    if (threadIdx.x < 32)
        claim_chunk(0, lim, n, slots, ready, step, plan_count, take, ctrl, host_status, rv,
                    next, next + 1);
    __syncthreads();
    for (;;) {
        const int gx = next[0], gc = next[1];
        __syncthreads();  // every thread has read the claim before warp 0 replaces it
        if (gc < 0) return;
        if (threadIdx.x < 32)
            claim_chunk(gx, lim, n, slots, ready, step, plan_count, take, ctrl, host_status,
                        rv, next, next + 1);
        const int total = __ldcg(plan_count + gx) * rv;
        const int lo = gc * QUEUE_CHUNK;
        const int hi = total < lo + QUEUE_CHUNK ? total : lo + QUEUE_CHUNK;
        copy_range((const int2*)(copy_plan + (i64)gx * K * 2), lo, hi, rv, host_pool,
                   device_pool, threadIdx.x, blockDim.x);
        __syncthreads();  // the next claim is in shared memory
    }
}

// Number of runs (heads) in the batch, for the whole block.
__device__ int count_heads(const int* slots, int n, int* ws) {
    int mine = 0;
    for (int e = threadIdx.x; e < n; e += blockDim.x) mine += is_head(slots, e);
    int heads;
    block_exclusive_scan(mine, ws, &heads);
    return heads;
}

// Grid: n + helpers blocks of 1024 threads. Blocks take tickets in start order; ticket
// t < n decides entry t's run (if t heads one), ticket t >= n is a copy helper. A helper
// only waits for runs whose deciding block is already running (tickets of one launch
// only: claim()), so waiting is safe; the wait is bounded all the same.
//
// where[s][p] is the slot's position -> hot-row index, kept with hot_tag: a hot row's
// index, ABSENT, or (only inside a launch) MISS_BASE + the first occurrence of a miss.
// A lookup is one global load; nothing is rebuilt per launch.
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
    int* __restrict__ where,             // [slots, P]
    i64* __restrict__ ready,             // [slots]: step whose plan for the slot is complete
    i64* __restrict__ ctrl,              // [8]: launch control (CTRL_*)
    volatile i64* host_status,           // [8] mapped pinned: refused blocks per code
    const uint4* __restrict__ host_pool, // mapped pinned host rows
    uint4* __restrict__ device_pool,     // packed resident + hot rows
    int H, int P, int R, int rv,
    int* __restrict__ rows,              // [n, K] out
    int* __restrict__ plan,              // [n, K, 2] out: first plan_count[e] pairs valid
    int* __restrict__ plan_count,        // [n] out
    int* __restrict__ counters,          // [n, 3] out: resident, hot, miss
    int* __restrict__ copy_plan,         // [n, K, 2] out: the plan in host-row order
    int* __restrict__ take)              // [n] scratch: chunks claimed (-1: not queued)
{
    extern __shared__ __align__(16) int smem[];
    const int tid = threadIdx.x;
    int* ws = smem;                      // [WS_INTS] scan scratch (8-aligned), ws[BCAST]
    int* used = ws + WS_INTS;            // [H] 1 = row in U (used by this launch)
    int* victims = used + H;             // [K] the entry's victims, in LRU order
    int* first_row = victims + K;        // [K] row taken by a miss's first occurrence
    int* new_order = first_row + K;      // [H] the order being committed
    // [pow2(K)] int64, 8-aligned: an entry's copies as (host row, plan index, hot row)
    i64* sort_key = (i64*)(smem + ((WS_INTS + 2 * H + 2 * K + 1) & ~1));

    const i64 step = *step_ptr;
    if (tid == 0) ws[BCAST] = claim(ctrl, step);
    __syncthreads();
    const int ticket = ws[BCAST];
    __syncthreads();
    if (ticket < 0) {  // refused: no pool state touched; this block's entry reads empty
        refuse(-ticket, ctrl, host_status, n, K, rows, plan_count, counters);
        return;
    }
#ifdef HS_FLOOR_CLAIM  // benchmarks only (the latency floor): the claim and release alone
    if (tid == 0) release(ctrl, step);
    return;
#endif

    if (ticket >= n) {  // a copy helper
        // Copies of big runs, if any: wait until one is published or every run is.
        const int heads = count_heads(slots, n, ws);
        if (tid == 0) {
            const unsigned long long t0 = global_ns();
            int work = 0;
            for (;;) {
                if (load_volatile(ctrl + CTRL_BIG) > 0) { work = 1; break; }
                if (load_volatile(ctrl + CTRL_PUBLISHED) >= heads) break;
                if (global_ns() - t0 > (unsigned long long)HS_WAIT_NS) {
                    report(REFUSE_TIMEOUT, ctrl, host_status);
                    break;
                }
                __nanosleep(100);
            }
            ws[BCAST] = work;
        }
        __syncthreads();
        const bool work = ws[BCAST];
        __syncthreads();  // read before copy_queue reuses the slot
        if (work)
            copy_queue(n - 1, n, slots, ready, step, plan_count, take, ctrl, host_status,
                       copy_plan, K, rv, host_pool, device_pool, ws);
    } else if (is_head(slots, ticket) || slots[ticket] < 0) {
        const int e0 = ticket;
        const int s = slots[e0];
        int e1 = e0 + 1;
        if (s >= 0)
            while (e1 < n && slots[e1] == s) ++e1;
        PROF(0);
        const int q0 = tid * HS_HPT;
        const int hot0 = R + s * H;
        i64* tag = hot_tag + (i64)s * H;
        i64* stamp = hot_stamp + (i64)s * H;
        int* wh = where + (i64)s * P;
        bool touched = false;
        int run_misses = 0;  // copies the run's plan holds (every thread knows it)
        int ord[HS_HPT];  // this thread's chunk of the (stamp, row) order at launch start

        for (int e = e0; e < e1; ++e) {
            const i64 row0 = (i64)e * K;
            int* out = rows + row0;
            int pos[HS_IPT], res[HS_IPT], occ[HS_IPT], w[HS_IPT];
            // Rules 1-3 in one pass: padding, resident, then one load of where[p]: a hot
            // hit takes its row, joins U and gets this step's stamp; anything else
            // registers as a miss, keeping its first occurrence (atomicMin).
#pragma unroll
            for (int c = 0; c < HS_IPT; ++c) {
                const int i = tid * HS_IPT + c;
                pos[c] = (s >= 0 && i < K) ? topk[row0 + i] : -1;
                res[c] = (s >= 0 && i < K) ? resident[row0 + i] : -1;
            }
#pragma unroll
            for (int c = 0; c < HS_IPT; ++c)
                w[c] = (pos[c] >= 0 && res[c] < 0) ? load_cg(wh + pos[c]) : ABSENT;
            if (e == e0) {  // while where[] loads fly: U starts empty, load the LRU order
                if (s >= 0) {
                    load_chunk(lru_order + (i64)s * H, q0, H, ord);
                    for (int j = tid; j < H; j += blockDim.x) used[j] = 0;
                }
                __syncthreads();  // U is zeroed before any row joins it
            }
            long long mine = 0;  // resident | lookups << 21 | miss occurrences << 42
#pragma unroll
            for (int c = 0; c < HS_IPT; ++c) {
                const int i = tid * HS_IPT + c;
                occ[c] = OCC_NONE;
                int row = -1;
                if (pos[c] >= 0) {
                    if (res[c] >= 0) { row = res[c]; mine += 1; }
                    else if (w[c] < MISS_BASE) {
                        row = hot0 + w[c];
                        atomicOr(&used[w[c]], 1);  // its stamp becomes `step` at commit
                        occ[c] = OCC_HOT;
                        mine += 1ll << 21;
                    } else {
                        atomicMin(wh + pos[c], MISS_BASE + i);
                        occ[c] = OCC_LOOKUP;
                        mine += (1ll << 21) + (1ll << 42);
                    }
                }
                if (i < K) out[i] = row;
            }
            long long sums;
            block_exclusive_scan64(mine, ws, &sums);
            const int n_res = (int)(sums & 0x1fffff), n_look = (int)((sums >> 21) & 0x1fffff);
            const int n_missocc = (int)(sums >> 42);
            touched |= n_look > 0;
            PROF(1);
            int filled = 0;
            if (n_missocc > 0) {
                // Each miss occurrence learns its position's first occurrence; first
                // occurrences (in occurrence order) and victim candidates (rows not in U,
                // in (stamp, row) order) are ranked by one packed scan.
                int firsts = 0;
#pragma unroll
                for (int c = 0; c < HS_IPT; ++c) {
                    if (occ[c] != OCC_LOOKUP) continue;
                    const int i = tid * HS_IPT + c;
                    occ[c] = load_cg(wh + pos[c]) - MISS_BASE;  // the first occurrence
                    if (occ[c] == i) ++firsts;
                }
                int cands = 0;
#pragma unroll
                for (int c = 0; c < HS_HPT; ++c)
                    if (ord[c] >= 0 && !used[ord[c]]) ++cands;
                int totals;
                const int packed = block_exclusive_scan(firsts | (cands << 16), ws, &totals);
                const int rank = packed & 0xffff;
                int cpos = packed >> 16;
                const int m = totals & 0xffff, n_cand = totals >> 16;
                PROF(2);
                // Rule 4: the m first candidates are the victims.
#pragma unroll
                for (int c = 0; c < HS_HPT; ++c) {
                    if (ord[c] >= 0 && !used[ord[c]]) {
                        if (cpos < m) victims[cpos] = ord[c];
                        ++cpos;
                    }
                }
                __syncthreads();
                PROF(3);
                filled = m < n_cand ? m : n_cand;  // shape checks make m <= n_cand
                int hr[HS_IPT], vj[HS_IPT], old[HS_IPT];
                const bool sorted = n >= SORT_MIN_BATCH && !small_copy(filled, rv);
                int r = rank;
#pragma unroll
                for (int c = 0; c < HS_IPT; ++c) {
                    const int i = tid * HS_IPT + c;
                    vj[c] = -1;
                    if (occ[c] == i) {
                        if (r < filled) vj[c] = victims[r];
                        ++r;
                    }
                    hr[c] = vj[c] >= 0 ? host_row[row0 + i] : -1;
                    old[c] = vj[c] >= 0 ? (int)load_cg(tag + vj[c]) : -1;
                }
                r = rank;
#pragma unroll
                for (int c = 0; c < HS_IPT; ++c) {
                    const int i = tid * HS_IPT + c;
                    if (occ[c] != i) continue;
                    const int j = vj[c];
                    int row = -1;
                    if (j >= 0) {
                        if (old[c] >= 0) wh[old[c]] = ABSENT;  // evicted: no longer hot
                        wh[pos[c]] = j;
                        tag[j] = pos[c];
                        used[j] = 1;
                        const i64 pi = (row0 + r) * 2;
                        row = hot0 + j;
                        plan[pi] = row;
                        plan[pi + 1] = hr[c];
                        if (sorted) sort_key[r] = ((i64)hr[c] << 32) | ((i64)r << 16) | j;
                        else { copy_plan[pi] = row; copy_plan[pi + 1] = hr[c]; }
                    }
                    out[i] = row;
                    first_row[i] = row;
                    ++r;
                }
                __syncthreads();
                if (sorted) sort_copies(sort_key, filled, copy_plan + row0 * 2, hot0);
                PROF(4);
                // Repeats of a missed position map to the row its first occurrence took.
#pragma unroll
                for (int c = 0; c < HS_IPT; ++c) {
                    const int i = tid * HS_IPT + c;
                    if (occ[c] >= 0 && occ[c] != i) out[i] = first_row[occ[c]];
                }
            }
            run_misses += filled;
            if (tid == 0) {
                counters[e * 3 + 0] = n_res;
                counters[e * 3 + 1] = n_look - filled;
                counters[e * 3 + 2] = filled;
                plan_count[e] = filled;
            }
            __syncthreads();  // the next entry sees this one's where[], tags and U
            PROF(5);
        }

        // The run's plan is complete: other blocks may copy once it is published.
        const bool queued = !small_copy(run_misses, rv);
#ifdef HS_EXP_LATEPUB
        const bool late = !queued && touched;  // published during the commit, below
#else
        const bool late = false;
#endif
        if (s >= 0) {
            for (int e = e0 + tid; e < e1; e += blockDim.x) take[e] = queued ? 0 : -1;
            __syncthreads();
            if (tid == 0 && !late) publish(ready, s, step, ctrl, queued);
        }

        if (touched) {
            // A small single-entry copy is issued now and stored after the commit, so the
            // PCIe round trip overlaps the commit's work.
            const bool prefetched = e1 == e0 + 1 && small_copy(run_misses, rv);
            uint4 buf[4];
            i64 to[4];
            if (prefetched) {
                const int total = run_misses * rv;
                const int2* pairs = (const int2*)(copy_plan + (i64)e0 * K * 2);
#pragma unroll
                for (int u = 0; u < 4; ++u) {
                    const int idx = tid + u * blockDim.x;
                    to[u] = idx < total ? load_vec(pairs, idx, rv, host_pool, buf[u]) : -1;
                }
            }
            // Commit: rows in U take this step's stamp; the (stamp, row) order becomes the
            // unused rows in their old order, then the rows in U by index. Built in shared
            // memory, then stored coalesced (scattered stores from one SM are slow).
            int mine_used[HS_HPT];
            load_chunk(used, q0, H, mine_used);
            int unused = 0, nused = 0;
#pragma unroll
            for (int c = 0; c < HS_HPT; ++c) {
                if (ord[c] >= 0 && !used[ord[c]]) ++unused;
                if (mine_used[c] > 0) ++nused;
            }
            int tot;
            const int packed = block_exclusive_scan(unused | (nused << 16), ws, &tot);
            int upos = packed & 0xffff, kpos = (packed >> 16) + (tot & 0xffff);
#pragma unroll
            for (int c = 0; c < HS_HPT; ++c) {
                if (ord[c] >= 0 && !used[ord[c]]) new_order[upos++] = ord[c];
                if (mine_used[c] > 0) new_order[kpos++] = q0 + c;
            }
            __syncthreads();
            if (tid == 0 && late) publish(ready, s, step, ctrl, queued);
            for (int j = tid; j < H; j += blockDim.x) {
                lru_order[(i64)s * H + j] = new_order[j];
                if (used[j]) stamp[j] = step;
            }
            PROF(6);
            // This block's share of the miss copies, straight from pinned host memory.
            if (prefetched) {
#pragma unroll
                for (int u = 0; u < 4; ++u)
                    if (to[u] >= 0) device_pool[to[u]] = buf[u];
            } else if (queued) {
                copy_queue(e1 - 1, n, slots, ready, step, plan_count, take, ctrl, host_status,
                           copy_plan, K, rv, host_pool, device_pool, ws);
            } else {  // a small run of several entries: its head alone
                copy_run(copy_plan, plan_count, e0, e1, K, rv, host_pool, device_pool);
            }
            PROF(7);
        }
    }

    // The last block out resets the tickets, records the step and releases the pools.
    __syncthreads();
    if (tid == 0) release(ctrl, step);
}

// Follower replay: entry e's first plan_count[e] (hot row, host row) pairs (the copy
// order the resolver wrote: host-row order for big entries), copied from
// the follower's host pool into its device pool. grid = (n, blocks per entry).
extern "C" __global__ void __launch_bounds__(512) hisparse_replay(
    const int* __restrict__ plan, const int* __restrict__ plan_count, int K, int rv,
    const uint4* __restrict__ host_pool, uint4* __restrict__ device_pool)
{
    const int e = blockIdx.x;
    copy_range((const int2*)(plan + (i64)e * K * 2), 0, plan_count[e] * rv, rv, host_pool,
               device_pool, blockIdx.y * blockDim.x + threadIdx.x, gridDim.y * blockDim.x);
}

// Spill: `count` whole blocks, pairs (dst host block, src GPU block) of `bv` 16-byte
// vectors, device pool -> mapped pinned host pool, one launch per batch of spills (a
// block is a "row" of bv vectors to copy_range).
extern "C" __global__ void __launch_bounds__(512) hisparse_spill(
    const int2* __restrict__ blocks, int count, int bv,
    const uint4* __restrict__ device_pool, uint4* __restrict__ host_pool)
{
    copy_range(blocks, 0, count * bv, bv, device_pool, host_pool,
               blockIdx.x * blockDim.x + threadIdx.x, gridDim.x * blockDim.x);
}
