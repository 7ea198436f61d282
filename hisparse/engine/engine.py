"""``DecodeEngine``: one decode step (indexer → top-K → resolve → attention → sampling)
as one function of fixed device buffers, run eagerly or replayed as one CUDA graph.

Inputs (token, position, active flag per entry) go up with one asynchronous copy before
the step; outputs (greedy next token per entry, accepted drafts per slot, the resolver's
counters) come back with one copy after it. Nothing inside the step reads the device
from the host: under graph capture any such read would fail the capture.

Speculative verification: a slot's entries are its last token and ``num_speculative_tokens``
drafts at consecutive positions; the step writes all their rows, each entry attends to
its own top-K (resolved in order, one slot run per request), and the longest prefix of
drafts that equals the greedy tokens is accepted, plus one token of the model's own.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from numpy.typing import NDArray

from hisparse.engine.cache import IndexCache, KVCache, entry_layout
from hisparse.engine.config import EngineConfigError, EngineShape
from hisparse.engine.model import Model

PREFILL_CHUNK = 16384
"""Prompt positions prefilled per launch group (bounds prefill's temporary memory)."""


@dataclass(frozen=True, eq=False)
class StepOutput:
    """One step's results on the host."""

    next_tokens: NDArray[np.int64]  # [E] greedy token after each entry
    accepted: NDArray[np.int64]  # [N] drafts accepted per slot
    counters: NDArray[np.int64]  # [3] resident hits, hot hits, misses (HiSparse only)


class DecodeEngine:
    """The decoder over one KV cache, in one stream, optionally as one CUDA graph.

    ``topk="given"`` makes attention use the top-K written into ``given_topk`` instead
    of the indexer's (the indexer still runs, so the step costs the same): benchmarks
    use it to hold the top-K's locality fixed.
    """

    def __init__(
        self, model: Model, cache: KVCache, shape: EngineShape, *, stream: torch.cuda.Stream,
        graph: bool, topk: str = "indexer", prefill_chunk: int = PREFILL_CHUNK,
    ) -> None:
        if topk not in ("indexer", "given"):
            raise ValueError(f"topk must be 'indexer' or 'given', got {topk!r}")
        self.model, self.cache, self.shape, self.stream = model, cache, shape, stream
        self.use_given = topk == "given"
        self.prefill_chunk = prefill_chunk
        dev = model.device
        e, n = shape.entries, shape.slots
        self.entry_slot, self.entry_j = entry_layout(shape, dev)
        self._idle_pos = np.arange(e, dtype=np.int64) % shape.per_slot
        self.index = IndexCache(model.shape, shape, dev)
        self.inputs = torch.zeros((3, e), dtype=torch.int64, device=dev)
        self.given_topk = torch.full((e, shape.top_k), -1, dtype=torch.int64, device=dev)
        self._staged_in = torch.zeros((3, e), dtype=torch.int64, pin_memory=True)
        self._staged_out = torch.zeros(e + n + 3, dtype=torch.int64, pin_memory=True)
        self.graph: torch.cuda.CUDAGraph | None = None
        # Buffers above (and the cache's) were made on the default stream; the step runs
        # on ``stream``, which does not wait for it by itself.
        cache.bind(self.inputs)
        torch.cuda.synchronize(dev)
        with torch.cuda.stream(stream):
            self.inputs[1] = self.entry_j  # inactive entries: position j of their own slot
            self.logits, self.packed = self._body()  # warm-up with every entry inactive
        stream.synchronize()
        if graph:
            # the warm-up's workspace goes back to the device: the capture allocates its
            # own (a graph's private pool), so both never need to fit at once
            del self.logits, self.packed
            torch.cuda.empty_cache()
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph, stream=stream):
                self.logits, self.packed = self._body()
            stream.synchronize()

    # -- the step ----------------------------------------------------------------------

    def _topk(self, layer: int, h: torch.Tensor, pos: torch.Tensor, hq: torch.Tensor
              ) -> torch.Tensor:
        """The indexer's top-K positions per entry, int64, ascending, -1 padding first."""
        scores = self.model.index_scores(layer, h, pos, self.index.view(layer),
                                         self.shape.per_slot, hq)
        vals, idx = scores.topk(self.shape.top_k, dim=-1, sorted=False)  # sorted below
        idx = torch.where(torch.isneginf(vals), -1, idx)
        return idx.sort(dim=-1).values

    def _body(self) -> tuple[torch.Tensor, torch.Tensor]:
        m, s, cache = self.model, self.shape, self.cache
        tokens, pos = self.inputs[0], self.inputs[1]
        cache.begin_step()
        x = m.embed[tokens]
        for layer, lw in enumerate(m.layers):
            h = m.rmsnorm(x, lw.attn_norm)
            hq = m.query_input(layer, h)
            cache.write(layer, m.kv_rows(layer, h, pos))
            leader = m.shape.index_leaders[layer]
            if leader == layer:
                self.index.write(layer, m.index_keys(layer, h, pos), self.entry_slot, pos)
                topk = self._topk(layer, h, pos, hq)
                if self.use_given:
                    topk = self.given_topk
                rows = cache.select(layer, topk)
                selected = rows
            else:
                cache.follow(layer, leader)
                rows = selected
            x = x + m.attention(layer, h, pos, cache.storage(layer), rows, hq)
            x = x + m.mlp(layer, x)
        logits = m.logits(x)
        nxt = logits.argmax(-1)
        if s.num_speculative_tokens:
            drafts = tokens.view(s.slots, s.per_slot)[:, 1:]
            own = nxt.view(s.slots, s.per_slot)[:, :-1]
            accepted = (drafts == own).long().cumprod(1).sum(1)
        else:
            accepted = torch.zeros(s.slots, dtype=torch.int64, device=tokens.device)
        return logits, torch.cat([nxt, accepted, cache.counters()])

    def run(self, tokens: NDArray[np.int64], pos: NDArray[np.int64],
            active: NDArray[np.bool_]) -> StepOutput:
        """One decode step: inputs up, the step (graph replay or eager), outputs down."""
        e, n = self.shape.entries, self.shape.slots
        for name, arr in (("tokens", tokens), ("pos", pos), ("active", active)):
            if np.shape(arr) != (e,):
                raise EngineConfigError(f"{name} must have shape ({e},), got {np.shape(arr)}")
        staged = self._staged_in.numpy()
        staged[0] = np.where(active, tokens, 0)
        staged[1] = np.where(active, pos, self._idle_pos)
        staged[2] = active
        with torch.cuda.stream(self.stream):
            self.inputs.copy_(self._staged_in, non_blocking=True)
            self.cache.upload()
            if self.graph is not None:
                self.graph.replay()
            else:
                self.logits, self.packed = self._body()
            self._staged_out.copy_(self.packed, non_blocking=True)
        self.stream.synchronize()
        out = self._staged_out.numpy().copy()
        return StepOutput(out[:e], out[e : e + n], out[e + n :])

    def launch(self) -> None:
        """Launch one step on the inputs already on the device, without reading anything
        back (for timing, and for checking that a step does no host synchronization)."""
        with torch.cuda.stream(self.stream):
            if self.graph is not None:
                self.graph.replay()
            else:
                self.logits, self.packed = self._body()

    # -- prefill -------------------------------------------------------------------------

    def prefill(self, slot: int, prompt: NDArray[np.int32], length: int,
                index_from: int = 0) -> None:
        """Write the cache rows of prompt positions ``0 .. length-1`` and their index
        keys from ``index_from`` on (the keys below it were restored: engine/offload.py)."""
        m = self.model
        dev = m.device
        with torch.cuda.stream(self.stream):
            tokens = torch.from_numpy(prompt[:length].astype(np.int64)).to(dev)
            rows_pos, targets = self.cache.prefill_targets(slot, length)
            # Rows are projected in the same chunks of positions whichever of them this
            # cache writes: a GEMM's bits for one row can depend on how many rows it
            # multiplies (cuBLAS picks kernels by shape), so chunks taken over only the
            # written positions would give a row other bits than the oracle's.
            where = torch.full((length,), -1, dtype=torch.int64, device=dev)
            where[rows_pos] = targets
            c = self.prefill_chunk
            for layer in range(m.shape.layers):
                for a in range(0, length, c):
                    p = torch.arange(a, min(length, a + c), device=dev)
                    rows = m.prefill_rows(layer, tokens[p], p)
                    at = where[a : a + c]
                    keep = at >= 0
                    self.cache.write_rows(layer, at[keep], rows[keep])
                if m.shape.index_leaders[layer] != layer:
                    continue
                for a in range(0, length, c):
                    end = min(length, a + c)
                    if end <= index_from:
                        continue  # every key of this chunk was restored
                    p = torch.arange(a, end, device=dev)
                    # the whole chunk is projected (the oracle's GEMM shape, its bits)
                    keys = m.prefill_keys(layer, tokens[p], p)
                    lo = max(0, index_from - a)
                    self.index.write(layer, keys[lo:], torch.full_like(p[lo:], slot), p[lo:])

    @property
    def kv_nbytes(self) -> int:
        """HBM holding KV: the cache's rows (and LRU state) plus the indexer's keys."""
        return self.cache.nbytes + self.index.nbytes
