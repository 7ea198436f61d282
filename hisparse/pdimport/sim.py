"""The P/D side of a ``hisparse simulate`` run (``--pd-share F``, ``--transport``).

A seeded share of the arrivals arrive with prefill KV: a prefiller (in this process for
``loopback``, a process of its own over NIXL for ``nixl``) holds their pages, built from
their keys exactly as the simulator's row oracle derives them, with a final block that
is usually not full; the coordinator chooses each one's landing target and sends the
import command; each worker's ``ImportRunner`` lands it. Nothing here decides where a
page lands. Its own random generators, so a run with ``--pd-share 0`` draws exactly as
before and creates nothing.
"""

from __future__ import annotations

import os
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from hisparse.pdimport.prefill import prefill_pages
from hisparse.pdimport.runner import ImportRunner
from hisparse.transport.base import Transport
from hisparse.transport.loopback import LoopbackPrefiller, LoopbackTransport
from hisparse.transport.staging import StagingPool

TRANSPORTS = ("loopback", "nixl")
PREFILLER = "prefiller"  # the agent every decoder worker is configured to import from


@dataclass(frozen=True)
class PdOptions:
    """``--pd-share``, ``--transport`` and the staging pool of each worker."""

    share: float = 0.0
    transport: str = "loopback"
    staging_slots: int = 4
    chunk_pages: int = 1
    window: int = 2

    def problem(self) -> str | None:
        if not 0.0 <= self.share <= 1.0:
            return f"--pd-share must be between 0 and 1, got {self.share}"
        if self.transport not in TRANSPORTS:
            return f"unknown transport {self.transport!r}; choose one of {', '.join(TRANSPORTS)}"
        if self.staging_slots < 1:
            return f"--staging-slots must be at least 1, got {self.staging_slots}"
        return None


@dataclass
class PdFigures:
    """What the report says of the imports (``SimulateReport.imports``)."""

    arrived: int = 0  # requests that arrived with prefill KV
    device: int = 0  # imports completed into resident GPU pages
    host: int = 0  # imports completed into the host tier (through staging)
    failed: int = 0  # imports that failed or were aborted (nothing published)
    reasons: Counter[str] = field(default_factory=Counter)
    unaligned: int = 0  # of the arrived: a final block that is not full
    staged_bytes: int = 0
    direct_bytes: int = 0
    staging_slots: int = 0
    staging_peak: int = 0
    staging_in_use: list[int] = field(default_factory=list)  # per step, rank 0

    def doc(self) -> dict[str, Any]:
        occ = self.staging_in_use
        return {
            "arrived": self.arrived, "device": self.device, "host": self.host,
            "failed": self.failed, "failed_by_reason": dict(sorted(self.reasons.items())),
            "unaligned_final_block": self.unaligned, "staged_bytes": self.staged_bytes,
            "direct_bytes": self.direct_bytes, "staging_slots": self.staging_slots,
            "staging_peak": self.staging_peak,
            "staging_occupancy_mean": (sum(occ) / len(occ) / self.staging_slots
                                       if occ and self.staging_slots else 0.0),
        }


class PdSide:
    """The prefiller, which requests import, and each worker's import runner."""

    def __init__(self, opts: PdOptions, seed: int, layers: int, block_tokens: int,
                 row_bytes: int, capacity_pages: int) -> None:
        if (why := opts.problem()) is not None:
            raise ValueError(why)
        self.o = opts
        self.layers, self.block, self.row = layers, block_tokens, row_bytes
        self.page_bytes = layers * block_tokens * row_bytes
        self._rng = random.Random(f"pd-{seed}")
        self.figures = PdFigures(staging_slots=opts.staging_slots)
        self.prompt_tokens: dict[str, int] = {}  # imported request -> its prompt tokens
        self.held: set[str] = set()  # requests whose pages the prefiller holds
        self.aborted: set[str] = set()  # imports the simulator aborted
        self.runners: list[ImportRunner] = []
        self.transports: list[Transport] = []
        empty = np.zeros((max(1, capacity_pages), self.page_bytes), np.uint8)
        self.prefiller: Any
        if opts.transport == "nixl":
            from hisparse.transport.nixlpeer import NixlPrefiller

            self.prefiller = NixlPrefiller(PREFILLER, empty)
        else:
            self.prefiller = LoopbackPrefiller(PREFILLER, empty)

    def draw(self, pages: int) -> int | None:
        """Whether the next arrival brings prefill KV: its token count (half the time
        ending inside its final block), or None. Draws from the P/D generator only."""
        if self._rng.random() >= self.o.share:
            return None
        if self._rng.random() < 0.5:  # a prompt that fills its final block
            return pages * self.block
        return pages * self.block - self._rng.randrange(1, self.block) if self.block > 1 \
            else pages

    def hold(self, request_id: str, key_ids: NDArray[np.int64], num_tokens: int) -> bool:
        """The prefiller computes (here: derives) the request's KV and holds it; False
        (nothing held) when its buffer is full: the request arrives without prefill KV."""
        if request_id in self.held:  # its ID was retired and declared again
            self._drop(request_id)
        if self.prefiller.arena.num_free < key_ids.size:
            return False
        self.prefiller.put(request_id, prefill_pages(key_ids, self.layers, self.block,
                                                     self.row, num_tokens))
        self.held.add(request_id)
        self.prompt_tokens[request_id] = num_tokens
        self.figures.arrived += 1
        self.figures.unaligned += num_tokens % self.block != 0
        return True

    def completed(self, request_id: str, target: str) -> None:
        """The import completed into ``target``: the prefiller drops the pages."""
        if target == "device":
            self.figures.device += 1
        else:
            self.figures.host += 1
        self._drop(request_id)

    def failed(self, request_id: str) -> None:
        """The import failed or was aborted (the worker's reasons: ``ImportStats``)."""
        self.figures.failed += 1
        self._drop(request_id)

    def forget(self, request_id: str) -> None:
        """The request ended before its import began (never admitted)."""
        self._drop(request_id)

    def _drop(self, request_id: str) -> None:
        if request_id in self.held:
            self.held.discard(request_id)
            self.prefiller.drop(request_id)

    def attach(self, worker: Any, rank: int) -> ImportRunner:
        """An import runner (its own staging pool and transport) for one worker; the
        staging pool is the executor's ``staging_pool`` if it has one (the CUDA
        executor's lives in VRAM), else host memory."""
        o = self.o
        # the executor's own staging pool when it has one (CUDA: VRAM on its stream)
        make = getattr(worker.executor, "staging_pool", StagingPool)
        pool = make(o.staging_slots * self.page_bytes, o.staging_slots, self.page_bytes)
        transport: Any
        if o.transport == "nixl":
            from hisparse.transport.nixl import NixlTransport

            transport = NixlTransport(pool, f"decoder-{os.getpid()}-{rank}", o.chunk_pages,
                                      o.window)
            transport.connect(self.prefiller.metadata, PREFILLER)
        else:
            transport = LoopbackTransport(pool, o.chunk_pages, o.window)
            transport.connect(self.prefiller)
        self.transports.append(transport)
        runner = ImportRunner(transport, worker.executor, worker.import_pools(),
                              worker.layout, self.prefiller, PREFILLER)
        worker.attach_importer(runner)
        self.runners.append(runner)
        return runner

    def sample(self) -> None:
        """Once per step, after ``advance``: the most slots rank 0 held during it."""
        if self.runners:
            self.figures.staging_in_use.append(self.runners[0].step_peak)

    @property
    def idle(self) -> bool:
        return all(r.idle for r in self.runners)

    def close(self) -> None:
        """Every runner drained, every registration dropped, the prefiller process reaped
        (idempotent)."""
        for runner in self.runners:
            runner.drain()
        f = self.figures
        f.staged_bytes = sum(r.stats.staged_bytes for r in self.runners[:1])
        f.direct_bytes = sum(r.stats.direct_bytes for r in self.runners[:1])
        f.staging_peak = max((r.stats.staging_peak for r in self.runners), default=0)
        f.reasons = sum((r.stats.reasons for r in self.runners), Counter())
        # the workers report the failures they saw; one the coordinator ended before its
        # worker started it (aborted, or its worker lost, before the command arrived) is
        # counted here, so the reasons sum to the failures
        unseen = f.failed - sum(f.reasons.values())
        if unseen > 0:
            f.reasons["not_started"] = unseen
        for tr in self.transports:
            tr.close()
        self.transports.clear()
        if self.o.transport == "nixl" and not self.prefiller.reaped:
            self.prefiller.stop()
