"""Run one workload through several engines in lockstep and compare them bit for bit.

The first engine is HiSparse: its scheduler decides admissions (spilling complete pages
under GPU pressure, as ``hisparse simulate`` does) and every other engine admits the
same request into the same slot in the same step, so all engines see the same batches.
Every step, each engine's greedy tokens, accepted drafts and the logits of every active
entry are compared with the first engine's, bit for bit. With ``indexer`` (an
``IndexerOffload`` of the first engine, engine/offload.py), that engine's indexer group
is stored at spills and restored at admission by the suffix rule; the others compute
every key.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray

from hisparse.config import HiSparseConfig
from hisparse.engine.cache import HiSparseCache, ResidentCache
from hisparse.engine.config import ROW_BYTES, EngineShape
from hisparse.engine.engine import DecodeEngine
from hisparse.engine.model import Model
from hisparse.engine.offload import IndexerOffload
from hisparse.engine.schedule import HiSparseScheduler, SchedulerError
from hisparse.engine.workload import EngineRequest
from hisparse.executor.cuda import CudaExecutor
from hisparse.executor.cuda.backend import load_cupy


def hisparse_engine(
    model: Model, shape: EngineShape, *, gpu_blocks: int, host_blocks: int, graph: bool,
    topk: str = "indexer", stream: torch.cuda.Stream | None = None,
) -> tuple[DecodeEngine, HiSparseScheduler]:
    """A HiSparse engine on the CUDA executor, in a stream of its own (or ``stream``:
    torch keeps a cuBLAS workspace per stream for good, so a benchmark that builds many
    engines in a memory budget gives them one)."""
    cupy = load_cupy()
    ms = model.shape
    config = HiSparseConfig(
        host_pool_blocks=host_blocks,
        block_tokens=shape.block_tokens, row_bytes=ROW_BYTES, top_k=shape.top_k,
        num_speculative_tokens=shape.num_speculative_tokens, layers=ms.layers,
        index_leaders=ms.index_leaders,
    )
    stream = stream if stream is not None else torch.cuda.Stream(device=model.device)
    executor = CudaExecutor(
        top_k=shape.top_k, max_positions=shape.max_context,
        num_speculative_tokens=shape.num_speculative_tokens,
        device=model.device.index or 0, stream=cupy.cuda.ExternalStream(stream.cuda_stream),
    )
    scheduler = HiSparseScheduler(config, executor, gpu_blocks=gpu_blocks, slots=shape.slots,
                                  max_pages=shape.max_pages)
    cache = HiSparseCache(scheduler, shape, model.device)
    return DecodeEngine(model, cache, shape, stream=stream, graph=graph, topk=topk), scheduler


def resident_engine(
    model: Model, shape: EngineShape, *, graph: bool, topk: str = "indexer",
    stream: torch.cuda.Stream | None = None,
) -> DecodeEngine:
    """The oracle: every KV row resident in a plain tensor, no HiSparse."""
    cache = ResidentCache(model.shape, shape, model.device)
    stream = stream if stream is not None else torch.cuda.Stream(device=model.device)
    return DecodeEngine(model, cache, shape, stream=stream, graph=graph, topk=topk)


@dataclass
class Running:
    """A request in a slot: ``length`` positions of final KV, ``last`` the token to feed
    at position ``length``, ``hist`` prompt then output tokens."""

    req: EngineRequest
    length: int
    hist: NDArray[np.int64]
    n_hist: int
    out: int = 0
    steps: int = 0

    @property
    def last(self) -> int:
        return int(self.hist[self.n_hist - 1])

    def drafts(self, count: int) -> list[int]:
        """Prompt-lookup drafts: what followed the latest earlier occurrence of the last
        token (the last token repeated where there is none)."""
        if count == 0:
            return []
        h = self.hist[: self.n_hist]
        seen = np.flatnonzero(h[:-1] == h[-1])
        got = [int(t) for t in h[seen[-1] + 1 : seen[-1] + 1 + count]] if seen.size else []
        return got + [self.last] * (count - len(got))


@dataclass
class LockstepReport:
    """What a lockstep run did and whether the engines agreed."""

    steps: int = 0
    admitted: int = 0
    finished: int = 0
    aborted: int = 0
    batch_min: int = 0
    batch_mean: float = 0.0
    batch_max: int = 0
    context_min: int = 0
    context_max: int = 0
    spills: int = 0
    prefix_hits: int = 0
    resident_hits: int = 0
    hot_hits: int = 0
    misses: int = 0
    drafts: int = 0
    drafts_accepted: int = 0
    entries_compared: int = 0
    logits_mismatched_entries: int = 0
    mismatches_by_engine: list[int] = field(default_factory=list)
    token_mismatches: int = 0
    max_abs_logit_diff: float = 0.0
    first_mismatch_step: int | None = None
    nonfinite_logits: int = 0
    seconds: float = 0.0
    kv_bytes: list[int] = field(default_factory=list)
    batches: list[int] = field(default_factory=list)
    indexer: dict[str, int] = field(default_factory=dict)  # the indexer offload's figures

    @property
    def identical(self) -> bool:
        return (self.entries_compared > 0 and self.logits_mismatched_entries == 0
                and self.token_mismatches == 0)

    @property
    def miss_rate(self) -> float:
        total = self.resident_hits + self.hot_hits + self.misses
        return self.misses / total if total else 0.0

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["identical"] = self.identical
        d["miss_rate"] = self.miss_rate
        return d


class Lockstep:
    """``engines[i]`` runs over ``schedulers[i]`` (None: a resident engine).

    ``schedulers[0]`` decides admissions as ``hisparse simulate`` does: a request that
    does not fit starts spills of complete pages and waits for the next step. Every
    other HiSparse scheduler then admits the same request at once, spilling and
    round-tripping its acks within the step if it must (its prefix hits may differ:
    which pages are published depends on when its copies completed). Every engine gets
    the same slot, so all see the same batch.
    """

    def __init__(
        self, engines: Sequence[DecodeEngine],
        schedulers: Sequence[HiSparseScheduler | None], requests: Sequence[EngineRequest],
        indexer: IndexerOffload | None = None,
    ) -> None:
        lead = schedulers[0]
        if lead is None or len(engines) != len(schedulers):
            raise ValueError("one scheduler (or None) per engine; the first is HiSparse's")
        self.lead: HiSparseScheduler = lead
        if indexer is not None and indexer.hs is not lead:
            raise ValueError("the indexer offload must hook the first (leading) scheduler")
        self.indexer = indexer
        self.engines = list(engines)
        self.schedulers = list(schedulers)
        self.shape = engines[0].shape
        self.queue = deque(sorted(requests, key=lambda r: r.arrival))
        for sched in self._hisparse():
            for r in self.queue:
                sched.add(r)
        if indexer is not None:
            for r in self.queue:
                indexer.add(r)
        self.running: dict[int, Running] = {}
        self.report = LockstepReport(kv_bytes=[e.kv_nbytes for e in engines],
                                     mismatches_by_engine=[0] * (len(engines) - 1))
        self.report.context_min = 1 << 62

    def _hisparse(self) -> list[HiSparseScheduler]:
        return [s for s in self.schedulers if s is not None]

    def _final(self) -> dict[str, int]:
        return {r.req.request_id: r.length for r in self.running.values()}

    def _retire(self) -> None:
        rep = self.report
        for slot, r in list(self.running.items()):
            done = r.out >= r.req.max_new
            abort = not done and r.req.abort_after is not None and r.steps >= r.req.abort_after
            if done or abort:
                for sched in self._hisparse():
                    sched.end(r.req.request_id, aborted=abort)
                if self.indexer is not None:
                    self.indexer.finished(r.req.request_id)
                del self.running[slot]
                rep.finished += done
                rep.aborted += abort

    def _follow(self, sched: HiSparseScheduler, req: EngineRequest, slot: int) -> None:
        """Admit ``req`` into ``slot`` now: spill and round-trip acks until it fits."""
        for _ in range(4):
            got = sched.admit(req)
            if got is not None:
                if got[0] != slot:
                    raise SchedulerError(f"{req.request_id}: slot {got[0]}, leader's {slot}")
                return
            sched.reclaim(sched.blocks_short(req), self._final())
            sched.send_commands()
            sched.deliver_acks()
        raise SchedulerError(f"{req.request_id} does not fit a following scheduler's GPU pool")

    def _admit(self, step: int) -> None:
        while self.queue and self.queue[0].arrival <= step and (
            len(self.running) < self.shape.slots
        ):
            req = self.queue[0]
            plan = self.indexer.plan(req) if self.indexer is not None else None
            cap = None if plan is None else plan.admit_mla  # the suffix rule's cap
            got = self.lead.admit(req, cap)
            if got is None:  # GPU pressure: spill complete pages, retry next step
                self.lead.reclaim(self.lead.blocks_short(req, cap), self._final())
                break
            slot, adm = got
            for sched in self._hisparse()[1:]:
                self._follow(sched, req, slot)
            self.queue.popleft()
            hist = np.zeros(len(req.prompt) + req.max_new + self.shape.per_slot, np.int64)
            hist[: len(req.prompt)] = req.prompt
            self.running[slot] = Running(req, req.prefill_len, hist, len(req.prompt))
            self.report.admitted += 1
            self.report.prefix_hits += adm.prefix_hits
            restored = 0  # index keys restored into the leader's slot (engine/offload.py)
            if self.indexer is not None and plan is not None:
                restored = self.indexer.admitted(req, slot, plan)
            for i, eng in enumerate(self.engines):  # before any later spill reads its pages
                eng.prefill(slot, req.prompt, req.prefill_len, restored if i == 0 else 0)

    def step(self, t: int) -> None:
        s, rep = self.shape, self.report
        self._retire()
        self._admit(t)
        if self.indexer is not None:  # this step's indexer stores, before the step
            self.indexer.flush()
        for sched in self._hisparse():
            sched.send_commands()
        tokens = np.zeros(s.entries, np.int64)
        pos = np.zeros(s.entries, np.int64)
        active = np.zeros(s.entries, bool)
        drafts: dict[int, list[int]] = {}
        for slot, r in self.running.items():
            base = slot * s.per_slot
            drafts[slot] = r.drafts(s.num_speculative_tokens)
            tokens[base : base + s.per_slot] = [r.last, *drafts[slot]]
            pos[base : base + s.per_slot] = np.arange(r.length, r.length + s.per_slot)
            active[base : base + s.per_slot] = True
            rep.context_min = min(rep.context_min, r.length)
            rep.context_max = max(rep.context_max, r.length)
        outs = [eng.run(tokens, pos, active) for eng in self.engines]
        self._compare(t, outs, active)
        lead = outs[0]
        rep.resident_hits += int(lead.counters[0])
        rep.hot_hits += int(lead.counters[1])
        rep.misses += int(lead.counters[2])
        for slot, r in self.running.items():
            base = slot * s.per_slot
            a = int(lead.accepted[slot])
            emitted = [*drafts[slot][:a], int(lead.next_tokens[base + a])]
            r.hist[r.n_hist : r.n_hist + len(emitted)] = emitted
            r.n_hist += len(emitted)
            r.out += len(emitted)
            r.length += a + 1
            r.steps += 1
            rep.drafts += s.num_speculative_tokens
            rep.drafts_accepted += a
        rep.batches.append(len(self.running))
        for sched in self._hisparse():
            sched.deliver_acks()
        if self.indexer is not None:
            self.indexer.deliver()

    def _compare(self, t: int, outs: Sequence[Any], active: NDArray[np.bool_]) -> None:
        rep = self.report
        idx = torch.from_numpy(np.flatnonzero(active)).to(self.engines[0].logits.device)
        if idx.numel() == 0:
            return
        ref = self.engines[0].logits.index_select(0, idx)
        rep.nonfinite_logits += int((~torch.isfinite(ref)).sum())
        rep.entries_compared += int(idx.numel())
        for i, (eng, out) in enumerate(zip(self.engines[1:], outs[1:], strict=True)):
            other = eng.logits.index_select(0, idx)
            differs = (ref != other).any(dim=1)
            bad = int(differs.sum())
            tok_bad = int((out.next_tokens[active] != outs[0].next_tokens[active]).sum())
            tok_bad += int((out.accepted != outs[0].accepted).sum())
            if bad or tok_bad:
                rep.mismatches_by_engine[i] += bad + tok_bad
                rep.logits_mismatched_entries += bad
                rep.token_mismatches += tok_bad
                diff = float((ref - other).abs().nan_to_num(float("inf")).max())
                rep.max_abs_logit_diff = max(rep.max_abs_logit_diff, diff)
                if rep.first_mismatch_step is None:
                    rep.first_mismatch_step = t

    def run(self, steps: int) -> LockstepReport:
        start = time.perf_counter()
        for t in range(steps):
            self.step(t)
            self.report.steps += 1
        rep = self.report
        rep.seconds = time.perf_counter() - start
        rep.spills = self.lead.coordinator.spills
        if self.indexer is not None:
            rep.indexer = self.indexer.report()
        if rep.batches:
            rep.batch_min, rep.batch_max = min(rep.batches), max(rep.batches)
            rep.batch_mean = float(np.mean(rep.batches))
        return rep
