"""The same replay with HiSparse disabled: every page resident, requests wait for GPU room.

The engine's scheduler without HiSparse: first come, first served; a request is admitted
when the GPU pool (HMA, ``BlockPool``) gives every one of its pages and fewer than
``max_running`` requests run; it decodes its steps and frees its blocks. Nothing is
offloaded and no prefix is reused (the host tier is where HiSparse's prefix hits come
from; a GPU prefix cache is not modelled on either side). As the seed requires of a
disabled HiSparse, the scheduler builds no offload command and no empty update table:
each step's ``kv_connector_metadata`` is None, and no HiSparse message is constructed.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from hisparse.blockpool import BlockPool
from hisparse.spec.messages import HiSparseConnectorMetadata
from hisparse.workload import Arrival


@dataclass(frozen=True)
class SchedulerOutput:
    """What one disabled-HiSparse step hands the workers besides the batch."""

    running: int
    kv_connector_metadata: HiSparseConnectorMetadata | None = None


@dataclass
class DisabledReport:
    """Per-step running and waiting requests; per request its admission wait."""

    steps: int = 0
    requests: int = 0
    finished: int = 0
    still_running: int = 0
    never_admitted: int = 0
    too_large: int = 0  # more pages than the whole GPU pool
    decoded_tokens: int = 0
    waits: list[int] = field(default_factory=list)  # steps from arrival to admission
    running: list[int] = field(default_factory=list)
    waiting: list[int] = field(default_factory=list)
    gpu_blocks_used: list[int] = field(default_factory=list)


class DisabledRun:
    """One replay with HiSparse disabled; cost per step is O(running + admitted)."""

    def __init__(self, arrivals: list[Arrival], *, gpu_blocks: int, max_running: int) -> None:
        self.arrivals = arrivals
        self.gpu_blocks = gpu_blocks
        self.max_running = max_running
        self.kv = BlockPool(gpu_blocks)
        self.pending: deque[Arrival] = deque()
        self.running: dict[str, tuple[int, list[int]]] = {}  # request -> (steps left, blocks)
        self.report = DisabledReport()
        self.outputs = 0  # scheduler outputs built

    def step(self, t: int) -> SchedulerOutput:
        """Finish, admit in arrival order, decode one token per running request."""
        rep = self.report
        for r in [r for r, (left, _) in self.running.items() if left <= 0]:
            self.kv.free(self.running.pop(r)[1])
            rep.finished += 1
        while self.pending and len(self.running) < self.max_running:
            a = self.pending[0]
            blocks = self.kv.allocate(len(a.page_keys))
            if blocks is None:
                break  # first come, first served: the head waits for room
            self.pending.popleft()
            rep.waits.append(t - a.step)
            self.running[a.request_id] = (a.decode_steps, blocks)
        for r, (left, blocks) in self.running.items():
            self.running[r] = (left - 1, blocks)
        rep.decoded_tokens += len(self.running)
        rep.running.append(len(self.running))
        rep.waiting.append(len(self.pending))
        rep.gpu_blocks_used.append(self.gpu_blocks - self.kv.num_free)
        self.outputs += 1
        return SchedulerOutput(running=len(self.running))

    def run(self, steps: int) -> DisabledReport:
        rep, nxt = self.report, 0
        for t in range(steps):
            while nxt < len(self.arrivals) and self.arrivals[nxt].step <= t:
                a = self.arrivals[nxt]
                nxt += 1
                rep.requests += 1
                if len(a.page_keys) > self.gpu_blocks:
                    rep.too_large += 1
                    rep.never_admitted += 1
                else:
                    self.pending.append(a)
            self.step(t)
            rep.steps += 1
            if nxt >= len(self.arrivals) and not self.running and not self.pending:
                break
        rep.still_running = len(self.running)
        rep.never_admitted += len(self.pending)
        return rep
