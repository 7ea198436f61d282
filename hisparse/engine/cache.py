"""The engine's KV caches: every row resident (the oracle) or HiSparse on the CUDA executor.

Both answer the same four questions inside the decode step: where a new token's row
goes (``write``), which device rows hold a top-K (``select``; followers ``follow`` their
leader), and the device rows those indices point into (``storage``). Indices come in the
top-K's order, so the attention that reads them sees the same bytes in the same order
from either cache.

Entry ``e`` of a step is verification token ``e % per_slot`` of the request in slot
``e // per_slot``. An inactive entry writes to a row nobody reads (a row of its own free
slot), so the step has one shape whatever the batch holds.

``IndexCache`` is the indexer's keys: a normal GPU cache group, untouched by HiSparse
and identical in both engines.
"""

from __future__ import annotations

from typing import Any, Protocol, cast

import numpy as np
import torch

from hisparse.engine.config import EngineShape, ModelShape
from hisparse.engine.indexer import quantize_keys
from hisparse.engine.inputs import ResolveInputs
from hisparse.engine.kvrow import ROW_WORDS, as_words
from hisparse.engine.schedule import HiSparseScheduler, PageTables
from hisparse.executor.cuda import CudaExecutor, CudaPools, CudaResolveResult, ResolveBuffers
from hisparse.executor.cuda.backend import load_cupy


def entry_layout(shape: EngineShape, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Each entry's slot and verification index, int64 [E]."""
    e = torch.arange(shape.entries, device=device)
    return e // shape.per_slot, e % shape.per_slot


class IndexCache:
    """Indexer keys per indexer owner, row ``slot * max_context + position``: bf16
    [rows, index_dim], or (``index_fp8``) FP8 bits uint8 [rows, index_dim] and float32
    scales [rows], as DeepSeek-V3.2 stores them."""

    def __init__(self, model: ModelShape, shape: EngineShape, device: torch.device) -> None:
        self.shape = shape
        self.fp8 = model.index_fp8
        rows = shape.slots * shape.max_context
        dtype = torch.uint8 if self.fp8 else torch.bfloat16
        self.keys = {
            layer: torch.zeros(rows, model.index_dim, dtype=dtype, device=device)
            for layer in model.leaders
        }
        self.scales = {
            layer: torch.zeros(rows, dtype=torch.float32, device=device)
            for layer in (model.leaders if self.fp8 else [])
        }

    def write(self, layer: int, keys: torch.Tensor, slot: torch.Tensor, pos: torch.Tensor) -> None:
        at = slot * self.shape.max_context + pos
        if self.fp8:
            bits, scale = quantize_keys(keys)
            self.keys[layer].view(torch.int64).index_copy_(0, at, bits.view(torch.int64))
            self.scales[layer].index_copy_(0, at, scale)
            return
        self.keys[layer].view(torch.int64).index_copy_(
            0, at, keys.contiguous().view(torch.int64))

    def view(self, layer: int) -> Any:
        """[N, T, Di] keys, or (FP8 bits [N, T, Di], scales [N, T])."""
        n, t = self.shape.slots, self.shape.max_context
        keys = self.keys[layer].view(n, t, -1)
        return (keys, self.scales[layer].view(n, t)) if self.fp8 else keys

    def tensors(self) -> list[torch.Tensor]:
        """Every tensor of the group, [rows, ...] each (keys, then FP8 scales): what
        an offload copies, block by block (engine/offload_gpu.py)."""
        return [*self.keys.values(), *self.scales.values()]

    @property
    def nbytes(self) -> int:
        return sum(k.numel() * k.element_size() for k in self.tensors())


class KVCache(Protocol):
    """What the decode step asks of a KV cache (see the module docstring)."""

    def bind(self, inputs: torch.Tensor) -> None:
        """The step's fixed input buffer, int64 [3, E]: token, position, active."""
        ...

    def begin_step(self) -> None:
        """Once per step, before any layer: where this step's rows go."""
        ...

    def write(self, layer: int, rows: torch.Tensor) -> None: ...

    def select(self, layer: int, topk: torch.Tensor) -> torch.Tensor:
        """Device rows [E, K] of an indexer owner's top-K (-1: padding or inactive)."""
        ...

    def follow(self, layer: int, leader: int) -> None: ...

    def storage(self, layer: int) -> torch.Tensor:
        """int64 [R, 82]: the rows ``select``'s indices point into."""
        ...

    def counters(self) -> torch.Tensor: ...

    def upload(self) -> None: ...

    def prefill_targets(
        self, slot: int, length: int
    ) -> tuple[torch.Tensor, torch.Tensor]: ...

    def write_rows(self, layer: int, targets: torch.Tensor, rows: torch.Tensor) -> None: ...

    @property
    def nbytes(self) -> int: ...


class ResidentCache:
    """Every position's row in one plain tensor per layer: row ``slot * T + position``."""

    def __init__(self, model: ModelShape, shape: EngineShape, device: torch.device) -> None:
        self.shape = shape
        self.rows = [
            torch.zeros(shape.slots * shape.max_context, ROW_WORDS, dtype=torch.int64,
                        device=device)
            for _ in range(model.layers)
        ]
        self.entry_slot, _ = entry_layout(shape, device)
        self._zero = torch.zeros(3, dtype=torch.int64, device=device)
        self._inputs = torch.zeros((3, shape.entries), dtype=torch.int64, device=device)
        self._target = self.entry_slot

    def bind(self, inputs: torch.Tensor) -> None:
        self._inputs = inputs

    def begin_step(self) -> None:
        self._target = self.entry_slot * self.shape.max_context + self._inputs[1]

    def write(self, layer: int, rows: torch.Tensor) -> None:
        self.rows[layer].index_copy_(0, self._target, as_words(rows))

    def select(self, layer: int, topk: torch.Tensor) -> torch.Tensor:
        base = (self.entry_slot * self.shape.max_context).unsqueeze(1)
        return torch.where(topk >= 0, base + topk, -1)

    def follow(self, layer: int, leader: int) -> None:
        pass

    def storage(self, layer: int) -> torch.Tensor:
        return self.rows[layer]

    def counters(self) -> torch.Tensor:
        return self._zero

    def upload(self) -> None:
        pass

    def prefill_targets(self, slot: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        pos = torch.arange(length, device=self.entry_slot.device)
        return pos, slot * self.shape.max_context + pos

    def write_rows(self, layer: int, targets: torch.Tensor, rows: torch.Tensor) -> None:
        self.rows[layer].index_copy_(0, targets, as_words(rows))

    @property
    def nbytes(self) -> int:
        return sum(r.numel() * r.element_size() for r in self.rows)


class HiSparseCache:
    """Resident pages, hot rows and pinned host rows of the CUDA executor's pools.

    The resolver's inputs (top-K, resident row, host row per position) are computed on
    the device from the uploaded page tables and written into fixed ``ResolveBuffers``;
    one ``launch_resolve`` per indexer owner and one ``replay`` per follower run in the
    step's stream, so the whole step can be captured in one CUDA graph.
    """

    def __init__(
        self, scheduler: HiSparseScheduler, shape: EngineShape, device: torch.device
    ) -> None:
        cupy = load_cupy()
        self._cupy = cupy
        self.shape = shape
        self.scheduler = scheduler
        executor = scheduler.worker.executor
        assert isinstance(executor, CudaExecutor)
        self.executor = executor
        self.layout = scheduler.worker.layout
        handles = scheduler.worker.handles
        self.pools = [cast(CudaPools, h.runtime.pools) for h in handles]
        self.device_rows = [as_words(torch.from_dlpack(p.device)) for p in self.pools]
        self.entry_slot, self.entry_j = entry_layout(shape, device)
        e, k = shape.entries, shape.top_k
        self.buffers: dict[int, Any] = {}
        self.views: dict[int, dict[str, torch.Tensor]] = {}
        with executor.stream:
            step = cupy.zeros(1, dtype=cupy.int64)
            for h in handles:
                if h.runtime.is_follower:
                    continue
                buf = ResolveBuffers(
                    slots=cupy.full(e, -1, dtype=cupy.int32),
                    topk=cupy.full((e, k), -1, dtype=cupy.int32),
                    resident_row=cupy.full((e, k), -1, dtype=cupy.int32),
                    host_row=cupy.full((e, k), -1, dtype=cupy.int32),
                    step=step,
                    result=CudaResolveResult.empty(e, k),
                )
                self.buffers[h.layer] = buf
                self.views[h.layer] = {  # torch views (DLPack, no copy) of what torch touches
                    name: torch.from_dlpack(arr) for name, arr in (
                        ("rows", buf.result.rows), ("counters", buf.result.counters),
                    )
                }
        executor.stream.synchronize()
        self.step = torch.from_dlpack(step)
        pages = shape.max_pages
        self.gpu_table = torch.full((shape.slots, pages), -1, dtype=torch.int32, device=device)
        self.host_table = torch.full((shape.slots, pages), -1, dtype=torch.int32, device=device)
        self._staged = torch.empty((2, shape.slots, pages), dtype=torch.int32, pin_memory=True)
        self._inputs = torch.zeros((3, shape.entries), dtype=torch.int64, device=device)
        self._target = self.entry_slot
        self._fill: ResolveInputs | None = None
        # inactive entry j of a free slot writes to that slot's hot row j
        self._scratch = (self.layout.hot_row(0, 0) + self.entry_slot * self.layout.hot_rows
                         + self.entry_j)

    @property
    def tables(self) -> PageTables:
        return self.scheduler.tables

    def upload(self) -> None:
        """The page tables to the device (before the step; the step only reads them)."""
        staged = self._staged.numpy()
        staged[0] = self.tables.gpu
        staged[1] = self.tables.host
        self.gpu_table.copy_(self._staged[0], non_blocking=True)
        self.host_table.copy_(self._staged[1], non_blocking=True)

    def bind(self, inputs: torch.Tensor) -> None:
        self._inputs = inputs
        self._fill = ResolveInputs(inputs, self.gpu_table, self.host_table,
                                   per_slot=self.shape.per_slot,
                                   block_tokens=self.shape.block_tokens)

    def begin_step(self) -> None:
        self.step.add_(1)  # the resolver's step, advanced on the device
        bt = self.shape.block_tokens
        pos = self._inputs[1]
        block = self.gpu_table[self.entry_slot, pos // bt].long()
        self._target = torch.where(self._inputs[2] != 0, block * bt + pos % bt, self._scratch)

    def write(self, layer: int, rows: torch.Tensor) -> None:
        self.device_rows[layer].index_copy_(0, self._target, as_words(rows))

    def select(self, layer: int, topk: torch.Tensor) -> torch.Tensor:
        assert self._fill is not None, "bind() the step's inputs first"
        buf = self.buffers[layer]
        with self.executor.stream:
            # a zero-copy view through the CUDA array interface (version 2: no stream,
            # so no synchronization); the kernel narrows it into the resolver's buffer
            self._fill.launch(self._cupy.asarray(topk.contiguous()), buf)
        self.executor.launch_resolve(self.pools[layer], buf)
        return self.views[layer]["rows"]  # -1 for padding and for inactive entries (slot -1)

    def follow(self, layer: int, leader: int) -> None:
        self.executor.replay(self.pools[layer], self.buffers[leader].result.plan)

    def storage(self, layer: int) -> torch.Tensor:
        return self.device_rows[layer]

    def counters(self) -> torch.Tensor:
        """The step's resolver counters over every leader, summed once at the end of the
        step (off the chain of kernels between a leader's top-K and its attention)."""
        per = torch.stack([v["counters"] for v in self.views.values()])  # [L, E, 3]
        active = (self._inputs[2] != 0).view(1, -1, 1)
        return (per * active).sum((0, 1))

    def prefill_targets(self, slot: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Positions below ``length`` on resident pages and their device rows; positions on
        host pages (prefix hits) are already there."""
        bt = self.shape.block_tokens
        pos = np.arange(length, dtype=np.int64)
        block = self.tables.gpu[slot, pos // bt].astype(np.int64)
        keep = block >= 0
        dev = self.entry_slot.device
        return (torch.from_numpy(pos[keep]).to(dev),
                torch.from_numpy(block[keep] * bt + pos[keep] % bt).to(dev))

    def write_rows(self, layer: int, targets: torch.Tensor, rows: torch.Tensor) -> None:
        self.device_rows[layer].index_copy_(0, targets, as_words(rows))

    @property
    def nbytes(self) -> int:
        """Device bytes of every pool: packed rows plus the leaders' LRU state."""
        total = 0
        for p in self.pools:
            total += p.device.nbytes
            if p.shape is not None:
                total += p.hot_tag.nbytes + p.hot_stamp.nbytes + p.lru_order.nbytes
                total += p.where.nbytes + p.ready.nbytes
        return int(total)
