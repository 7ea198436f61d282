"""The worker's import runner: one ``Transport``, its ``StagingPool``, the imports in flight.

Given an ``ImportCommand`` (docs/pd-import.md) it checks the prefiller's announcement
against the command (``Transport.begin``), then each ``advance``:

- host target: binds pending chunks to staging slots it leases (at most ``window``
  chunks hold slots per import; when the pool is exhausted the chunk waits: never an
  error), and for every chunk that landed copies each page from its slot into the
  page's host block on every cache, mirrors a page that has a GPU block into those
  resident rows in the same pass, and releases the slots (with the CUDA executor and
  its staging pool in VRAM, each cache's blocks of every page that landed in one call
  go in one copy launch, ``write_host_blocks``);
- device target: binds chunks to the pages' resident GPU blocks, registered with the
  transport, which READs into them directly (rows past a final page's valid rows are
  zeroed first: a block that is not full lands in one page, rest zero).

It reports pages landed (1-based, each once), imports done (every page landed, no slot
held) and imports failed (typed ``ImportFailReason``). An abort, a failure and a worker
loss all wait for READs already posted to end before anything is released, since such a
READ still writes its destination. Cost per ``advance`` is O(imports in flight + chunks
that moved).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from hisparse.executor.layout import PoolLayout
from hisparse.spec.messages import (
    MAX_DETAIL_CHARS,
    ImportCommand,
    ImportFailReason,
    ImportFailure,
    ImportLanded,
)
from hisparse.transport.base import BlockDest, ChunkState, ImportHandle, Transport
from hisparse.transport.errors import AnnouncementRefused, StagingExhausted, TransportError
from hisparse.transport.geometry import Announcement, ImportRequest
from hisparse.transport.staging import StagingLease, buffer_address, on_device


class ImportRefused(ValueError):
    """An import command the worker refuses before anything is applied."""


class AnnouncementSource(Protocol):
    """Where the decoder learns what a prefiller holds for a request (the prefiller's
    ``announce``; in an engine, the request's transfer parameters)."""

    def announce(
        self, req_id: str, num_tokens: int, row_bytes: int, block_size: int, layers: int = 1
    ) -> Announcement: ...


@dataclass
class _Import:
    cmd: ImportCommand
    request: ImportRequest
    handle: ImportHandle
    copied: set[int] = field(default_factory=set)  # chunks whose pages are at their dests
    failure: tuple[ImportFailReason, str] | None = None


@dataclass
class ImportStats:
    """What the runner did (the simulate report's import figures)."""

    started: int = 0
    done: int = 0
    failed: int = 0
    staged_bytes: int = 0  # bytes READ into staging slots
    direct_bytes: int = 0  # bytes READ straight into resident GPU blocks
    staging_peak: int = 0  # most slots in use at once
    staging_waits: int = 0  # chunks that waited a step for a free slot
    reasons: Counter[str] = field(default_factory=Counter)  # failures: reason (or aborted)


class ImportRunner:
    """The imports of one worker: ``start`` / ``abort`` / ``advance`` / ``take_acks``.

    ``pools`` are the worker's caches in layer order (a page carries one block per
    cache, layer-major); ``executor`` implements ``executor.importing.ImportExecutor``.
    """

    def __init__(
        self,
        transport: Transport,
        executor: Any,
        pools: Sequence[Any],
        layout: PoolLayout,
        source: AnnouncementSource,
        prefiller: str,
    ) -> None:
        page_bytes = len(pools) * layout.block_tokens * layout.row_bytes
        pool = transport.pool
        if pool.page_bytes != page_bytes:
            raise ImportRefused(
                f"the staging pool holds pages of {pool.page_bytes} bytes, an imported page "
                f"is {page_bytes} ({len(pools)} layers x {layout.block_tokens} rows x "
                f"{layout.row_bytes} bytes): size the pool for that page"
            )
        if transport.chunk_pages > pool.slots:
            raise ImportRefused(
                f"chunks of {transport.chunk_pages} pages cannot be staged in {pool.slots} "
                f"slots: raise the staging slots to at least {transport.chunk_pages}"
            )
        self.transport = transport
        self.executor = executor
        self.pools = list(pools)
        self.layout = layout
        self.source = source
        self.prefiller = prefiller
        self.live: dict[int, _Import] = {}
        self.stats = ImportStats()
        self.step_peak = 0
        self._landed: dict[int, list[int]] = {}
        self._done: list[int] = []
        self._failed: list[ImportFailure] = []
        self._addr = [buffer_address(executor.import_memory(p)) for p in self.pools]
        for p in self.pools:
            transport.register(executor.import_memory(p))

    # -- commands ---------------------------------------------------------------------

    def check(self, cmd: ImportCommand) -> None:
        """Refuse a command whose coordinates do not fit this worker (changes nothing)."""
        if cmd.import_id in self.live:
            raise ImportRefused(f"import {cmd.import_id} is already in flight")
        if cmd.block_size != self.layout.block_tokens:
            raise ImportRefused(f"import {cmd.import_id} has blocks of {cmd.block_size} "
                                f"tokens, the caches {self.layout.block_tokens}")
        for pg in cmd.pages:
            if pg.gpu_block is not None and not 0 <= pg.gpu_block < self.layout.gpu_blocks:
                raise ImportRefused(f"import {cmd.import_id} page {pg.page_index}: GPU block "
                                    f"{pg.gpu_block} out of range")
            if pg.host_block is not None and not 0 <= pg.host_block < self.layout.host_blocks:
                raise ImportRefused(f"import {cmd.import_id} page {pg.page_index}: host block "
                                    f"{pg.host_block} out of range")

    def start(self, cmd: ImportCommand) -> None:
        """Begin ``cmd`` (already ``check``ed). A refused announcement or a prefiller that
        cannot announce is a failed import (reported), not an error of the command."""
        self.check(cmd)
        layout = self.layout
        req = ImportRequest(cmd.request_id, cmd.num_tokens, layout.row_bytes,
                            cmd.block_size, self.prefiller, len(self.pools))
        self.stats.started += 1
        try:
            ann = self.source.announce(cmd.request_id, cmd.num_tokens, layout.row_bytes,
                                       cmd.block_size, len(self.pools))
            handle = self.transport.begin(req, ann)
        except AnnouncementRefused as exc:
            self._fail_now(cmd.import_id, "refused", str(exc))
            return
        except TransportError as exc:
            self._fail_now(cmd.import_id, "prefiller_lost", str(exc))
            return
        self.live[cmd.import_id] = _Import(cmd, req, handle)

    def abort(self, import_id: int) -> None:
        """Abort an import in flight (nothing is posted any more; it is reported failed
        once its READs in flight end). Unknown IDs are ignored (it ended already)."""
        imp = self.live.get(import_id)
        if imp is not None and imp.failure is None:
            imp.failure = ("transport", "aborted")
            self.transport.abort(imp.handle, "aborted")

    # -- progress ---------------------------------------------------------------------

    def advance(self) -> None:
        """Bind, poll, copy and release for every import in flight; never blocks.
        ``step_peak``: the most staging slots in use during this call."""
        self.step_peak = self.transport.pool.in_use
        for iid in list(self.live):
            imp = self.live[iid]
            if imp.handle.error is None:
                self._bind(imp)
            self.transport.poll(imp.handle)
            self._land(imp)
            self._end_if_ended(iid, imp)

    def drain(self, max_polls: int = 1_000_000) -> None:
        """Advance until no import is in flight (tests and the end of a run); bounded:
        an import still in flight after ``max_polls`` rounds is aborted."""
        for _ in range(max_polls):
            if not self.live:
                return
            self.advance()
        for iid in list(self.live):
            self.abort(iid)
            imp = self.live[iid]
            self.transport.wait(imp.handle)
            self._end_if_ended(iid, imp)

    def restart(self) -> tuple[int, ...]:
        """Worker loss: every import in flight is dropped (its READs in flight waited
        for, its slots released) and nothing about it is reported; the coordinator fails
        them. Returns their import IDs."""
        lost = tuple(self.live)
        self.stats.reasons["worker_lost"] += len(lost)
        for iid in lost:
            imp = self.live.pop(iid)
            self.transport.abort(imp.handle, "worker lost")
            self.transport.wait(imp.handle)
            self._release(imp)
            self.transport.finish(imp.handle)
        self._landed.clear()
        self._done.clear()
        self._failed.clear()
        return lost

    def take_acks(self) -> tuple[tuple[ImportLanded, ...], tuple[int, ...],
                                 tuple[ImportFailure, ...]]:
        """(landed, done, failed) since the last call, for the worker meta."""
        landed = tuple(ImportLanded(import_id=i, pages=tuple(p)) for i, p in self._landed.items())
        done, failed = tuple(self._done), tuple(self._failed)
        self._landed, self._done, self._failed = {}, [], []
        return landed, done, failed

    @property
    def idle(self) -> bool:
        """No import in flight and no staging slot held."""
        return not self.live and self.transport.pool.in_use == 0

    # -- internals --------------------------------------------------------------------

    def _bind(self, imp: _Import) -> None:
        h, cmd = imp.handle, imp.cmd
        holding = sum(1 for i in range(len(h.chunks))
                      if h.bound(i) and i not in imp.copied)
        for i, pages in enumerate(h.chunks):
            if h.bound(i):
                continue
            if cmd.target == "device":
                self._zero_tails(imp, pages)
                dests: list[Any] = [BlockDest(cmd.request_id, self._block_addrs(pg))
                                    for pg in (cmd.pages[p] for p in pages)]
            else:
                if holding >= self.transport.window:
                    return
                try:
                    dests = self.transport.pool.lease(cmd.request_id, len(pages))
                except StagingExhausted:
                    self.stats.staging_waits += 1
                    return
                holding += 1
                in_use = self.transport.pool.in_use
                self.step_peak = max(self.step_peak, in_use)
                self.stats.staging_peak = max(self.stats.staging_peak, in_use)
            try:
                self.transport.bind(h, i, dests)
            except AnnouncementRefused as exc:  # NIXL refused the descriptors
                if cmd.target == "host":
                    self.transport.pool.release(dests)
                imp.failure = ("refused", str(exc))
                self.transport.abort(h, str(exc))
                return

    def _block_addrs(self, pg: Any) -> tuple[int, ...]:
        off = self.layout.resident_row(pg.gpu_block, 0) * self.layout.row_bytes
        return tuple(base + off for base in self._addr)

    def _zero_tails(self, imp: _Import, pages: Iterable[int]) -> None:
        """Rows past a final page's valid rows, in its GPU block: zero (device target)."""
        b = self.layout.block_tokens
        for p in pages:
            pg = imp.cmd.pages[p]
            if pg.valid_rows < b and pg.gpu_block is not None:
                start = self.layout.resident_row(pg.gpu_block, pg.valid_rows)
                rows = np.arange(start, start + b - pg.valid_rows, dtype=np.int64)
                zeros = np.zeros((rows.size, self.layout.row_bytes), np.uint8)
                for pools in self.pools:
                    self.executor.write_device_rows(pools, rows, zeros)

    def _land(self, imp: _Import) -> None:
        """Chunks that landed: copy staged pages to their host blocks (and mirrors),
        release their slots, report their pages. A failed import copies nothing on: its
        slots go back once its READs in flight end (``_release``)."""
        h, cmd = imp.handle, imp.cmd
        if h.error is not None:
            return
        ready = [i for i, state in enumerate(h.states)
                 if state is ChunkState.DONE and i not in imp.copied]
        staged: list[tuple[Any, int]] = []  # (page command, staging slot)
        counts: list[tuple[int, int]] = []  # each ready chunk's (staged, direct) bytes
        for i in ready:
            via_slot = direct = 0
            for p, dest in zip(h.chunks[i], h.dests[i] or (), strict=True):
                nbytes = imp.request.valid_bytes(p)
                if isinstance(dest, StagingLease):
                    staged.append((cmd.pages[p], dest.slot))
                    via_slot += nbytes
                else:
                    direct += nbytes
            counts.append((via_slot, direct))
        self._copy_out(staged)
        for i, (via_slot, direct) in zip(ready, counts, strict=True):
            leases = [d for d in h.dests[i] or () if isinstance(d, StagingLease)]
            if leases:  # a refused release leaves the chunk unsettled and uncounted
                self.transport.pool.release(leases)
            imp.copied.add(i)
            self.stats.staged_bytes += via_slot
            self.stats.direct_bytes += direct
            self._landed.setdefault(cmd.import_id, []).extend(
                cmd.pages[p].page_index for p in h.chunks[i])

    def _copy_out(self, staged: Sequence[tuple[Any, int]]) -> None:
        """Every staged page of this call into its host blocks, and mirrored where it has
        a GPU block. An executor with ``write_host_blocks`` and a staging pool in device
        memory whose slots hold whole blocks (the CUDA executor's) copies each cache's
        blocks in one launch; otherwise page by page, block by block."""
        pool = self.transport.pool
        layout = self.layout
        block_bytes = layout.block_tokens * layout.row_bytes
        batched = getattr(self.executor, "write_host_blocks", None)
        if batched is None or not on_device(pool.buffer) or pool.slot_bytes % block_bytes:
            for pg, slot in staged:
                self._copy_staged(pg, pool.view(slot))
            return
        if not staged:
            return
        per_slot = pool.slot_bytes // block_bytes  # the buffer as whole blocks
        for layer, pools in enumerate(self.pools):
            batched(pools, pool.buffer,
                    [(pg.host_block, slot * per_slot + layer) for pg, slot in staged])
        for pg, slot in staged:
            if pg.gpu_block is not None:
                self._mirror(pg, pool.view(slot))

    def _copy_staged(self, pg: Any, staged: Any) -> None:
        layout = self.layout
        blocks = staged.reshape(len(self.pools), layout.block_tokens, layout.row_bytes)
        for layer, pools in enumerate(self.pools):
            self.executor.write_host_block(pools, pg.host_block, blocks[layer])
        if pg.gpu_block is not None:  # needed immediately: its resident destination too
            self._mirror(pg, staged)

    def _mirror(self, pg: Any, staged: Any) -> None:
        """A staged page into its resident GPU block, every cache (the mirror)."""
        layout = self.layout
        b = layout.block_tokens
        blocks = staged.reshape(len(self.pools), b, layout.row_bytes)
        mirror = np.arange(b, dtype=np.int64) + layout.resident_row(pg.gpu_block, 0)
        for layer, pools in enumerate(self.pools):
            self.executor.write_device_rows(pools, mirror, blocks[layer])

    def _release(self, imp: _Import) -> None:
        """Return the staging slots of chunks bound and not copied (after READs ended)."""
        h = imp.handle
        leases = [d for i, ds in enumerate(h.dests) if ds is not None and i not in imp.copied
                  for d in ds if isinstance(d, StagingLease)]
        if leases:
            self.transport.pool.release(leases)
        imp.copied.update(i for i, ds in enumerate(h.dests) if ds is not None)

    def _end_if_ended(self, iid: int, imp: _Import) -> None:
        h = imp.handle
        landed = h.done and len(imp.copied) == len(h.chunks)
        if landed and imp.failure is None:
            self.transport.finish(h)
            del self.live[iid]
            self._done.append(iid)
            self.stats.done += 1
        elif landed or (h.error is not None and h.ended):  # failed, or aborted too late
            self._release(imp)
            self.transport.finish(h)
            del self.live[iid]
            reason, detail = imp.failure or (
                (h.error.reason, str(h.error)) if h.error is not None else ("transport", ""))
            self._landed.pop(iid, None)  # a failed import's progress is moot
            self._fail_now(iid, reason, detail)

    def _fail_now(self, iid: int, reason: ImportFailReason, detail: str) -> None:
        self.stats.failed += 1
        self.stats.reasons["aborted" if detail == "aborted" else reason] += 1
        self._failed.append(ImportFailure(
            import_id=iid, reason=reason, detail=detail[:MAX_DETAIL_CHARS]))
