"""``CudaExecutor``: the HiSparse executor on an NVIDIA GPU, through CuPy.

Decode path per leader cache: one ``hisparse_resolve`` launch (after a device-side wait
on the spill stream), then one ``hisparse_replay`` per follower, all in the compute
stream. Nothing on that path reads device memory back or waits on the host; inputs go
up with one asynchronous copy, outputs stay on the device (``CudaResolveResult``).
``ResolveBuffers`` + ``launch_resolve`` is the allocation-free form for CUDA graphs.

Spills run on their own stream, ordered after the producing work by an event; their
*enqueued* ack is the return of ``enqueue_spills``, their *completed* ack the first
``completed()`` poll that finds the batch's event done.

P/D imports (``executor.importing.ImportExecutor``): ``import_memory`` is the resident
region in VRAM, ``staging_pool`` a staging pool in VRAM on the compute stream,
``write_host_block`` one asynchronous device -> pinned host copy on that stream, and
``write_host_blocks`` many staged blocks of one cache in one copy launch (the runner's
path when its staging pool is in VRAM).
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from hisparse.executor.base import ResolveBatch, SpillCopy
from hisparse.executor.cuda.backend import load_cupy
from hisparse.executor.cuda.hostmem import HostArena, PrivateHost
from hisparse.executor.cuda.kernels import (
    COPY_THREADS,
    LAUNCH_WORDS,
    RESOLVE_THREADS,
    ResolverShape,
    compile_kernels,
    positions_per_thread,
    rows_per_thread,
)
from hisparse.executor.cuda.pools import ABSENT, CudaPools, allocate_pools
from hisparse.executor.cuda.results import CudaResolveResult, DevicePlan, ResolveBuffers
from hisparse.executor.cuda.staging import DeviceStagingPool
from hisparse.executor.errors import BadBatch, BadPlan, BadTransfer, PendingHostWrite
from hisparse.executor.layout import ROW_ALIGN, PoolLayout, min_hot_rows
from hisparse.executor.validate import (
    check_batch,
    check_host_block,
    check_host_rows,
    check_plan,
    check_spills,
)


@dataclass(eq=False)
class _SpillBatch:
    """One spill launch: its completion event and what it writes."""

    done: Any  # cupy.cuda.Event recorded on the spill stream after the copy kernel
    pools: CudaPools
    spills: list[SpillCopy]
    landed: bool = False


class CudaExecutor:
    """``Executor[CudaPools]`` on an NVIDIA GPU.

    ``top_k`` and ``num_speculative_tokens`` fix the resolver's shape limits when pools
    are allocated, so no launch has to check capacity: a slot holds up to
    ``num_speculative_tokens + 1`` entries of a batch (``entries_per_slot``), and its hot
    rows must hold ``entries_per_slot * top_k`` rows (``min_hot_rows``).
    ``max_positions`` bounds logical positions
    (the longest context): each slot keeps a position -> hot-row index of that length
    (4 bytes per position per slot) so a lookup is one load. ``stream`` is the compute
    stream (default: the current CuPy stream at construction; wrap a torch stream with
    ``cupy.cuda.ExternalStream``). ``host_arena`` backs the host pools (default: private
    pinned memory per cache; ``hostmem.SharedHost`` for one allocation shared by ranks).
    """

    def __init__(
        self, *, top_k: int, max_positions: int, num_speculative_tokens: int = 0, device: int = 0,
        stream: Any = None, host_arena: HostArena | None = None,
    ) -> None:
        cupy = load_cupy()
        self._cupy = cupy
        self.top_k = top_k
        self.max_positions = max_positions
        self.num_speculative_tokens = num_speculative_tokens
        self.entries_per_slot = num_speculative_tokens + 1  # a slot's entries in one batch
        self.device_id = device
        self.host_arena: HostArena = host_arena if host_arena is not None else PrivateHost()
        ResolverShape.of(
            min_hot_rows(top_k, num_speculative_tokens), top_k, num_speculative_tokens,
            max_positions,
        )
        with cupy.cuda.Device(device):
            self.kernels = compile_kernels(device)  # replay and spill need no options
            self.sms = int(cupy.cuda.runtime.getDeviceProperties(device)["multiProcessorCount"])
            self.stream = stream if stream is not None else cupy.cuda.get_current_stream()
            self.spill_stream = cupy.cuda.Stream(non_blocking=True)
        self._batches: list[_SpillBatch] = []
        self._pending: dict[int, list[_SpillBatch]] = {}  # transfer ID -> its copies, in order
        self._landed: list[int] = []
        self._spills_unwaited = False
        self.resolvers: dict[ResolverShape, Any] = {}
        """The resolver kernel compiled for each pool shape (rows per thread differ)."""
        self._leaders: weakref.WeakSet[CudaPools] = weakref.WeakSet()
        """Leader pools allocated here, whose launch refusals ``completed()`` reports."""

    @property
    def copies_spills(self) -> bool:
        """Every spill is copied by this executor (``Executor.copies_spills``)."""
        return True

    def defines(self, hot_rows: int) -> tuple[str, ...]:
        """NVRTC options of the resolver for ``hot_rows``: per-thread register chunks are
        compile-time constants. ``HISPARSE_NVRTC_OPTIONS`` adds options (tuning only)."""
        extra = tuple(os.environ.get("HISPARSE_NVRTC_OPTIONS", "").split())
        return (
            f"-DHS_IPT={positions_per_thread(self.top_k)}",
            f"-DHS_HPT={rows_per_thread(hot_rows)}",
            *extra,
        )

    # -- pools --------------------------------------------------------------------

    def allocate(self, layout: PoolLayout, *, lru: bool = True) -> CudaPools:
        """Device pools plus a mapped pinned host pool of ``layout.host_rows`` rows."""
        shape = None
        if lru:
            shape = ResolverShape.of(
                layout.hot_rows, self.top_k, self.num_speculative_tokens, self.max_positions
            )
            self._resolver(shape)  # compile now, not at the first (maybe captured) launch
        assert layout.row_bytes % ROW_ALIGN == 0  # PoolLayout enforces it
        with self._cupy.cuda.Device(self.device_id), self.stream:
            pools = allocate_pools(layout, shape, self.host_arena)
        if shape is not None:
            self._leaders.add(pools)
        return pools

    def reset_slot(self, pools: CudaPools, slot: int) -> None:
        """Empty one slot's hot state for a newly admitted request (tags, stamps, order)."""
        if pools.shape is None:
            raise BadBatch("a follower's pools have no hot state to reset")
        if not 0 <= slot < pools.layout.slots:
            raise BadBatch(f"slot {slot} outside 0..{pools.layout.slots - 1}")
        cupy = self._cupy
        with self.stream:
            pools.hot_tag[slot] = -1
            pools.hot_stamp[slot] = -1
            pools.lru_order[slot] = cupy.arange(pools.layout.hot_rows, dtype=cupy.int32)
            pools.where[slot] = ABSENT

    def recover(self, pools: CudaPools) -> None:
        """After ``LaunchConflict`` / ``CopyWaitExpired``: wait for the stream, release the
        launch control and empty every slot's hot state (every position misses next, so
        leaders and followers refill from the host pool). Not a decode-path call."""
        if pools.shape is None:
            raise BadBatch("a follower's pools have no launch state to recover")
        self.stream.synchronize()
        with self.stream:
            for word in LAUNCH_WORDS:
                pools.ctrl[word] = 0
            for slot in range(pools.layout.slots):
                self.reset_slot(pools, slot)
            pools.ready[...] = -1
        self.stream.synchronize()
        pools.refusals_seen[:] = [int(c) for c in pools.status]
        pools.poisoned = False

    # -- spills -------------------------------------------------------------------

    def enqueue_spill(
        self, pools: CudaPools, transfer_id: int, src_gpu_block: int, dst_host_block: int
    ) -> None:
        """One spill; ``enqueue_spills`` batches a step's spills into one launch."""
        self.enqueue_spills(pools, [(transfer_id, src_gpu_block, dst_host_block)])

    def checked_spills(self, pools: CudaPools, spills: Sequence[SpillCopy]) -> list[SpillCopy]:
        """A step's spills for one cache, checked whole (``BadTransfer``); changes nothing."""
        checked = check_spills(pools.layout, spills)
        for t, _, d in checked:
            if t in self._landed:
                raise BadTransfer(f"transfer {t} has already completed; use a fresh transfer ID")
            if any(b.pools is pools for b in self._pending.get(t, ())):
                raise BadTransfer(
                    f"transfer {t} already has a copy queued for this cache; "
                    "one transfer moves one page per cache"
                )
            if d in pools.pending_blocks:
                raise BadTransfer(
                    f"host block {d} still has copy {pools.pending_blocks[d]} queued into it; "
                    "its destination lease is held until that copy completes"
                )
        return checked

    def enqueue_spills(self, pools: CudaPools, spills: Sequence[SpillCopy]) -> None:
        """Queue whole-block copies device -> pinned host after the work already queued on
        the compute stream, in one kernel launch on the spill stream.

        Everything is checked before anything is queued (``BadTransfer``): coordinates in
        range, one copy per transfer ID per cache, no host block written twice in flight.
        """
        checked = self.checked_spills(pools, spills)
        if not checked:
            return
        layout = pools.layout
        cupy = self._cupy
        produced = cupy.cuda.Event(block=False, disable_timing=True)
        produced.record(self.stream)
        pairs = np.array([(d, s) for _, s, d in checked], dtype=np.int32)  # (dst, src)
        pairs = pairs[np.argsort(pairs[:, 0], kind="stable")]  # write host memory in order
        bv = layout.block_tokens * layout.row_bytes // 16
        with self.spill_stream:
            self.spill_stream.wait_event(produced)
            dev_pairs = cupy.empty(pairs.shape, dtype=cupy.int32)
            dev_pairs.set(pairs, stream=self.spill_stream)
            total = len(checked) * bv
            grid = max(1, min(-(-total // (4 * COPY_THREADS)), 4 * self.sms))
            self.kernels.spill(
                (grid,), (COPY_THREADS,),
                (dev_pairs, np.int32(len(checked)), np.int32(bv), pools.device,
                 pools.host_device),
            )
            done = cupy.cuda.Event(block=False, disable_timing=True)
            done.record(self.spill_stream)
        batch = _SpillBatch(done, pools, checked)
        self._batches.append(batch)
        for t, _, d in checked:
            self._pending.setdefault(t, []).append(batch)
            pools.pending_blocks[d] = t
        self._spills_unwaited = True

    def _land(self, batch: _SpillBatch) -> None:
        batch.landed = True
        for t, _, d in batch.spills:
            if batch.pools.pending_blocks.get(d) == t:
                del batch.pools.pending_blocks[d]
            copies = self._pending.get(t, [])
            if all(b.landed for b in copies):
                self._pending.pop(t, None)
                self._landed.append(t)
        self._batches.remove(batch)

    def completed(self) -> list[int]:
        """Transfer IDs whose every copy has landed since the last call; polls events,
        never waits. First raises any resolver refusal the device reported since the
        last check (``LaunchRefused``; landed IDs wait for the next call)."""
        for pools in list(self._leaders):
            pools.check_launches(sticky=False)
        for batch in list(self._batches):
            if batch.done.done:
                self._land(batch)
        done, self._landed = self._landed, []
        return done

    def queued(self) -> list[int]:
        """Transfer IDs enqueued whose landing has not yet been observed, oldest first."""
        return list(self._pending)

    def release(self, count: int | None = None) -> None:
        """Wait (host-side) until the ``count`` oldest queued transfers (all when None)
        have landed; for drains and tests, never for the decode path."""
        tids = self.queued()
        if count is None:
            count = len(tids)
        if not 0 <= count <= len(tids):
            raise ValueError(f"cannot release {count} of {len(tids)} queued transfers")
        for t in tids[:count]:
            for batch in list(self._pending.get(t, [])):
                batch.done.synchronize()
                if not batch.landed:
                    self._land(batch)

    def read_host_rows(self, pools: CudaPools, rows: NDArray[np.int64]) -> NDArray[np.uint8]:
        """Host rows for a CPU reader, after waiting on the host-write event of any copy
        still queued into their blocks (a spill's, or an import's ``write_host_block``)."""
        layout = pools.layout
        checked = check_host_rows(layout, rows)
        blocks = {int(b) for b in np.unique(checked // layout.block_tokens)}
        for block in blocks:
            tid = pools.pending_blocks.get(block)
            if tid is not None:
                for batch in list(self._pending.get(tid, [])):
                    if batch.pools is pools:
                        batch.done.synchronize()
                        self._land(batch)
        if pools.import_event is not None and not blocks.isdisjoint(pools.import_blocks):
            pools.import_event.synchronize()  # the newest covers every earlier one
            pools.import_blocks.clear()
        return pools.host[checked].copy()

    def _order_after_spills(self) -> None:
        """The compute stream waits (on the device) for every spill enqueued so far: the
        block table points at a host block from the enqueued ack on."""
        if self.stream.is_capturing():  # the caller orders a graph launch after spills
            return
        if self._spills_unwaited and self._batches:
            self.stream.wait_event(self._batches[-1].done)
        self._spills_unwaited = False

    # -- decode -------------------------------------------------------------------

    def resolve(self, pools: CudaPools, batch: ResolveBatch) -> CudaResolveResult:
        """Validate on the host, upload with one async copy, one resolver launch.

        Returns device outputs without synchronizing; ``result.to_host()`` reads them back.
        Raises ``LaunchRefused`` first if the device refused an earlier launch.
        """
        pools.check_launches()
        check_batch(pools.layout, batch, pools.last_step)
        n, k = batch.topk.shape
        shape = self._leader_shape(pools, k)
        if n and batch.topk.max() >= shape.max_positions:
            e, i = np.argwhere(batch.topk >= shape.max_positions)[0]
            raise BadBatch(
                f"entry {e} position {i}: topk {batch.topk[e, i]} is not below the "
                f"executor's max_positions {shape.max_positions}"
            )
        if n:
            _, per_slot = np.unique(batch.slots, return_counts=True)
            if per_slot.max() > self.entries_per_slot:
                raise BadBatch(
                    f"a slot has {per_slot.max()} entries; this executor is configured for "
                    f"num_speculative_tokens={self.num_speculative_tokens} "
                    f"({self.entries_per_slot} entries per slot)"
                )
        cupy = self._cupy
        packed = np.empty(2 + n + 3 * n * k, dtype=np.int32)
        packed[:2].view(np.int64)[0] = int(batch.step)
        packed[2 : 2 + n] = batch.slots
        body = packed[2 + n :].reshape(3, n, k)
        body[0], body[1], body[2] = batch.topk, batch.resident_row, batch.host_row
        with self.stream:
            dev = cupy.empty(packed.shape, dtype=cupy.int32)
            dev.set(packed, stream=self.stream)
            inputs = dev[2 + n :].reshape(3, n, k)
            out = CudaResolveResult.empty(n, k)
            out.check = pools.check_launches
            if n:
                self._order_after_spills()
                self._launch(pools, shape, dev[2 : 2 + n], inputs[0], inputs[1], inputs[2],
                             dev[:2].view(cupy.int64), out)
        pools.last_step = int(batch.step)
        return out

    def launch_resolve(self, pools: CudaPools, buffers: ResolveBuffers) -> CudaResolveResult:
        """Resolve the batch already in ``buffers`` with one launch on the compute stream:
        no validation, no allocation, no host work, so it can be captured in a CUDA graph
        and replayed with new inputs. The caller keeps the contract ``resolve`` checks
        (slot runs, ranges, increasing step) and orders it after spills
        (``order_after_spills``) outside the graph. A replay whose step does not exceed
        the last completed launch's is refused on the device (``StaleStep`` at the next
        host call), as are concurrent launches on the same pools (``LaunchConflict``)."""
        pools.check_launches()
        shape = self._leader_shape(pools, buffers.topk.shape[1])
        buffers.result.check = pools.check_launches
        with self.stream:
            self._launch(pools, shape, buffers.slots, buffers.topk, buffers.resident_row,
                         buffers.host_row, buffers.step, buffers.result)
        return buffers.result

    def order_after_spills(self) -> None:
        """Make the compute stream wait, on the device, for every spill enqueued so far."""
        with self.stream:
            self._order_after_spills()

    def _resolver(self, shape: ResolverShape) -> Any:
        """The resolver kernel for ``shape``, compiled on first use."""
        kernel = self.resolvers.get(shape)
        if kernel is None:
            kernel = compile_kernels(self.device_id, self.defines(shape.hot_rows)).resolve
            kernel.max_dynamic_shared_size_bytes = shape.smem
            self.resolvers[shape] = kernel
        return kernel

    def _leader_shape(self, pools: CudaPools, k: int) -> ResolverShape:
        """The pools' resolver shape, if they can resolve a top-K of ``k``."""
        if pools.shape is None:
            raise BadBatch("these are a follower's pools: they have no LRU state; use replay")
        if k > pools.shape.top_k:
            raise BadBatch(f"top-K {k} exceeds the executor's top_k {pools.shape.top_k}")
        return pools.shape

    def _launch(
        self, pools: CudaPools, shape: ResolverShape, slots: Any, topk: Any, resident: Any,
        host: Any, step: Any, out: CudaResolveResult,
    ) -> None:
        layout = pools.layout
        n, k = topk.shape
        helpers = max(0, self.sms - n)  # idle SMs help copy the misses of few, big runs
        self._resolver(shape)(
            (n + helpers,), (RESOLVE_THREADS,),
            (slots, topk, resident, host, step, np.int32(n), np.int32(k),
             pools.hot_tag, pools.hot_stamp, pools.lru_order, pools.where, pools.ready,
             pools.ctrl, pools.status_device, pools.host_device, pools.device,
             np.int32(layout.hot_rows), np.int32(shape.max_positions),
             np.int32(layout.resident_rows),
             np.int32(layout.row_bytes // 16),
             out.rows, out.plan.pairs, out.plan.counts, out.counters, out.plan.copy_pairs,
             out.take),
            shared_mem=shape.smem,
        )

    def replay(self, follower: CudaPools, plan: DevicePlan | NDArray[np.int32]) -> None:
        """Copy-only replay of a leader's plan into a follower (one launch, no readback).

        A ``DevicePlan`` comes from this executor's resolve and is trusted; a host plan
        (int32 [m, 2]) is checked first (``BadPlan``) and uploaded.
        """
        cupy = self._cupy
        with self.stream:
            if not isinstance(plan, DevicePlan):
                check_plan(follower.layout, plan)
                if plan.shape[0] == 0:
                    return
                pairs = cupy.asarray(plan.reshape(1, -1, 2))
                plan = DevicePlan(pairs, cupy.full(1, plan.shape[0], dtype=cupy.int32))
            n, k, _ = plan.pairs.shape
            if n == 0 or k == 0:
                return
            rv = follower.layout.row_bytes // 16
            per_entry = max(1, min(-(-k * rv // (4 * COPY_THREADS)), -(-2 * self.sms // n)))
            pairs = plan.copy_pairs if plan.copy_pairs is not None else plan.pairs
            self._order_after_spills()
            self.kernels.replay(
                (n, per_entry), (COPY_THREADS,),
                (pairs, plan.counts, np.int32(k), np.int32(rv), follower.host_device,
                 follower.device),
            )

    # -- direct access (setup, tests, checkers; each call synchronizes) -------------

    def write_device_rows(
        self, pools: CudaPools, rows: NDArray[np.int64], data: Any
    ) -> None:
        """Write whole device rows (prefill, tests; an import's mirror and a device page's
        tail). ``data`` is host (NumPy) or device (CuPy: a staging slot) memory. In stream
        order after every spill enqueued so far, which read their source blocks then, as
        the reference's snapshot does."""
        cupy = self._cupy
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size and (rows.min() < 0 or rows.max() >= pools.layout.device_rows):
            raise BadPlan(f"device rows outside 0..{pools.layout.device_rows - 1}")
        with self.stream:
            self._order_after_spills()
            pools.device[cupy.asarray(rows)] = cupy.asarray(data, dtype=cupy.uint8)

    # -- P/D import (executor.importing.ImportExecutor) ------------------------------

    def import_memory(self, pools: CudaPools) -> Any:
        """The resident region of the device pool, ``[resident_rows, row_bytes]`` uint8:
        a CuPy array in VRAM (a view), which a NIXL transport registers as ``VRAM`` and
        READs into directly (device target)."""
        return pools.device[: pools.layout.resident_rows]

    def staging_pool(self, capacity_bytes: int, slots: int, page_bytes: int) -> DeviceStagingPool:
        """The import staging pool for these caches: VRAM on this GPU, every write on the
        compute stream, a READ into device memory ordered after queued spills."""
        with self._cupy.cuda.Device(self.device_id):
            return DeviceStagingPool(
                capacity_bytes, slots, page_bytes, stream=self.stream, device=self.device_id,
                before_write=self.order_after_spills,
            )

    def write_host_block(self, pools: CudaPools, host_block: int, data: Any) -> None:
        """A staged page (``[block_tokens, row_bytes]``, a CuPy view of a staging slot, or
        host memory) into host block ``host_block``: one asynchronous device -> pinned
        host copy on the compute stream, so later decodes and spills into the block follow
        it and a CPU reader (``read_host_rows``) waits for it. Refused exactly as the
        reference refuses: out of range or the wrong shape as ``BadPlan``, a spill copy
        still queued into the block as ``PendingHostWrite``; a refusal copies nothing."""
        layout = pools.layout
        check_host_block(layout, host_block, tuple(data.shape))
        tid = pools.pending_blocks.get(host_block)
        if tid is not None:  # a spill copy still lands there
            raise PendingHostWrite(host_block, tid)
        cupy = self._cupy
        start = layout.host_row(host_block, 0)
        nbytes = layout.block_tokens * layout.row_bytes
        with cupy.cuda.Device(self.device_id), self.stream:
            if isinstance(data, np.ndarray):  # host memory goes up first, in stream order
                data = np.ascontiguousarray(data, dtype=np.uint8)
            src = cupy.ascontiguousarray(cupy.asarray(data, dtype=cupy.uint8))
            dst = pools.host_device[start : start + layout.block_tokens]
            dst.data.copy_from_device_async(src.data, nbytes, self.stream)
            if pools.import_event is None:
                pools.import_event = cupy.cuda.Event(block=False, disable_timing=True)
            pools.import_event.record(self.stream)
        pools.import_blocks.add(host_block)

    def write_host_blocks(
        self, pools: CudaPools, source: Any, copies: Sequence[tuple[int, int]]
    ) -> None:
        """Many staged blocks in one launch: ``source`` is a contiguous uint8 device array
        seen as whole blocks of ``block_tokens * row_bytes`` bytes (the staging buffer of a
        ``DeviceStagingPool`` whose slots hold whole blocks), ``copies`` are (host block,
        source block) pairs. Checked whole before anything is queued, each pair refused as
        ``write_host_block`` refuses it (``BadPlan``, ``PendingHostWrite``), a source block
        outside ``source`` or a host block named twice as ``BadPlan``; then one launch of
        the spill copy kernel on the compute stream (device -> mapped pinned host), which
        streams small blocks at PCIe rate where one copy per block would not."""
        layout = pools.layout
        block_bytes = layout.block_tokens * layout.row_bytes
        if (source.dtype != np.uint8 or not source.flags.c_contiguous
                or source.nbytes % block_bytes):
            raise BadPlan(f"the source must be contiguous uint8 whole blocks of {block_bytes} "
                          f"bytes, got {source.dtype} of {source.nbytes} bytes")
        blocks = source.nbytes // block_bytes
        seen: set[int] = set()
        for host_block, src in copies:
            check_host_block(layout, host_block)
            if not 0 <= src < blocks:
                raise BadPlan(f"source block {src} outside 0..{blocks - 1}")
            if host_block in seen:
                raise BadPlan(f"host block {host_block} is named twice")
            tid = pools.pending_blocks.get(host_block)
            if tid is not None:  # a spill copy still lands there
                raise PendingHostWrite(host_block, tid)
            seen.add(host_block)
        if not copies:
            return
        cupy = self._cupy
        pairs = np.array([(int(h), int(s)) for h, s in copies], dtype=np.int32)  # (dst, src)
        pairs = pairs[np.argsort(pairs[:, 0], kind="stable")]  # write host memory in order
        bv = block_bytes // 16
        with cupy.cuda.Device(self.device_id), self.stream:
            dev_pairs = cupy.empty(pairs.shape, dtype=cupy.int32)
            dev_pairs.set(pairs, stream=self.stream)
            total = len(copies) * bv
            grid = max(1, min(-(-total // (4 * COPY_THREADS)), 4 * self.sms))
            self.kernels.spill(
                (grid,), (COPY_THREADS,),
                (dev_pairs, np.int32(len(copies)), np.int32(bv), source, pools.host_device),
            )
            if pools.import_event is None:
                pools.import_event = cupy.cuda.Event(block=False, disable_timing=True)
            pools.import_event.record(self.stream)
        pools.import_blocks.update(seen)

    def read_device_rows(self, pools: CudaPools, rows: NDArray[np.int64]) -> NDArray[np.uint8]:
        """Copy device rows to the host (checkers and tests; synchronizes)."""
        cupy = self._cupy
        rows = np.asarray(rows, dtype=np.int64)
        with self.stream:
            out = cupy.asnumpy(pools.device[cupy.asarray(rows)], stream=self.stream)
        self.stream.synchronize()
        return np.asarray(out)

    def snapshot(self, pools: CudaPools) -> dict[str, NDArray[Any]]:
        """Host copies of every pool after all queued work has finished (tests)."""
        cupy = self._cupy
        self.stream.synchronize()
        self.spill_stream.synchronize()
        pools.import_blocks.clear()  # every import copy has landed
        return {
            "device": cupy.asnumpy(pools.device),
            "host": pools.host.copy(),
            "hot_tag": cupy.asnumpy(pools.hot_tag),
            "hot_stamp": cupy.asnumpy(pools.hot_stamp),
        }
