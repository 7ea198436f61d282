"""The CUDA executor against the NumPy reference, bit for bit (GPU only).

Random batches (duplicates, padding, resident/hot/host mixes, speculative entries of
one slot, LRU eviction across calls) go through both executors from identical state;
rows, miss plan, counters, hot tags, stamps and every device byte must agree after
every call, and followers replaying the plan must agree too. Also: spills with events,
the host-write guard, typed refusals that change nothing, CUDA-graph capture (CuPy's
and torch's) replayed with new inputs, and ``hisparse simulate --executor cuda``.

``HISPARSE_GPU_EXAMPLES`` lowers the Hypothesis budget (compute-sanitizer runs).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

from hisparse.executor import (
    BadBatch,
    BadTransfer,
    Executor,
    ExecutorConfigError,
    LaunchConflict,
    PoolLayout,
    ReferenceExecutor,
    ReferencePools,
    ResolveBatch,
    StaleStep,
)

pytestmark = pytest.mark.gpu
EXAMPLES = int(os.environ.get("HISPARSE_GPU_EXAMPLES", "150"))


def cuda_executor(**kw: Any) -> Any:
    from hisparse.executor.cuda import CudaExecutor

    ex = CudaExecutor(**kw)
    _conforms: Executor[Any] = ex  # mypy: the protocol
    return ex


def host_bytes(layout: PoolLayout, salt: int) -> NDArray[np.uint8]:
    rng = np.random.default_rng(salt)
    return rng.integers(0, 256, (layout.host_rows, layout.row_bytes), dtype=np.uint8)


class Pair:
    """A leader (and one follower) in both executors, from identical bytes."""

    def __init__(
        self, layout: PoolLayout, top_k: int, entries: int, positions: int, seed: int = 0,
        stream: Any = None,
    ) -> None:
        self.layout = layout
        self.ref = ReferenceExecutor()
        self.cuda = cuda_executor(top_k=top_k, num_speculative_tokens=entries - 1,
                                  max_positions=positions, stream=stream)
        self.launched = -1  # step of the last launch on the CUDA leader
        self.r_lead: ReferencePools = self.ref.allocate(layout)
        self.r_fol: ReferencePools = self.ref.allocate(layout, lru=False)
        self.c_lead = self.cuda.allocate(layout)
        self.c_fol = self.cuda.allocate(layout, lru=False)
        rng = np.random.default_rng(seed)
        device = rng.integers(0, 256, (layout.device_rows, layout.row_bytes), dtype=np.uint8)
        rows = np.arange(layout.device_rows)
        for ex, pools, salt in ((self.ref, self.r_lead, 1), (self.ref, self.r_fol, 2),
                                (self.cuda, self.c_lead, 1), (self.cuda, self.c_fol, 2)):
            pools.host[...] = host_bytes(layout, seed * 10 + salt)
            ex.write_device_rows(pools, rows, device)

    def step(self, batch: ResolveBatch) -> None:
        want = self.ref.resolve(self.r_lead, batch)
        self.ref.replay(self.r_fol, want.plan)
        res = self.cuda.resolve(self.c_lead, batch)
        self.cuda.replay(self.c_fol, res.plan)
        got = res.to_host()
        np.testing.assert_array_equal(got.rows, want.rows)
        np.testing.assert_array_equal(got.plan, want.plan)
        assert (got.resident_hits, got.hot_hits, got.misses) == (
            want.resident_hits, want.hot_hits, want.misses)
        check_copy_order(res.plan, self.layout.row_bytes // 16)
        if len(batch.slots):  # an empty batch launches nothing
            self.launched = int(batch.step)
        check_control_idle(self.c_lead, self.launched)
        self.same_state()

    def same_state(self) -> None:
        for r, c in ((self.r_lead, self.c_lead), (self.r_fol, self.c_fol)):
            a, b = self.ref.snapshot(r), self.cuda.snapshot(c)
            for key in ("hot_tag", "hot_stamp", "device", "host"):
                np.testing.assert_array_equal(b[key], a[key], err_msg=key)


def check_copy_order(plan: Any, rv: int) -> None:
    """Each entry's copy order holds exactly its plan's pairs; in a launch of at least
    SORT_MIN_BATCH entries a big entry's (more than one round of one resolver block) is
    sorted by host row, ties in plan order."""
    import cupy

    from hisparse.executor.cuda.kernels import SORT_MIN_BATCH

    pairs, copy, counts = (cupy.asnumpy(a) for a in (plan.pairs, plan.copy_pairs, plan.counts))
    for e, c in enumerate(counts):
        mine, order = pairs[e, :c], copy[e, :c]
        if len(counts) >= SORT_MIN_BATCH and c * rv > 4 * 1024:
            want = mine[np.argsort(mine[:, 1], kind="stable")]
            np.testing.assert_array_equal(order, want)
        else:
            np.testing.assert_array_equal(order, mine)


def check_control_idle(pools: Any, step: int) -> None:
    """After a launch the control words are idle again: no owner, tickets, blocks done
    and the copy queue's counters back at 0, the launch's step recorded, no refusal
    unreported."""
    import cupy

    from hisparse.executor.cuda.kernels import (
        CTRL_BIG,
        CTRL_DONE,
        CTRL_FRONT,
        CTRL_LAST_STEP,
        CTRL_OWNER,
        CTRL_PUBLISHED,
        CTRL_TICKETS,
    )

    ctrl = cupy.asnumpy(pools.ctrl)
    for word in (CTRL_OWNER, CTRL_TICKETS, CTRL_DONE, CTRL_FRONT, CTRL_PUBLISHED, CTRL_BIG):
        assert ctrl[word] == 0, ctrl
    assert ctrl[CTRL_LAST_STEP] == step, ctrl
    assert list(pools.status) == pools.refusals_seen, pools.status


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[PoolLayout, int, int, int, list[ResolveBatch]]:
    k = draw(st.sampled_from([1, 3, 8, 32, 64]))
    entries = draw(st.integers(1, 3))
    hot = entries * k + draw(st.sampled_from([0, 1, k]))
    layout = PoolLayout(gpu_blocks=draw(st.integers(1, 4)), host_blocks=draw(st.integers(1, 6)),
                    block_tokens=4, row_bytes=draw(st.sampled_from([16, 48])),
                    hot_rows=hot, slots=draw(st.integers(1, 3)))
    universe = max(2, draw(st.sampled_from([hot // 2, hot, 3 * hot])))
    batches = []
    for step in range(1, draw(st.integers(1, 6)) + 1):
        order = draw(st.permutations(range(layout.slots)))
        used = order[: draw(st.integers(0, layout.slots))]
        slots, topk, res, host = [], [], [], []
        for s in used:
            for _ in range(draw(st.integers(1, entries))):
                p = draw(st.lists(st.integers(-1, universe - 1), min_size=k, max_size=k))
                r = [draw(st.integers(-1, layout.resident_rows - 1)) if draw(st.booleans())
                     else -1 for _ in p]
                h = [draw(st.integers(0, layout.host_rows - 1)) for _ in p]
                slots.append(s)
                topk.append(p)
                res.append(r)
                host.append(h)
        batches.append(ResolveBatch(
            slots=np.array(slots, np.int32),
            topk=np.array(topk, np.int32).reshape(-1, k),
            resident_row=np.array(res, np.int32).reshape(-1, k),
            host_row=np.array(host, np.int32).reshape(-1, k),
            step=step * 3,
        ))
    return layout, k, entries, universe, batches


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(scenarios())
def test_cuda_matches_reference_bit_for_bit(
    case: tuple[PoolLayout, int, int, int, list[ResolveBatch]],
) -> None:
    layout, k, entries, positions, batches = case
    pair = Pair(layout, k, entries, positions)
    for batch in batches:
        pair.step(batch)


def test_realistic_shape_matches_reference() -> None:
    """K 2048, H 4096, 656-byte rows: eviction, duplicates and speculative pairs."""
    k, h = 2048, 4096
    layout = PoolLayout(gpu_blocks=8, host_blocks=64, block_tokens=64, row_bytes=656,
                    hot_rows=h, slots=6)
    pair = Pair(layout, k, 2, 5000, seed=3)
    rng = np.random.default_rng(7)
    for step in range(1, 9):
        slots, topk = [], []
        for s in rng.permutation(layout.slots)[: rng.integers(1, layout.slots + 1)]:
            for _ in range(rng.integers(1, 3)):
                slots.append(s)
                topk.append(rng.integers(-1, 5000, k))
        t = np.array(topk, np.int32)
        resident = np.where(rng.random(t.shape) < 0.2,
                            rng.integers(0, layout.resident_rows, t.shape), -1).astype(np.int32)
        host = rng.integers(0, layout.host_rows, t.shape).astype(np.int32)
        pair.step(ResolveBatch(np.array(slots, np.int32), t, resident, host, step))


def test_big_batch_copies_in_host_row_order() -> None:
    """40 entries of 128 mostly-missing positions with 656-byte rows: every entry is big
    and sorted, copied through the chunk queue by deciders and helpers; duplicate host
    rows test the sort's ties."""
    k, n = 128, 40
    layout = PoolLayout(gpu_blocks=2, host_blocks=48, block_tokens=64, row_bytes=656,
                    hot_rows=k, slots=n)
    pair = Pair(layout, k, 1, 1024, seed=4)
    rng = np.random.default_rng(9)
    for step in range(1, 4):
        topk = np.stack([rng.permutation(1024)[:k] for _ in range(n)]).astype(np.int32)
        host = rng.integers(0, layout.host_rows, topk.shape).astype(np.int32)
        host[:, 1] = host[:, 0]  # equal host rows within an entry
        pair.step(ResolveBatch(np.arange(n, dtype=np.int32), topk, np.full_like(topk, -1),
                               host, step))


def test_worked_example_and_reset_slot() -> None:
    layout = PoolLayout(gpu_blocks=2, host_blocks=4, block_tokens=2, row_bytes=16, hot_rows=3,
                    slots=2)
    pair = Pair(layout, 1, 1, 21)
    seq = [[10], [13], [15], [13], [20]]
    for step, pos in enumerate(seq, start=1):
        topk = np.array([pos], np.int32)
        host = (topk % layout.host_rows).astype(np.int32)
        pair.step(ResolveBatch(np.array([0], np.int32), topk, np.full_like(topk, -1), host, step))
    for ex, pools in ((pair.ref, pair.r_lead), (pair.cuda, pair.c_lead)):
        ex.reset_slot(pools, 0)
    pair.same_state()
    topk = np.array([[1]], np.int32)
    pair.step(ResolveBatch(np.array([0], np.int32), topk, np.full_like(topk, -1), topk, 9))
    assert pair.cuda.snapshot(pair.c_lead)["hot_tag"][0].tolist() == [1, -1, -1]


def test_refusals_are_typed_and_change_nothing() -> None:
    layout = PoolLayout(gpu_blocks=2, host_blocks=4, block_tokens=2, row_bytes=16, hot_rows=8,
                    slots=2)
    with pytest.raises(ExecutorConfigError, match="hot_rows"):
        cuda_executor(top_k=4, num_speculative_tokens=2, max_positions=8).allocate(layout)
    pair = Pair(layout, 4, 2, 8)
    ok = np.array([[1, 2, 3, 4]], np.int32)
    neg = np.full_like(ok, -1)
    pair.step(ResolveBatch(np.array([0], np.int32), ok, neg, ok, 5))
    before = pair.cuda.snapshot(pair.c_lead)
    bad = [
        ResolveBatch(np.array([0], np.int32), ok, neg, ok, 5),  # step not increasing
        ResolveBatch(np.array([0, 0, 0], np.int32), np.repeat(ok, 3, 0), np.repeat(neg, 3, 0),
                     np.repeat(ok, 3, 0), 6),  # more entries per slot than configured
        ResolveBatch(np.array([0], np.int32), ok, neg, ok + 100, 6),  # host row out of range
        ResolveBatch(np.array([0], np.int32), np.ones((1, 8), np.int32),
                     np.full((1, 8), -1, np.int32), np.ones((1, 8), np.int32), 6),  # K > top_k
        ResolveBatch(np.array([0], np.int32), ok + 4, neg, ok, 6),  # position >= max_positions
    ]
    for batch in bad:
        with pytest.raises(BadBatch):
            pair.cuda.resolve(pair.c_lead, batch)
    with pytest.raises(BadBatch, match="follower"):
        pair.cuda.resolve(pair.c_fol, ResolveBatch(np.array([0], np.int32), ok, neg, ok, 7))
    for spill in [(1, 2, 0), (1, 0, 4), (-1, 0, 0), (1, 0, 1), (True, 0, 0)]:
        spills = [(2, 0, 1), spill]  # the good first spill must not be queued either
        with pytest.raises(BadTransfer):
            pair.cuda.enqueue_spills(pair.c_lead, spills)
    assert pair.cuda.queued() == []
    after = pair.cuda.snapshot(pair.c_lead)
    for key in before:
        np.testing.assert_array_equal(after[key], before[key], err_msg=key)


def filled(layout: PoolLayout, top_k: int, positions: int, seed: int) -> tuple[Any, Any, Any]:
    """A CUDA executor, its pools, and the random bytes written to every device row."""
    ex = cuda_executor(top_k=top_k, max_positions=positions)
    pools = ex.allocate(layout)
    rng = np.random.default_rng(seed)
    device = rng.integers(0, 256, (layout.device_rows, layout.row_bytes), dtype=np.uint8)
    ex.write_device_rows(pools, np.arange(layout.device_rows), device)
    return ex, pools, device


def test_spills_land_with_events_and_guard_host_reads() -> None:
    layout = PoolLayout(gpu_blocks=4, host_blocks=8, block_tokens=64, row_bytes=656, hot_rows=4,
                    slots=1)
    ex, pools, device = filled(layout, top_k=2, positions=4, seed=0)
    ex.enqueue_spills(pools, [(7, 1, 5), (8, 3, 0)])
    assert ex.queued() == [7, 8]
    with pytest.raises(BadTransfer, match="still has copy"):
        ex.enqueue_spill(pools, 9, 0, 5)  # destination lease still held
    # The CPU reader waits on the host-write event instead of seeing stale bytes.
    got = ex.read_host_rows(pools, np.arange(5 * 64, 6 * 64))
    np.testing.assert_array_equal(got, device[64:128])
    ex.release()
    with pytest.raises(BadTransfer, match="already completed"):
        ex.enqueue_spill(pools, 8, 0, 2)  # landed, not yet reported
    assert sorted(ex.completed()) == [7, 8]
    assert ex.queued() == [] and ex.completed() == []
    np.testing.assert_array_equal(ex.snapshot(pools)["host"][:64], device[192:256])


def test_resolve_reads_spills_enqueued_before_it() -> None:
    """A miss on a host block whose spill is only *enqueued* reads the spilled bytes."""
    layout = PoolLayout(gpu_blocks=2, host_blocks=2, block_tokens=64, row_bytes=656, hot_rows=128,
                    slots=1)
    ex, pools, device = filled(layout, top_k=64, positions=64, seed=1)
    ex.enqueue_spill(pools, 1, 0, 1)
    topk = np.arange(64, dtype=np.int32)[None]
    res = ex.resolve(pools, ResolveBatch(np.array([0], np.int32), topk, np.full_like(topk, -1),
                                         topk + 64, 1)).to_host()
    np.testing.assert_array_equal(ex.read_device_rows(pools, res.rows[0]), device[:64])


def _graph_case() -> tuple[PoolLayout, int, list[ResolveBatch]]:
    k = 256
    layout = PoolLayout(gpu_blocks=4, host_blocks=32, block_tokens=64, row_bytes=656,
                    hot_rows=2 * k, slots=4)
    rng = np.random.default_rng(5)
    batches = []
    for step in range(1, 6):
        t = rng.integers(0, 1500, (4, k)).astype(np.int32)
        resident = np.where(rng.random(t.shape) < 0.3,
                            rng.integers(0, layout.resident_rows, t.shape), -1).astype(np.int32)
        host = rng.integers(0, layout.host_rows, t.shape).astype(np.int32)
        batches.append(ResolveBatch(np.arange(4, dtype=np.int32), t, resident, host, step))
    return layout, k, batches


def _fill(buffers: Any, batch: ResolveBatch, stream: Any) -> None:
    buffers.slots.set(batch.slots, stream=stream)
    buffers.topk.set(batch.topk, stream=stream)
    buffers.resident_row.set(batch.resident_row, stream=stream)
    buffers.host_row.set(batch.host_row, stream=stream)
    buffers.step.set(np.array([batch.step], np.int64), stream=stream)


def _check_graph(pair: Pair, buffers: Any, launch: Any, batches: list[ResolveBatch],
                 stream: Any) -> None:
    for batch in batches:
        _fill(buffers, batch, stream)
        launch()
        want = pair.ref.resolve(pair.r_lead, batch)
        pair.ref.replay(pair.r_fol, want.plan)
        got = buffers.result.to_host()
        np.testing.assert_array_equal(got.rows, want.rows)
        np.testing.assert_array_equal(got.plan, want.plan)
        pair.same_state()


def test_cupy_graph_capture_replays_with_new_inputs() -> None:
    import cupy

    from hisparse.executor.cuda import ResolveBuffers

    layout, k, batches = _graph_case()
    stream = cupy.cuda.Stream(non_blocking=True)
    pair = Pair(layout, k, 1, 1500, stream=stream)
    buffers = ResolveBuffers.allocate(4, k)
    cupy.cuda.Device().synchronize()
    with stream:
        stream.begin_capture()
        pair.cuda.launch_resolve(pair.c_lead, buffers)
        pair.cuda.replay(pair.c_fol, buffers.result.plan)
        graph = stream.end_capture()
    _check_graph(pair, buffers, lambda: graph.launch(stream), batches, stream)


def test_torch_graph_capture_replays_with_new_inputs() -> None:
    torch = pytest.importorskip("torch", reason="torch is needed for the torch.cuda.graph GPU test")
    import cupy

    from hisparse.executor.cuda import ResolveBuffers

    layout, k, batches = _graph_case()
    side = torch.cuda.Stream()
    stream = cupy.cuda.ExternalStream(side.cuda_stream)
    pair = Pair(layout, k, 1, 1500, stream=stream)
    buffers = ResolveBuffers.allocate(4, k)
    cupy.cuda.Device().synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        pair.cuda.launch_resolve(pair.c_lead, buffers)
        pair.cuda.replay(pair.c_fol, buffers.result.plan)

    def launch() -> None:
        with torch.cuda.stream(side):
            graph.replay()

    _check_graph(pair, buffers, launch, batches, stream)


@pytest.mark.parametrize("speculative", [0, 2])
def test_simulate_on_cuda_is_clean(speculative: int) -> None:
    from hisparse.simulate import SimulateOptions, simulate

    rep = simulate(SimulateOptions(requests=32, steps=200, seed=1, num_speculative_tokens=speculative,
                                   executor="cuda"))
    assert rep.violations == 0 and rep.data_mismatches == 0, rep.notes
    assert rep.spills > 0 and rep.hot_hits > 0 and rep.misses > 0


def test_graph_replay_without_a_new_step_is_refused() -> None:
    """A replay that does not raise the step changes nothing, leaves rows -1 and no plan,
    and the next host call raises StaleStep; the following steps resolve normally."""
    import cupy

    from hisparse.executor.cuda import ResolveBuffers

    layout, k, batches = _graph_case()
    stream = cupy.cuda.Stream(non_blocking=True)
    pair = Pair(layout, k, 1, 1500, stream=stream)
    buffers = ResolveBuffers.allocate(4, k)
    cupy.cuda.Device().synchronize()
    with stream:
        stream.begin_capture()
        pair.cuda.launch_resolve(pair.c_lead, buffers)
        pair.cuda.replay(pair.c_fol, buffers.result.plan)
        graph = stream.end_capture()
    _check_graph(pair, buffers, lambda: graph.launch(stream), batches[:1], stream)
    stale = batches[1]
    _fill(buffers, ResolveBatch(stale.slots, stale.topk, stale.resident_row, stale.host_row,
                                batches[0].step), stream)
    graph.launch(stream)
    with pytest.raises(StaleStep):
        buffers.result.to_host()
    assert (cupy.asnumpy(buffers.result.rows) == -1).all()
    assert (cupy.asnumpy(buffers.result.plan.counts) == 0).all()
    pair.same_state()  # nothing moved: neither the leader's state nor the follower's rows
    _check_graph(pair, buffers, lambda: graph.launch(stream), batches[1:], stream)


def _spin_kernel() -> Any:
    import cupy

    return cupy.RawKernel(r"""
    extern "C" __global__ void spin_ns(long long ns) {
        unsigned long long t0, t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
        do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
    }""", "spin_ns")


def _wide_case(n: int, k: int) -> tuple[PoolLayout, list[ResolveBatch]]:
    """n slots of k hot rows, one all-miss entry per slot (a long copy-bound launch)."""
    layout = PoolLayout(gpu_blocks=2, host_blocks=64, block_tokens=64, row_bytes=656, hot_rows=k,
                    slots=n)
    rng = np.random.default_rng(11)
    batches = []
    for step, width in ((1, n), (2, 4), (3, 4)):
        topk = np.stack([rng.permutation(8 * k)[:k] for _ in range(width)]).astype(np.int32)
        host = rng.integers(0, layout.host_rows, topk.shape).astype(np.int32)
        batches.append(ResolveBatch(np.arange(width, dtype=np.int32), topk,
                                    np.full_like(topk, -1), host, step))
    return layout, batches


def test_concurrent_launches_on_one_cache_are_refused() -> None:
    """A launch that starts while another holds the same pools refuses (rows -1, nothing
    changed), the one holding them completes correctly, no block waits on the other;
    the cache then refuses every launch until recover(), and resolves normally after."""
    import cupy

    from hisparse.executor.cuda import ResolveBuffers

    n, k = 512, 256
    layout, (first, second, third) = _wide_case(n, k)
    low = cupy.cuda.Stream(non_blocking=True)
    high = cupy.cuda.Stream(non_blocking=True, priority=-100)  # clamped to the greatest
    pair = Pair(layout, k, 1, 8 * k, stream=low)
    other = cuda_executor(top_k=k, max_positions=8 * k, stream=high)
    bufs = []
    for batch, stream in ((first, low), (second, high)):
        buf = ResolveBuffers.allocate(len(batch.slots), k)
        _fill(buf, batch, stream)
        bufs.append(buf)
    spin = _spin_kernel()
    cupy.cuda.Device().synchronize()
    # Both launches are queued behind spins, so the second starts ~300 µs into the
    # first (which copies 86 MB from pinned memory, about 2 ms); the high-priority stream
    # gets its blocks scheduled ahead of the first launch's pending ones.
    with low:
        spin((1,), (1,), (np.int64(1_000_000),))
        pair.cuda.launch_resolve(pair.c_lead, bufs[0])
        pair.cuda.replay(pair.c_fol, bufs[0].result.plan)
    with high:
        spin((1,), (1,), (np.int64(1_300_000),))
        other.launch_resolve(pair.c_lead, bufs[1])
    cupy.cuda.Device().synchronize()
    want = pair.ref.resolve(pair.r_lead, first)
    pair.ref.replay(pair.r_fol, want.plan)
    np.testing.assert_array_equal(cupy.asnumpy(bufs[0].result.rows), want.rows)
    assert (cupy.asnumpy(bufs[1].result.rows) == -1).all()
    assert (cupy.asnumpy(bufs[1].result.plan.counts) == 0).all()
    pair.same_state()  # the refused launch touched nothing
    with pytest.raises(LaunchConflict):
        pair.cuda.completed()
    before = pair.cuda.snapshot(pair.c_lead)
    with pytest.raises(LaunchConflict):  # poisoned: refused on the host, nothing queued
        pair.cuda.resolve(pair.c_lead, second)
    after = pair.cuda.snapshot(pair.c_lead)
    for key in before:
        np.testing.assert_array_equal(after[key], before[key], err_msg=key)
    pair.cuda.recover(pair.c_lead)
    for slot in range(layout.slots):
        pair.ref.reset_slot(pair.r_lead, slot)
    pair.step(third)


def test_unfinished_launch_is_refused_until_recover() -> None:
    """Control words left as by a launch that stopped after three blocks took tickets and
    its copy queue passed two entries: the next launch neither hangs nor decides
    anything; every later one refuses on the host until recover(), after which every
    entry's copies land again (the queue starts from entry 0)."""
    import cupy

    from hisparse.executor.cuda.kernels import CTRL_DONE, CTRL_FRONT, CTRL_OWNER, CTRL_TICKETS

    layout, _, batches = _graph_case()
    pair = Pair(layout, 256, 1, 1500)
    pair.step(batches[0])
    pools = pair.c_lead
    with pair.cuda.stream:
        pools.ctrl[CTRL_OWNER] = (1 << 62) | 7  # owned by a launch of step 7
        pools.ctrl[CTRL_TICKETS] = 3
        pools.ctrl[CTRL_DONE] = 1
        pools.ctrl[CTRL_FRONT] = 2  # its copy queue had moved past entries 0 and 1
    before = pair.cuda.snapshot(pools)
    res = pair.cuda.resolve(pools, batches[1])
    with pytest.raises(LaunchConflict):
        res.to_host()
    assert (cupy.asnumpy(res.rows) == -1).all()
    after = pair.cuda.snapshot(pools)
    for key in before:
        np.testing.assert_array_equal(after[key], before[key], err_msg=key)
    with pytest.raises(LaunchConflict):
        pair.cuda.resolve(pools, batches[2])
    pair.cuda.recover(pools)
    for slot in range(layout.slots):
        pair.ref.reset_slot(pair.r_lead, slot)
    for batch in batches[2:]:
        pair.step(batch)
