"""The actions of tla/HiSparse.tla as Python methods with the same names.

Each action first checks the spec's enabling condition and every argument, and
raises a typed error (``ActionNotEnabled``, ``UnknownTransfer``) before it
touches anything; only then does it apply the spec's effect. So a refused
action leaves the state exactly as it was. ``bug`` in the config switches on
the same injected defects as the spec's ``Bug`` constant: each is a variant
registered in spec/catalogue.py that replaces one named small step below (a guard
or an effect), so the production rules name no bug.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, ClassVar, cast

from hisparse.spec.catalogue import replayable, variant
from hisparse.spec.constants import ProtocolConfig
from hisparse.spec.errors import (
    AckNotOwed,
    ActionNotEnabled,
    RepeatedAck,
    UnknownRank,
    UnknownTransfer,
)
from hisparse.spec.invariants import check_invariants
from hisparse.spec.lifecycle import HOST_PAGE, REQUEST, TRANSFER
from hisparse.spec.native import mypyc_attr
from hisparse.spec.observe import ACTION_WRITES, Observer
from hisparse.spec.state import (
    GARBAGE,
    LIVE_IMPORT,
    NO_PG,
    SENTINELS,
    HostBlock,
    HostState,
    Imp,
    ImportTarget,
    Key,
    Loc,
    Meta,
    Page,
    PgImp,
    Phase,
    ProtocolState,
    ReqState,
    RequestId,
    Spill,
    Tier,
    Transfer,
)


@dataclass
class LossOutcome:
    """What a worker loss changed outside the protocol's own tables."""

    unpinned: list[int] = field(default_factory=list)  # source pins released
    returned: list[int] = field(default_factory=list)  # GPU blocks handed back to HMA
    resident: list[Page] = field(default_factory=list)  # running pages spillable again
    freed: list[int] = field(default_factory=list)  # host blocks back in the pool
    published: list[int] = field(default_factory=list)  # host pages published
    imports_failed: list[RequestId] = field(default_factory=list)  # imports it failed


# tuple.__new__ builds a NamedTuple without the Python-level __new__ frame (hot paths)
_tuple_new = tuple.__new__
# the "enqueued now" set of an enqueued-ID lookup (never mutated)
_NO_IDS: set[int] = set()
# a Spill's "no rank has enqueued it yet"
_NO_RANKS: frozenset[int] = frozenset()

# (action, args, changes of the written variables) as recorded for trace validation
StepRecord = tuple[str, dict[str, Any], dict[str, Any]]


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)  # (spec/native.py)
class ProtocolMachine:
    """Drives one ProtocolState through the spec's actions.

    ``check`` runs every invariant after every action (tests: always on);
    ``record`` keeps (action, args, changes of the written variables) per step.
    Build one with ``ProtocolMachine.create(config)``: a config that names an injected
    bug gets that bug's subclass (``machine_class``).
    """

    # the injected bug whose step this class carries ("none": the production rules)
    injected: ClassVar[str] = "none"

    @classmethod
    def create(
        cls, config: ProtocolConfig, *, check: bool = True, record: bool = False
    ) -> ProtocolMachine:
        """A machine for ``config``: the subclass of its injected bug, if it names one."""
        return machine_class(config.bug)(config, check=check, record=record)

    def __init__(
        self, config: ProtocolConfig, *, check: bool = True, record: bool = False
    ) -> None:
        carries = getattr(type(self), "injected", "none")  # (read from Python: subclasses)
        if config.bug != carries:
            raise ValueError(
                f"config names injected bug {config.bug!r} but {type(self).__name__} "
                f"carries {carries!r}: build it with ProtocolMachine.create(config)"
            )
        self.state = ProtocolState.initial(config)
        self.check = check
        self.steps: list[StepRecord] | None = [] if record else None
        # checked or recorded: the hot actions test this one flag (fixed at construction)
        self._observed = check or record
        self.observer: Observer | None = Observer(self.state) if record else None
        self.bug = config.bug
        self.invariant_checks = 0
        # the spec's Ranks and Copiers, and {w} per rank (built once: acks test them)
        self.everyone = frozenset(range(config.ranks))
        self.copiers = frozenset(config.copiers)
        self._one = [frozenset((w,)) for w in range(config.ranks)]
        self._has_readers = bool(config.readers)  # a shared pool with reader ranks
        self._host_capacity = config.host_capacity  # (a property of a frozen config)
        # every request ever declared, only while recording: a trace's header names them all
        self.declared: dict[RequestId, tuple[Key, ...]] | None = {} if record else None
        self.declared_imports: set[RequestId] | None = set() if record else None

    # -- constants --------------------------------------------------------

    def add_request(self, r: RequestId, keys: Sequence[Key]) -> None:
        """Declare a request and the keys of its pages (a constant of the spec)."""
        imported = self.declared_imports
        if imported is not None and r in imported:
            raise ActionNotEnabled("add_request", f"request id {r!r} was an import while "
                                                  "recording a trace: add_import")
        self._declare(r, keys)

    def _declare(self, r: RequestId, keys: Sequence[Key]) -> None:
        s = self.state
        if not r or r in SENTINELS:
            raise ActionNotEnabled("add_request", f"request id {r!r} is empty or reserved")
        if r in s.page_keys:
            raise ActionNotEnabled("add_request", f"request {r!r} already declared")
        t = tuple(keys)
        if not t:
            raise ActionNotEnabled("add_request", f"request {r!r} has no pages")
        if not all(t) or not SENTINELS.isdisjoint(t):  # (C loops: the common case)
            bad = [k for k in t if not k or k in SENTINELS]
            raise ActionNotEnabled("add_request", f"reserved or empty keys {bad!r}")
        declared = self.declared
        if declared is not None:
            seen = declared.get(r)
            if seen is not None and seen != t:
                raise ActionNotEnabled(
                    "add_request",
                    f"request id {r!r} reused with other keys while recording a trace",
                )
            declared[r] = t
        s.page_keys[r] = t
        if self.check:
            s.keys_seen.update(t)
        s.req[r] = "new"
        loc = s.loc
        for i in range(1, len(t) + 1):  # every page: no block yet (no pages_of list)
            loc[(r, i)] = None

    # -- bookkeeping --------------------------------------------------------

    def _done(self, action: str, args: dict[str, Any]) -> None:
        # record first: a trace that ends in a violation shows the violating step
        if self.steps is not None and self.observer is not None:
            post = self.observer.post(self.state, ACTION_WRITES[action])
            self.steps.append((action, args, post))
        if self.check:
            self.invariant_checks += 1
            check_invariants(self.state)

    def _set_loc(self, p: Page, where: Loc | None) -> None:
        """Write a block-table entry, keeping the host reference counts in step."""
        s = self.state
        old = s.loc[p]
        if old is not None and old[0] == "host":
            left = s.host_refs[old[1]] - 1
            if left:
                s.host_refs[old[1]] = left
            else:
                del s.host_refs[old[1]]
        if where is not None and where[0] == "host":
            s.host_refs[where[1]] = s.host_refs.get(where[1], 0) + 1
        s.loc[p] = where

    def _own(self, g: int, p: Page | None) -> None:
        """Write a resident lease, keeping the per-request reference counts in step
        (counted inline: this runs several times per request)."""
        s = self.state
        refs = s.req_refs
        old = s.gpu_owner[g]
        if old is not None:
            n = refs.get(old[0], 0) - 1
            if n:
                refs[old[0]] = n
            else:
                refs.pop(old[0], None)
        if p is not None:  # (a count is never below 1: one more is never 0)
            refs[p[0]] = refs.get(p[0], 0) + 1
        s.gpu_owner[g] = p

    def _set_spill(self, h: int, sp: Spill | None) -> None:
        """Write an open transfer, keeping its indexes in step (a closed one leaves them)."""
        s = self.state
        old = s.spill[h]
        if (
            old is not None
            and sp is not None
            and old.transfer_id == sp.transfer_id
            and old.page == sp.page
        ):  # a phase change: every index already says so
            s.spill[h] = sp
            return
        refs = s.req_refs  # (counted inline: this runs several times per transfer)
        if old is not None:
            n = refs.get(old.page[0], 0) - 1
            if n:
                refs[old.page[0]] = n
            else:
                refs.pop(old.page[0], None)
            if sp is None or sp.transfer_id != old.transfer_id:
                s.transfer_dst.pop(old.transfer_id, None)
        if sp is not None:
            refs[sp.page[0]] = refs.get(sp.page[0], 0) + 1
            s.transfer_dst[sp.transfer_id] = h
            s.open_spills.add(h)
        else:
            s.open_spills.discard(h)
        s.spill[h] = sp

    def _host_to(self, h: int, trigger: str) -> None:
        """Fire a host-page lifecycle trigger, keeping the in-use count in step."""
        s = self.state
        states = s.host_state
        old = states[h]
        new = HOST_PAGE.table.get((old, trigger)) or HOST_PAGE.next(old, trigger)  # (raises)
        if (old == "free") is not (new == "free"):
            s.host_used += 1 if old == "free" else -1
        states[h] = cast(HostState, new)

    def _request(self, action: str, r: RequestId) -> None:
        if r not in self.state.req:
            raise ActionNotEnabled(action, f"unknown request {r!r}")

    def _host(self, action: str, h: int) -> None:
        if not 0 <= h < self.state.config.host_blocks:
            raise ActionNotEnabled(action, f"host block {h} out of range")

    def _rank(self, action: str, w: int) -> None:
        """Refuse a rank the protocol does not have (``action`` is not enabled for it)."""
        if not (type(w) is int and 0 <= w < self.state.config.ranks):
            raise UnknownRank(w, self.state.config.ranks)

    def _gpu(self, action: str, g: int) -> None:
        if not 0 <= g < self.state.config.gpu_blocks:
            raise ActionNotEnabled(action, f"GPU block {g} out of range")

    def hit_len(self, r: RequestId) -> int:
        """The spec's HitLen: the longest prefix of r's pages published on the host."""
        n = 0
        prefix = self.state.prefix
        for k in self.state.page_keys[r]:
            if not prefix.get(k):
                break
            n += 1
        return n

    def check_arrive(self, r: RequestId) -> None:
        """Raise ActionNotEnabled unless r is a declared request that has not arrived
        (and does not bring prefill KV: it comes through ImportArrive)."""
        st = self.state.req.get(r)
        if st != "new":
            self._request("Arrive", r)  # raises for an unknown request
            raise ActionNotEnabled("Arrive", f"request {r!r} is {st}, not new")
        if r in self.state.imports:
            raise ActionNotEnabled("Arrive", f"request {r!r} is imported: ImportArrive")

    # -- scheduler actions ------------------------------------------------

    def Arrive(
        self,
        r: RequestId,
        blocks: Sequence[int] | None = None,
        hosts: Sequence[int] | None = None,
    ) -> None:
        """Admit r: published host pages serve its prefix hit, free GPU blocks the rest.

        ``blocks``/``hosts`` pick the GPU blocks and host hits; by default the
        lowest-numbered candidates are taken. ``hosts`` shorter than the hit caps it
        (the indexer suffix rule's fallback): the pages past it get GPU blocks.
        """
        s, a = self.state, "Arrive"
        st = s.req.get(r)
        if st != "new" or (s.imports and r in s.imports):
            self.check_arrive(r)  # raises
        keys = s.page_keys[r]
        hit = self.hit_len(r)
        m = hit if hosts is None else len(hosts)  # a capped hit: the first m pages of it
        if m > hit:
            raise ActionNotEnabled(a, f"hosts {list(hosts or ())} exceed the {hit}-page hit")
        if m:  # (no comprehension frames: no hit)
            if hosts is None:
                hosts = [min(s.prefix[keys[i]]) for i in range(m)]
            hits = [HostBlock(x) for x in hosts]  # (typed HostBlock: mypyc keeps the type)
            if any(hits[i] not in s.prefix[keys[i]] for i in range(m)):
                raise ActionNotEnabled(
                    a, f"hosts {list(hits)} are not published copies of the hit"
                )
        need = len(keys) - m
        if blocks is None:  # the lowest free blocks (a scan: tests and drivers only)
            cand = [g for g in range(s.config.gpu_blocks) if s.gpu_owner[g] is None]
            if self._leased_is_candidate():
                cand += [g for g in range(s.config.gpu_blocks) if s.gpu_owner[g] is not None]
            if len(cand) < need:
                raise ActionNotEnabled(a, f"needs {need} free GPU blocks, {len(cand)} free")
            blocks = cand[:need]
        owner, n = s.gpu_owner, s.config.gpu_blocks
        if len(blocks) and not (min(blocks) >= 0 and max(blocks) < n):  # (C loops: common case)
            for g in blocks:
                if not 0 <= g < n:
                    self._gpu(a, g)  # raises
        owned = any(map(owner.__getitem__, blocks))  # some block already holds a page
        usable = not owned or self._leased_is_candidate()
        if len(blocks) != need or len(set(blocks)) != need or not usable:
            raise ActionNotEnabled(a, f"blocks {list(blocks)} are not {need} distinct free blocks")
        s.req[r] = cast(ReqState, REQUEST.next(st, "arrive"))  # type: ignore[arg-type]
        if m:
            for i in range(m):  # (hits: set above whenever there is a hit)
                self._set_loc((r, i + 1), ("host", hits[i]))
        loc, data = s.loc, s.gpu_data
        j = m
        for g in blocks:
            j += 1
            p = (r, j)
            if loc[p] is None:  # _set_loc's whole effect when neither side is on the host
                loc[p] = ("gpu", g)
            else:
                self._set_loc(p, ("gpu", g))
            if owned:
                self._own(g, p)
            else:  # _own's whole effect on a free block (its reference count: below)
                owner[g] = p
            data[g] = keys[j - 1]
        if not owned and need:
            refs = s.req_refs
            refs[r] = refs.get(r, 0) + need
        if self._observed:  # nobody reads args otherwise
            self._done(a, {"request": r})

    def _leased_is_candidate(self) -> bool:
        """Arrive's candidate blocks (the spec's Cand) are the free ones only."""
        return False

    def StartSpill(self, p: Page, h: int) -> int:
        """Pin source and destination leases and send a SparseKVPageTransfer; returns its ID."""
        s, a = self.state, "StartSpill"
        where = self.check_spill(p)
        if not 0 <= h < s.config.host_blocks:
            self._host(a, h)  # raises
        hb = HostBlock(h)  # (typed HostBlock: in the compiled build an int loses its type)
        if s.host_state[hb] != "free":
            raise ActionNotEnabled(a, f"host block {hb} is {s.host_state[hb]}")
        cap = self._spill_capacity()
        if s.host_used >= cap:
            raise ActionNotEnabled(a, f"host pool full ({cap} blocks in use)")
        g = where[1]
        tid = s.next_transfer_id
        s.next_transfer_id = tid + 1
        self._host_to(hb, "lease")
        r = p[0]
        s.host_key[hb] = s.page_keys[r][p[1] - 1]  # (key_of, inlined)
        sp = _tuple_new(Spill, (g, p, "sent", tid, _NO_RANKS, self.everyone))
        if s.spill[hb] is None:  # _set_spill's whole effect on a block with no open transfer
            refs = s.req_refs
            refs[r] = refs.get(r, 0) + 1
            s.transfer_dst[tid] = hb
            s.open_spills.add(hb)
            s.spill[hb] = sp
        else:
            self._set_spill(hb, sp)
        t = _tuple_new(Transfer, (tid, g, hb))
        for down in s.down:  # the same command to every rank
            down[tid] = t
        self._pin_source(p, g, hb)
        if self._observed:  # nobody reads args otherwise
            self._done(a, {"page": [p[0], p[1]], "host_block": hb})
        return tid

    def _spill_capacity(self) -> int:
        """The host pool's capacity in blocks (the spec's HostCapacity, rounded down; the
        config is frozen, so it is read once, at construction)."""
        return self._host_capacity

    def _pin_source(self, p: Page, g: int, h: HostBlock) -> None:
        """The source stays leased and pinned until the enqueued ack."""
        self.state.src_pin[g] = True

    def check_spill(self, p: Page) -> Loc:
        """The page's part of StartSpill's condition (the host block's is separate):
        returns its resident location, or raises ActionNotEnabled."""
        s, a = self.state, "StartSpill"
        if isinstance(p, tuple) and len(p) == 2:  # the common case first: every check passes
            where = s.loc.get(p)  # (only known pages have entries)
            if (
                where is not None
                and where[0] == "gpu"
                and not s.src_pin[where[1]]
                and s.req[p[0]] == "running"
            ):
                return where
        keys = s.page_keys.get(p[0]) if isinstance(p, tuple) and len(p) == 2 else None
        if keys is None or not 1 <= p[1] <= len(keys):  # (s.known(p), inlined)
            raise ActionNotEnabled(a, f"unknown page {p!r}")
        if s.req[p[0]] != "running":
            raise ActionNotEnabled(a, f"request {p[0]!r} is {s.req[p[0]]}")
        where = s.loc[p]
        if where is None or where[0] != "gpu":
            raise ActionNotEnabled(a, f"page {p!r} is not resident on the GPU")
        if s.src_pin[where[1]]:
            raise ActionNotEnabled(a, f"GPU block {where[1]} is already pinned by a transfer")
        return where

    def ConsumeMeta(self, w: int = 0) -> None:
        """Consume rank w's oldest worker meta: enqueued IDs first, then completed IDs."""
        s = self.state
        if not 0 <= w < len(s.up):
            self._rank("ConsumeMeta", w)  # raises
        up = s.up[w]
        if not up:
            raise ActionNotEnabled("ConsumeMeta", f"no worker meta of rank {w} to consume")
        if s.lost[w]:
            raise _gap_refusal(w)
        meta = up[0]
        enq = self._resolve_ids(meta.enqueued, "sent", _NO_IDS, w) if meta.enqueued else []
        done = self._completed_hosts(meta, set(enq), w) if meta.completed else []
        up.popleft()
        self._apply_meta(w, enq, done)
        if self._observed:  # nobody reads args otherwise
            self._done("ConsumeMeta", {"rank": w})

    def _completed_hosts(self, meta: Meta, enqueued_now: set[int], w: int) -> list[int]:
        """The destinations of the meta's completed IDs, each past rank w's enqueued ack."""
        if not meta.completed:
            return []
        return self._resolve_ids(meta.completed, "enqueued", enqueued_now, w)

    def _apply_meta(self, w: int, enq: list[int], done: list[int]) -> None:
        """The spec's ConsumeMeta(w): rank w's enqueued acks first (a transfer every rank
        enqueued moves to the host and releases its source), then its completed acks; a
        transfer no rank owes an ack for any more closes."""
        s = self.state
        spill, one, everyone = s.spill, self._one[w], self.everyone
        reader = w not in self.copiers  # a reader's enqueued ack is its last
        first: list[int] = []  # the spec's E0: acked while sent
        full: list[int] = []  # E: every rank's enqueued ack consumed
        for h in enq:  # (Spill built whole: _replace costs a frame and a map per field)
            sp = spill[h]
            assert sp is not None  # an open transfer (_resolve_ids)
            ranks, need, phase = sp.enq, sp.need, sp.phase
            if phase == "sent":
                first.append(h)
                ranks = ranks | one
                if ranks == everyone:
                    full.append(h)
                    phase = self._after_enqueued(h, sp.page)
            if reader:
                need = need - one
            # (_set_spill's phase-change case: no index changes)
            spill[h] = _tuple_new(Spill, (sp.src, sp.page, phase, sp.transfer_id, ranks, need))
        if first:
            for h in self._released_sources(first, full):
                self._release_source(spill[h])
        if reader:  # a transfer no rank owes an ack for any more closes
            for h in enq:
                sp = spill[h]
                if sp is not None and sp.phase != "sent" and not sp.need:
                    self._close(h)
        for h in done:
            sp = spill[h]
            if sp is None:  # closed above by this meta's enqueued ack
                continue
            need = sp.need - one
            if sp.phase != "sent" and (not need or self._closes_early(h)):
                self._close(h)
            else:
                spill[h] = _tuple_new(
                    Spill, (sp.src, sp.page, sp.phase, sp.transfer_id, sp.enq, need)
                )

    def _released_sources(self, first: list[int], full: list[int]) -> list[int]:
        """The transfers whose GPU source goes back to HMA in this meta: those every rank
        has enqueued (stream order on every rank makes the reuse safe)."""
        return full

    def _closes_early(self, h: int) -> bool:
        """Whether a completed ack closes transfer h while other ranks still owe acks: never."""
        return False

    def open_transfer(self, tid: int) -> int | None:
        """The destination host block of open transfer ``tid``; None if it is not open."""
        h = self.state.transfer_dst.get(tid)
        if h is None:
            return None
        sp = self.state.spill[h]
        return h if sp is not None and sp.transfer_id == tid else None

    def check_report(
        self, enqueued: Sequence[int], completed: Sequence[int], w: int = 0
    ) -> None:
        """Raise unless rank w's WorkerEnqueue (each of ``enqueued``), WorkerComplete (each
        of ``completed``), WorkerReport and ConsumeMeta would all be enabled in turn: a
        worker meta is checked whole before any of it is applied. O(its IDs)."""
        s = self.state
        if not (type(w) is int and 0 <= w < len(s.up)):
            raise UnknownRank(w, s.config.ranks)
        if s.up[w] or s.w_enq[w] or s.w_done[w]:
            raise ActionNotEnabled("WorkerReport", "a previous worker meta is still pending")
        if s.lost[w]:  # ConsumeMeta refuses every meta of a rank with a gap
            raise _gap_refusal(w)
        if len(enqueued) > 1:
            _refuse_repeats(enqueued)
        if len(completed) > 1:
            _refuse_repeats(completed)
        down = s.down[w]
        for tid in enqueued:
            if tid not in down:
                self._refuse_enqueued(tid, w)  # raises
            if w not in self.copiers and not self._reader_may_enqueue(down[tid]):
                raise ActionNotEnabled(
                    "WorkerEnqueue", f"rank {w} acks transfer {tid} before the writer took it"
                )
        if completed:
            # this meta's enqueued IDs as a set, built only for a completed ID whose copy
            # is not running yet (a pipelined meta's completed acks are earlier steps')
            enq: set[int] | None = None
            copying = s.copying_tid[w]
            for tid in completed:
                h = self.open_transfer(tid)
                if h is None:
                    raise UnknownTransfer(tid, "completed ack for a transfer that is not open")
                if copying.get(h) == tid:  # its copy runs on rank w: enqueued earlier
                    continue
                if enq is None:
                    enq = set(enqueued)
                if not (tid in enq and w in self.copiers):
                    self._refuse_completed(tid, h, w, tid in enq)  # raises

    def _refuse_enqueued(self, tid: int, w: int) -> None:
        """Why rank w may not ack open-or-not transfer ``tid`` as enqueued (always raises)."""
        h = self.open_transfer(tid)
        sp = self.state.spill[h] if h is not None else None
        if sp is None:
            raise UnknownTransfer(tid, "enqueued ack for a transfer that is not open")
        if w in sp.enq:
            raise RepeatedAck(tid, w, "enqueued")
        raise AckNotOwed(tid, w, "its command was dropped by its loss")

    def _refuse_completed(self, tid: int, h: int, w: int, enqueued_now: bool) -> None:
        """Why rank w may not ack open transfer ``tid`` (into h) as completed (raises)."""
        sp = self.state.spill[h]
        assert sp is not None
        if w not in self.copiers:
            raise AckNotOwed(tid, w, "a reader of the shared pool copies nothing")
        if w in sp.enq and w not in sp.need:
            raise RepeatedAck(tid, w, "completed")
        if w not in sp.enq and not enqueued_now and tid not in self.state.down[w]:
            raise AckNotOwed(tid, w, "no copy of it runs on that rank")
        raise UnknownTransfer(tid, "completed ack before its enqueued ack")

    def _resolve_ids(
        self, ids: Sequence[int], phase: str | None, enqueued_now: set[int], w: int = 0
    ) -> list[int]:
        """Map rank w's ack IDs to host blocks, refusing unknown, stale, out-of-order IDs
        and acks rank w does not owe. ``phase``: "sent" for enqueued acks (rank w has not
        enqueued it yet), "enqueued" for completed acks (rank w has), None: only open."""
        s = self.state
        out: list[int] = []
        if len(ids) > 1:
            _refuse_repeats(ids)
        dst, spill = s.transfer_dst, s.spill
        for tid in ids:
            h = dst.get(tid)  # (open_transfer inlined)
            sp = spill[h] if h is not None else None
            if h is None or sp is None or sp.transfer_id != tid:
                raise UnknownTransfer(tid, "not an open transfer")
            if phase == "sent":
                ok = sp.phase != "enqueued" and w not in sp.enq
            elif phase == "enqueued":
                ok = w in sp.need and (
                    sp.phase != "sent" or w in sp.enq or h in enqueued_now
                )
            else:
                ok = True
            if not ok:
                raise UnknownTransfer(
                    tid, f"ack out of order from rank {w}: transfer is {sp.phase}"
                )
            out.append(h)
        return out

    def _after_enqueued(self, h: int, p: Page) -> Phase:
        """Every rank enqueued transfer h (of page p, sent): its block-table entry moves
        to the host; returns the transfer's new phase."""
        phase = cast(Phase, TRANSFER.next("sent", "enqueued_ack"))
        if self.state.req[p[0]] == "running":
            self._set_loc(p, self._moved_entry(h))
        return phase

    def _release_source(self, sp: Spill | None) -> None:
        """An open transfer's GPU source goes back to HMA with its pin."""
        assert sp is not None
        g = sp.src
        s = self.state
        owner = s.gpu_owner  # _own(g, None), inlined: this runs once per transfer
        old = owner[g]
        if old is not None:
            refs = s.req_refs
            n = refs.get(old[0], 0) - 1
            if n:
                refs[old[0]] = n
            else:
                refs.pop(old[0], None)
            owner[g] = None
        s.gpu_data[g] = GARBAGE
        self._unpin(g)

    def _moved_entry(self, h: int) -> tuple[Tier, HostBlock]:
        """The block-table entry of a page whose enqueued ack moved it to host block h.
        (Made a HostBlock here, and typed so: the compiled build (spec/native.py) holds an
        ``int`` or a ``Loc`` unboxed, which would drop the subclass.)"""
        return ("host", HostBlock(h))

    def _unpin(self, g: int) -> None:
        """The enqueued ack releases the source pin with the resident lease."""
        self.state.src_pin[g] = False

    def _close(self, h: int) -> None:
        """No rank owes an ack for transfer h: publish its page, or (an aborted request's,
        an abandoned transfer's) free its destination."""
        s = self.state
        sp = s.spill[h]
        assert sp is not None
        TRANSFER.next(sp.phase, "completed_ack")
        self._set_spill(h, None)
        if s.req[sp.page[0]] != "aborted" and sp.phase != "abandoned":
            self._publish(h)
        else:
            self._discard(h)

    def _discard(self, h: int) -> None:
        """A destination whose bytes will never be published goes back to the pool."""
        s = self.state
        self._host_to(h, "discard")
        s.host_key[h] = None
        self._scribble(h)

    def _scribble(self, h: int) -> None:
        """Host block h, handed back to the pool, is overwritten in every physical pool."""
        for data in self.state.host_data.values():
            data[h] = GARBAGE

    def _publish(self, h: int) -> None:
        s = self.state
        self._host_to(h, "publish")
        k = s.host_key[h]
        assert k is not None
        s.prefix.setdefault(k, set()).add(h)

    def _end(self, r: RequestId, how: str) -> list[int]:
        """End r; returns the GPU blocks handed back to HMA (pinned ones wait)."""
        s = self.state
        s.req[r] = cast(ReqState, REQUEST.next(s.req[r], how))
        # a page's resident lease is always the block its entry names (LivePagesReadable)
        resident: list[tuple[Page, int]] = []
        loc = s.loc
        for i in range(1, len(s.page_keys[r]) + 1):  # (no pages_of list)
            p = (r, i)
            w = loc[p]
            if w is not None:  # an entry already None stays None
                if w[0] == "gpu":
                    resident.append((p, w[1]))
                    loc[p] = None  # _set_loc's whole effect: no host reference to drop
                else:
                    self._set_loc(p, None)
        freed = self._freed_at_end(how, resident)
        if freed:
            owner, refs, data = s.gpu_owner, s.req_refs, s.gpu_data
            for g in freed:  # _own(g, None), inlined
                old = owner[g]
                if old is not None:
                    n = refs.get(old[0], 0) - 1
                    if n:
                        refs[old[0]] = n
                    else:
                        refs.pop(old[0], None)
                    owner[g] = None
                data[g] = GARBAGE
        return freed

    def _freed_at_end(self, how: str, resident: list[tuple[Page, int]]) -> list[int]:
        """The ended request's resident blocks that go back to HMA: the unpinned ones."""
        s = self.state
        owner, pin = s.gpu_owner, s.src_pin
        out: list[int] = []
        for p, g in resident:  # (no comprehension frame)
            if owner[g] == p and not pin[g]:
                out.append(g)
        return out

    def Finish(self, r: RequestId) -> list[int]:
        """r finishes: drop its table entries; returns the GPU blocks given back to HMA."""
        st = self.state.req.get(r)
        if st != "running":
            self._request("Finish", r)  # raises for an unknown request
            raise ActionNotEnabled("Finish", f"request {r!r} is {st}")
        freed = self._end(r, "finish")
        if self._observed:  # nobody reads args otherwise
            self._done("Finish", {"request": r})
        return freed

    def Abort(self, r: RequestId) -> list[int]:
        """r is aborted at any moment; returns the GPU blocks given back to HMA
        (pinned ones wait for their enqueued ack)."""
        s = self.state
        self._request("Abort", r)
        if not REQUEST.allows(s.req[r], "abort"):
            raise ActionNotEnabled("Abort", f"request {r!r} is {s.req[r]}")
        freed = self._end(r, "abort")
        if self._observed:  # nobody reads args otherwise
            self._done("Abort", {"request": r})
        return freed

    def EvictHost(self, h: int) -> None:
        """Drop a published host page that no block-table entry references."""
        s, a = self.state, "EvictHost"
        if not 0 <= h < s.config.host_blocks:
            self._host(a, h)  # raises
        if s.host_state[h] != "valid":
            raise ActionNotEnabled(a, f"host block {h} is {s.host_state[h]}, not valid")
        if not self._evictable(h):
            raise ActionNotEnabled(a, f"host block {h} is still referenced")
        k = s.host_key[h]
        assert k is not None
        self._host_to(h, "evict")
        s.host_key[h] = None
        self._unindex(h, k)
        self._scribble(h)
        if self._observed:  # nobody reads args otherwise
            self._done(a, {"host_block": h})

    def _evictable(self, h: int) -> bool:
        """No block-table entry references host block h."""
        return not self.state.host_refs.get(h)

    def _unindex(self, h: int, k: str) -> None:
        """Drop an evicted page from the prefix index (which holds live keys only)."""
        published = self.state.prefix[k]
        published.discard(h)
        if not published:
            del self.state.prefix[k]

    def retire_refusal(self, r: RequestId) -> str | None:
        """Why ended request r cannot retire yet (None: it can). O(its pages)."""
        s = self.state
        if s.imp and s.imp_of(r).phase in LIVE_IMPORT:
            return f"request {r!r} has an import in flight"
        loc = s.loc
        for i in range(1, len(s.page_keys[r]) + 1):  # ending clears them
            if loc[(r, i)] is not None:
                return f"request {r!r} still has block-table entries"
        return self._open_refs_refusal(r)

    def _open_refs_refusal(self, r: RequestId) -> str | None:
        """Why r cannot retire while resident leases or open transfers name its pages."""
        n = self.state.req_refs.get(r)
        return f"request {r!r} still has {n} resident leases or open transfers" if n else None

    def Retire(self, r: RequestId) -> None:
        """An ended request that nothing references leaves the protocol state; its ID
        may be declared again. Costs O(its pages)."""
        s, a = self.state, "Retire"
        st = s.req.get(r)
        if st is None or not REQUEST.allows(st, "retire"):
            self._request(a, r)  # raises for an unknown request
            raise ActionNotEnabled(a, f"request {r!r} is {st}, not ended")
        why = self.retire_refusal(r)
        if why:
            raise ActionNotEnabled(a, why)
        loc = s.loc  # (the "retire" transition: allowed above)
        for i in range(1, len(s.page_keys[r]) + 1):  # (no pages_of list)
            del loc[(r, i)]
        if s.imports and r in s.imports:  # its import's entries go with it (Init values)
            s.imp.pop(r, None)
            for i in range(1, len(s.page_keys[r]) + 1):
                s.pg.pop((r, i), None)
            s.imports.discard(r)
        del s.req[r], s.page_keys[r]
        if self._observed:  # nobody reads args otherwise
            self._done(a, {"request": r})


    # -- P/D import (docs/pd-import.md) ------------------------------------

    def add_import(self, r: RequestId, keys: Sequence[Key]) -> None:
        """Declare r as a request that arrives with prefill KV (the spec's Imports)."""
        if self.state.config.ranks != 1:
            raise ActionNotEnabled("add_import", "imports are modelled on one rank")
        declared = self.declared
        if declared is not None and r in declared and r not in (self.declared_imports or ()):
            raise ActionNotEnabled("add_import", f"request id {r!r} was an ordinary request "
                                                 "while recording a trace")
        self._declare(r, keys)
        self.state.imports.add(r)
        if self.declared_imports is not None:
            self.declared_imports.add(r)

    def _all_chunks(self) -> frozenset[int]:
        return frozenset(range(1, self.state.config.chunks + 1))

    def _import_page(self, a: str, p: Page, phase: str = "landing") -> tuple[Imp, PgImp]:
        """p's request's import and p's own, refusing a page not of an import in ``phase``."""
        s = self.state
        if not (isinstance(p, tuple) and len(p) == 2 and s.known(p)):
            raise ActionNotEnabled(a, f"unknown page {p!r}")
        x = s.imp_of(p[0])
        if x.phase != phase:
            raise ActionNotEnabled(a, f"page {p!r}'s import is {x.phase}, not {phase}")
        return x, s.pg_of(p)

    def _mirrored(self, p: Page) -> bool:
        """The pages a decode step needs resident: the final page (the writable one)."""
        return p[1] == len(self.state.page_keys[p[0]])

    def free_gpu(self) -> int:
        """Free blocks of HMA's device pool (the spec's Cardinality(FreeGpu)). O(pool): the
        coordinator passes HMA's own count instead."""
        return sum(1 for o in self.state.gpu_owner if o is None)

    def target_for(self, r: RequestId, free_gpu: int | None = None) -> ImportTarget:
        """The admission calculation (the spec's TargetFor): device if every page fits the
        free GPU pool, else host."""
        free = self.free_gpu() if free_gpu is None else free_gpu
        return "device" if len(self.state.page_keys[r]) <= free else "host"

    def ImportArrive(self, r: RequestId) -> None:
        """r arrives with its prefill KV announced: its pages and their keys."""
        s, a = self.state, "ImportArrive"
        self._request(a, r)
        if r not in s.imports:
            raise ActionNotEnabled(a, f"request {r!r} brings no prefill KV")
        if s.req[r] != "new" or s.imp_of(r).phase != "none":
            raise ActionNotEnabled(a, f"request {r!r} is {s.req[r]}, import {s.imp_of(r).phase}")
        s.imp[r] = Imp("none", "announced")
        if self._observed:
            self._done(a, {"request": r})

    def ChooseTarget(self, r: RequestId, free_gpu: int | None = None) -> ImportTarget:
        """The landing target, chosen once from the admission calculation (``free_gpu``:
        HMA's free count, by default counted here); returns it."""
        s, a = self.state, "ChooseTarget"
        self._request(a, r)
        x = s.imp_of(r)
        if s.req[r] != "new" or x.phase != "announced" or x.target != "none":
            raise ActionNotEnabled(a, f"request {r!r}: import {x.phase}, target {x.target}")
        if free_gpu is not None and self.check and free_gpu != self.free_gpu():
            raise ActionNotEnabled(a, f"{free_gpu} free GPU blocks claimed, {self.free_gpu()} free")
        target = self.target_for(r, free_gpu)
        s.imp[r] = Imp(target, "announced")
        if self._observed:
            self._done(a, {"request": r})
        return target

    def _admit_target(self, r: RequestId) -> ImportTarget:
        """The target AdmitImport lands by: the one chosen, whatever the pools are now."""
        return self.state.imp_of(r).target

    def AdmitImport(
        self,
        r: RequestId,
        blocks: Sequence[int] | None = None,
        hosts: Sequence[int] | None = None,
    ) -> ImportTarget:
        """The chosen target's destinations fit: lease them (device: ``blocks``, a GPU
        block per page; host: ``hosts``, a host block per page, and ``blocks``, the
        mirrored final page's GPU block); r is importing. By default the lowest free
        blocks (a scan: drivers only). Refused (nothing changes) when they do not fit:
        the request waits and retries with the same target. Returns the target used."""
        s, a = self.state, "AdmitImport"
        self._request(a, r)
        x = s.imp_of(r)
        if s.req[r] != "new" or x.phase != "announced" or x.target == "none":
            raise ActionNotEnabled(a, f"request {r!r}: import {x.phase}, target {x.target}")
        target = self._admit_target(r)
        keys = s.page_keys[r]
        n = len(keys)
        need_gpu = n if target == "device" else 1
        if blocks is None:
            blocks = [g for g, o in enumerate(s.gpu_owner) if o is None][:need_gpu]
        gpus = list(blocks)
        if len(gpus) != need_gpu or len(set(gpus)) != need_gpu or any(
            not (type(g) is int and 0 <= g < s.config.gpu_blocks) or s.gpu_owner[g] is not None
            for g in gpus
        ):
            raise ActionNotEnabled(a, f"{target} target needs {need_gpu} distinct free GPU "
                                      f"blocks, got {gpus}")
        host_list: list[int] = []
        if target == "host":
            if s.host_used + n > self._host_capacity:
                raise ActionNotEnabled(a, f"host pool cannot hold {n} more blocks "
                                          f"({s.host_used} of {self._host_capacity} in use)")
            if hosts is None:
                hosts = [h for h, st in enumerate(s.host_state) if st == "free"][:n]
            host_list = list(hosts)
            if len(host_list) != n or len(set(host_list)) != n or any(
                not (isinstance(h, int) and not isinstance(h, bool)
                     and 0 <= h < s.config.host_blocks)
                or s.host_state[h] != "free"
                for h in host_list
            ):
                raise ActionNotEnabled(a, f"host target needs {n} distinct free host blocks, "
                                          f"got {host_list}")
        elif hosts:
            raise ActionNotEnabled(a, "a device-target import leases no host blocks")
        s.req[r] = cast(ReqState, REQUEST.next("new", "admit_import"))
        if target == "device":
            for i, g in enumerate(gpus, start=1):
                self._own(g, (r, i))
                s.imp_gpu[(r, i)] = g
        else:
            self._own(gpus[0], (r, n))
            s.imp_gpu[(r, n)] = gpus[0]
            for i, h in enumerate(host_list, start=1):
                hb = HostBlock(h)
                self._host_to(hb, "lease")
                s.host_key[hb] = keys[i - 1]
                s.pg[(r, i)] = NO_PG._replace(host=hb)
        s.imp[r] = Imp(x.target, "landing")
        if self._observed:
            self._done(a, {"request": r})
        return target

    def _staging_room(self) -> bool:
        """A staging slot is free (the spec's Cardinality(Slots) < StagingSlots)."""
        return self.state.slots() < self.state.config.staging_slots

    def LeaseStaging(self, p: Page) -> None:
        """The worker leases a staging slot for host-target page p; none left: refused."""
        s, a = self.state, "LeaseStaging"
        x, y = self._import_page(a, p)
        if x.target != "host" or y.slot or y.landed == self._all_chunks():
            raise ActionNotEnabled(a, f"page {p!r} needs no staging slot")
        if not self._staging_room():
            raise ActionNotEnabled(a, f"all {s.config.staging_slots} staging slots are in use")
        s.pg[p] = y._replace(slot=True)
        if self._observed:
            self._done(a, {"page": [p[0], p[1]]})

    def LandChunk(self, p: Page, c: int) -> None:
        """Chunk c of page p lands: in its staging slot (host target) or in its GPU page
        (device), whose bytes are the page's once every chunk is there."""
        s, a = self.state, "LandChunk"
        x, y = self._import_page(a, p)
        if not (type(c) is int and 1 <= c <= s.config.chunks):
            raise ActionNotEnabled(a, f"chunk {c!r} outside 1..{s.config.chunks}")
        if x.target == "host":
            if not y.slot or c in y.staged:
                raise ActionNotEnabled(a, f"page {p!r} has no slot, or chunk {c} is staged")
            s.pg[p] = y._replace(staged=y.staged | {c})
        else:
            if c in y.landed:
                raise ActionNotEnabled(a, f"chunk {c} of page {p!r} already landed")
            landed = y.landed | {c}
            s.pg[p] = y._replace(landed=landed)
            s.gpu_data[s.imp_gpu[p]] = s.key_of(p) if landed == self._all_chunks() else GARBAGE
        if self._observed:
            self._done(a, {"page": [p[0], p[1]], "chunk": c})

    def CopyToHost(self, p: Page) -> None:
        """The staged chunks are copied into p's host block (the page's bytes only once
        every chunk was staged)."""
        s, a = self.state, "CopyToHost"
        _, y = self._import_page(a, p)
        if not y.slot or y.staged == y.landed or y.host is None:
            raise ActionNotEnabled(a, f"page {p!r} has nothing new staged")
        data = s.key_of(p) if y.staged == self._all_chunks() else GARBAGE
        for pool in s.host_data.values():
            pool[y.host] = data
        s.pg[p] = y._replace(landed=y.staged)
        if self._observed:
            self._done(a, {"page": [p[0], p[1]]})

    def MirrorPage(self, p: Page) -> None:
        """A page needed immediately, complete in staging, is copied into its resident
        GPU block."""
        s, a = self.state, "MirrorPage"
        x, y = self._import_page(a, p)
        if x.target != "host" or not self._mirrored(p):
            raise ActionNotEnabled(a, f"page {p!r} is not mirrored")
        g = s.imp_gpu[p]
        if not y.slot or y.staged != self._all_chunks() or s.gpu_data[g] == s.key_of(p):
            raise ActionNotEnabled(a, f"page {p!r} is not complete in staging, or mirrored")
        s.gpu_data[g] = s.key_of(p)
        if self._observed:
            self._done(a, {"page": [p[0], p[1]]})

    def _mirror_done(self, p: Page) -> bool:
        """p needs no mirror, or its resident block holds its bytes."""
        s = self.state
        return not self._mirrored(p) or s.gpu_data[s.imp_gpu[p]] == s.key_of(p)

    def ReleaseStaging(self, p: Page) -> None:
        """p's slot goes back once every chunk is in its host block and the mirror ran."""
        s, a = self.state, "ReleaseStaging"
        _, y = self._import_page(a, p)
        if not y.slot or y.landed != self._all_chunks() or not self._mirror_done(p):
            raise ActionNotEnabled(a, f"page {p!r}'s slot still holds work")
        s.pg[p] = y._replace(slot=False, staged=frozenset())
        if self._observed:
            self._done(a, {"page": [p[0], p[1]]})

    def _reported(self, r: RequestId) -> bool:
        """Whether r's import may be reported done: every page landed, no slot held
        (the worker's report changes nothing else)."""
        s, full = self.state, self._all_chunks()
        for i in range(1, len(s.page_keys[r]) + 1):
            y = s.pg_of((r, i))
            if y.landed != full or y.slot:
                return False
        return True

    def _end_staging(self, r: RequestId) -> None:
        """r's pages give back their staging slots and staged chunks (the spec's
        ``[pg[p] EXCEPT !.slot = FALSE, !.staged = {}]`` over ``PagesOf(r)``)."""
        s = self.state
        for i in range(1, len(s.page_keys[r]) + 1):
            y = s.pg.get((r, i))
            if y is not None and (y.slot or y.staged):
                s.pg[(r, i)] = y._replace(slot=False, staged=frozenset())

    def ReportImport(self, r: RequestId) -> None:
        """Every page landed and no slot is held: the done ack goes up. The pages' slots
        and staged chunks go with it: none are held here (``_reported``) but where a bug
        reports early (the spec's ``report_partial_page`` branch); the guard itself
        changes nothing, since listing the enabled moves calls it too."""
        s, a = self.state, "ReportImport"
        self._request(a, r)
        x = s.imp_of(r)
        if x.phase != "landing" or not self._reported(r):
            raise ActionNotEnabled(a, f"request {r!r}'s import is {x.phase}, or not landed")
        self._end_staging(r)
        s.imp[r] = x._replace(phase="landed")
        if self._observed:
            self._done(a, {"request": r})

    def ImportError(self, r: RequestId) -> None:
        """The transport fails (NIXL error, the prefiller gone, a refused announcement)
        or the abort reaches the worker: its slots and staged chunks go; failed ack up."""
        s, a = self.state, "ImportError"
        self._request(a, r)
        x = s.imp_of(r)
        if x.phase != "landing":
            raise ActionNotEnabled(a, f"request {r!r}'s import is {x.phase}")
        s.imp[r] = x._replace(phase="failed")
        self._end_staging(r)
        if self._observed:
            self._done(a, {"request": r})

    def CompleteImport(self, r: RequestId) -> list[int]:
        """The done ack: host pages become valid and are published, the block table names
        every page (a mirrored one at its resident block), r decodes. Returns the host
        blocks published."""
        s, a = self.state, "CompleteImport"
        self._request(a, r)
        x = s.imp_of(r)
        if x.phase != "landed" or s.req[r] != "importing":
            raise ActionNotEnabled(a, f"request {r!r} is {s.req[r]}, import {x.phase}")
        published: list[int] = []
        for i in range(1, len(s.page_keys[r]) + 1):
            p = (r, i)
            y = s.pg_of(p)
            if y.host is None or self._mirrored(p):
                self._set_loc(p, ("gpu", s.imp_gpu.pop(p)))
            else:
                self._set_loc(p, ("host", HostBlock(y.host)))
            if y.host is not None:
                self._publish(y.host)
                published.append(y.host)
                s.pg[p] = y._replace(host=None)
        s.req[r] = cast(ReqState, REQUEST.next("importing", "import_done"))
        s.imp[r] = x._replace(phase="none")
        if self._observed:
            self._done(a, {"request": r})
        return published

    def _fail_frees_hosts(self) -> bool:
        """A failed import's host blocks go back to the pool."""
        return True

    def FailImport(self, r: RequestId) -> tuple[list[int], list[int]]:
        """The failed ack, or a done ack of an aborted request: nothing is published;
        every GPU and host block of the import goes back; r ends aborted. Returns
        (GPU blocks, host blocks) returned."""
        s, a = self.state, "FailImport"
        self._request(a, r)
        x = s.imp_of(r)
        if not (x.phase == "failed" or (x.phase == "landed" and s.req[r] == "aborted")):
            raise ActionNotEnabled(a, f"request {r!r} is {s.req[r]}, import {x.phase}")
        gpus: list[int] = []
        hosts: list[int] = []
        free_hosts = self._fail_frees_hosts()
        for i in range(1, len(s.page_keys[r]) + 1):
            p = (r, i)
            g = s.imp_gpu.pop(p, None)
            if g is not None:
                self._own(g, None)
                s.gpu_data[g] = GARBAGE
                gpus.append(g)
            y = s.pg.pop(p, None)
            if y is not None and y.host is not None:
                hosts.append(y.host)
                if free_hosts:
                    self._discard(y.host)
                else:  # (the destination stays leased, and named by the page)
                    s.pg[p] = NO_PG._replace(host=y.host)
        s.req[r] = cast(ReqState, REQUEST.next(s.req[r], "import_failed"))
        s.imp[r] = x._replace(phase="none")
        if self._observed:
            self._done(a, {"request": r})
        return gpus, hosts

    def import_moves(self) -> list[tuple[str, Callable[[], object]]]:
        """The fair import actions enabled now (drain). O(live imports)."""
        s = self.state
        out: list[tuple[str, Callable[[], object]]] = []
        full = self._all_chunks()
        for r, x in s.imp.items():
            if x.phase == "landing":
                for i in range(1, len(s.page_keys[r]) + 1):
                    p = (r, i)
                    y = s.pg_of(p)
                    if x.target == "host":
                        if not y.slot and y.landed != full and self._staging_room():
                            out.append(("LeaseStaging", partial(self.LeaseStaging, p)))
                        if y.slot:
                            for c in sorted(full - y.staged):
                                out.append(("LandChunk", partial(self.LandChunk, p, c)))
                            if y.staged != y.landed:
                                out.append(("CopyToHost", partial(self.CopyToHost, p)))
                            g = s.imp_gpu.get(p)
                            if (self._mirrored(p) and y.staged == full and g is not None
                                    and s.gpu_data[g] != s.key_of(p)):
                                out.append(("MirrorPage", partial(self.MirrorPage, p)))
                            if y.landed == full and self._mirror_done(p):
                                out.append(("ReleaseStaging", partial(self.ReleaseStaging, p)))
                    else:
                        for c in sorted(full - y.landed):
                            out.append(("LandChunk", partial(self.LandChunk, p, c)))
                if self._reported(r):
                    out.append(("ReportImport", partial(self.ReportImport, r)))
            elif x.phase == "landed" and s.req[r] == "importing":
                out.append(("CompleteImport", partial(self.CompleteImport, r)))
            if x.phase == "failed" or (x.phase == "landed" and s.req[r] == "aborted"):
                out.append(("FailImport", partial(self.FailImport, r)))
        return out

    # -- worker actions ---------------------------------------------------

    def _take(self, action: str, transfer_id: int, w: int) -> Transfer:
        s = self.state
        if not 0 <= w < len(s.down):
            self._rank(action, w)  # raises
        t = s.down[w].get(transfer_id)
        if t is None:
            raise UnknownTransfer(transfer_id, f"{action}: no such command in flight to rank {w}")
        return t

    def _reader_may_enqueue(self, t: Transfer) -> bool:
        """A reader of a shared pool takes a command once the writer has (its event exists)."""
        return not self._reader_orders_after_writer() or (
            t.transfer_id not in self.state.down[self.state.config.writer]
        )

    def _reader_orders_after_writer(self) -> bool:
        """A reader's stream waits on the writer's copy event before it acks."""
        return True

    def WorkerEnqueue(self, transfer_id: int, w: int = 0) -> None:
        """Rank w takes a command. A copier enqueues the copy, which carries the source
        bytes as of its stream position; a reader of a shared pool orders its stream after
        the writer's copy event (``waits``) while that copy is in flight."""
        s, a = self.state, "WorkerEnqueue"
        # (a copier is a rank: the membership test is the range check too)
        t = s.down[w].get(transfer_id) if w in self.copiers else None
        if t is not None:  # the common case: a copier's command
            if self._has_readers and self._readers_hold(t.dst):  # refused before any change
                raise ActionNotEnabled(
                    a, f"a reader's queued reads may still read host block {t.dst}: the "
                    "writer waits on its read-done event first")
            if s.lost[w] and self._gap_blocks(w):
                raise ActionNotEnabled(a, f"rank {w} has a gap: later commands are refused")
            del s.down[w][transfer_id]
            s.copying[w][t.dst] = s.gpu_data[t.src]
            s.copying_tid[w][t.dst] = transfer_id
        else:
            t = self._take(a, transfer_id, w)  # raises unless a reader's command
            if not self._reader_may_enqueue(t):
                raise ActionNotEnabled(a, f"rank {w} reads; the writer has not taken {t}")
            if s.lost[w] and self._gap_blocks(w):
                raise ActionNotEnabled(a, f"rank {w} has a gap: later commands are refused")
            del s.down[w][transfer_id]
            writer = s.config.writer
            if self._reader_orders_after_writer() and s.copying[writer][t.dst] is not None:
                s.waits[w].add(t.dst)
        s.w_enq[w].append(transfer_id)
        if self._observed:  # nobody reads args otherwise
            self._done(a, {"src": t.src, "dst": t.dst, "rank": w})

    def _gap_blocks(self, w: int) -> bool:
        """Rank w has a gap (``lost``): the worker refuses every later command until the
        worker-loss path has run."""
        return True

    def _readers_hold(self, h: int) -> bool:
        """A reader's queued reads may still read host block h (the writer must wait)."""
        return self._writer_waits_for_readers() and any(h in r for r in self.state.reading)

    def _writer_waits_for_readers(self) -> bool:
        """The shared pool's writer orders its copies after the readers' read-done events."""
        return True

    def WorkerRead(self, w: int = 0) -> None:
        """Reader rank w of a shared pool queues a decode step: its kernels may read the
        host blocks of the running requests' host pages until WorkerReadsDone. Costs
        O(block-table entries on the host) (worker side)."""
        s, a = self.state, "WorkerRead"
        if not 0 <= w < len(s.reading):
            self._rank(a, w)  # raises
        if w not in s.config.readers:
            raise ActionNotEnabled(a, f"rank {w} copies into its own pool: its stream orders "
                                      "its reads")
        req = s.req
        s.reading[w].update(
            at[1] for p, at in s.loc.items()
            if at is not None and at[0] == "host" and req[p[0]] == "running"
        )
        if self._observed:  # nobody reads args otherwise
            self._done(a, {"rank": w})

    def WorkerReadsDone(self, w: int = 0) -> None:
        """Reader rank w's queued reads have finished (its read-done event fired): the
        writer may copy into those blocks again."""
        s, a = self.state, "WorkerReadsDone"
        if not 0 <= w < len(s.reading):
            self._rank(a, w)  # raises
        if not s.reading[w]:
            raise ActionNotEnabled(a, f"rank {w} has no reads queued")
        s.reading[w].clear()
        if self._observed:  # nobody reads args otherwise
            self._done(a, {"rank": w})

    def WorkerDrop(self, transfer_id: int, w: int = 0) -> None:
        """Injected defect only: rank w loses a received command."""
        if not self._worker_may_drop():
            raise ActionNotEnabled("WorkerDrop", "a correct worker never drops a command")
        t = self._take("WorkerDrop", transfer_id, w)
        del self.state.down[w][transfer_id]
        if self._observed:  # nobody reads args otherwise
            self._done("WorkerDrop", {"src": t.src, "dst": t.dst, "rank": w})

    def _worker_may_drop(self) -> bool:
        """WorkerDrop's guard: only an injected bug enables it."""
        return False

    def WorkerComplete(self, h: int, w: int = 0) -> None:
        """Rank w's copy into host block h reaches its event: the bytes land in its pool,
        and reader streams waiting on that event are released."""
        s, a = self.state, "WorkerComplete"
        if not 0 <= w < len(s.copying):
            self._rank(a, w)  # raises
        if not 0 <= h < s.config.host_blocks:
            self._host(a, h)  # raises
        copying = s.copying[w]
        data = copying[h]
        if data is None:
            raise ActionNotEnabled(a, f"no copy in flight into host block {h} on rank {w}")
        s.host_data[w][h] = data
        copying[h] = None
        s.w_done[w].append(s.copying_tid[w].pop(h))
        for waits in s.waits:
            if waits:
                waits.discard(h)
        if self._observed:  # nobody reads args otherwise
            self._done(a, {"host_block": h, "rank": w})

    def WorkerReport(self, w: int = 0) -> Meta:
        """Rank w reports every pending ack in one meta (one meta in flight per rank)."""
        s, a = self.state, "WorkerReport"
        if not 0 <= w < len(s.up):
            self._rank(a, w)  # raises
        if s.up[w]:
            raise ActionNotEnabled(a, f"a worker meta of rank {w} is still in flight")
        w_enq, w_done = s.w_enq[w], s.w_done[w]
        if not w_enq and not w_done:
            raise ActionNotEnabled(a, f"rank {w} has nothing to report")
        meta = _tuple_new(Meta, (tuple(w_enq), tuple(w_done)))
        s.up[w].append(meta)
        w_enq.clear()
        w_done.clear()
        if self._observed:  # nobody reads args otherwise
            self._done(a, {"rank": w})
        return meta

    def WorkerLoss(self, w: int = 0) -> LossOutcome:
        """Rank w's worker restarted or a metadata message to or from it was lost; recover
        in the same step.

        Its commands not taken, acks not reported and meta in transit are gone; copies in
        its stream (``copying``) keep running. A transfer not yet enqueued on every rank is
        abandoned (its source unpinned); rank w owes no ack any more unless its copy may
        still run; a transfer no rank owes an ack for closes. Costs O(open transfers).
        """
        s, a = self.state, "WorkerLoss"
        if not 0 <= w < len(s.down):
            self._rank(a, w)  # raises
        if not self._loss_path_runs(w):
            raise ActionNotEnabled(a, f"rank {w}'s gap is never handed to the loss path")
        s.down[w].clear()
        s.up[w].clear()
        s.lost[w] = False  # a noticed gap is this path
        s.w_enq[w].clear()
        s.w_done[w].clear()
        copying, one = s.copying[w], self._one[w]
        out = LossOutcome()
        for h in sorted(s.open_spills):
            sp = s.spill[h]
            assert sp is not None
            busy = copying[h] is not None
            need = sp.need if busy else sp.need - one
            r = sp.page[0]
            sent = sp.phase == "sent"
            if sent:
                s.src_pin[sp.src] = False
                out.unpinned.append(sp.src)
                if s.req[r] in ("finished", "aborted"):
                    self._own(sp.src, None)
                    s.gpu_data[sp.src] = GARBAGE
                    out.returned.append(sp.src)
                elif s.req[r] == "running":
                    out.resident.append(sp.page)
            if need and (not sent or self._loss_waits_for_busy()):  # still owed: stays open
                if sent:
                    TRANSFER.next(sp.phase, "lost_running")
                s.spill[h] = sp._replace(need=need, phase="abandoned" if sent else sp.phase)
                continue
            publish = self._loss_publishes_sent(busy) if sent else sp.phase == "enqueued"
            TRANSFER.next(sp.phase, "lost_idle")
            self._set_spill(h, None)
            if publish and s.req[r] != "aborted":
                self._publish(h)
                out.published.append(h)
            else:
                self._discard(h)
                out.freed.append(h)
        if s.imp:  # the worker's imports die with it (O(live imports))
            for r, x in list(s.imp.items()):
                if x.phase in ("landing", "landed"):
                    s.imp[r] = x._replace(phase="failed")
                    out.imports_failed.append(r)
            for pg_key, y in list(s.pg.items()):
                if y.slot or y.staged:
                    s.pg[pg_key] = y._replace(slot=False, staged=frozenset())
        if self._observed:  # nobody reads args otherwise
            self._done(a, {"rank": w})
        return out

    def _loss_path_runs(self, w: int) -> bool:
        """The worker-loss path runs for a restart and for a noticed gap alike."""
        return True

    def _loss_waits_for_busy(self) -> bool:
        """A sent transfer whose copy may still run is abandoned, its destination held."""
        return True

    def _loss_publishes_sent(self, busy: bool) -> bool:
        """A sent transfer's destination is never published at a loss (its command may
        never have been enqueued)."""
        return False

    # -- the channels' faults ---------------------------------------------

    def IgnoreReplay(self, src: int, dst: int, w: int = 0) -> None:
        """A stale copy of command src -> dst (a duplicate, or one sent before rank w's
        last loss) reaches rank w: numbered below the next sequence number, it is
        ignored before any copy is enqueued (a stutter)."""
        s, a = self.state, "IgnoreReplay"
        if not 0 <= w < len(s.down):
            self._rank(a, w)  # raises
        if (src, dst) not in replayable(s, w):
            raise ActionNotEnabled(a, f"no command {src} -> {dst} was sent to rank {w} "
                                      "that a replay could repeat")
        if self._executes_replay(src, dst, w):  # only an injected bug
            sp = s.spill[dst]
            tid = sp.transfer_id if sp is not None else -1 - dst  # closed: no ID left
            if w in self.copiers:
                s.copying[w][dst] = s.gpu_data[src]
                s.copying_tid[w][dst] = tid
            s.transfer_dst.setdefault(tid, HostBlock(dst))
            s.w_enq[w].append(tid)
        if self._observed:  # nobody reads args otherwise
            self._done(a, {"src": src, "dst": dst, "rank": w})

    def _executes_replay(self, src: int, dst: int, w: int) -> bool:
        """Whether the worker executes a replayed command: never (its number is old)."""
        return False

    def LoseCommand(self, transfer_id: int, w: int = 0) -> None:
        """The connector metadata carrying command ``transfer_id`` to rank w is lost; the
        gap shows at the rank's next metadata."""
        s, a = self.state, "LoseCommand"
        t = self._take(a, transfer_id, w)
        del s.down[w][transfer_id]
        s.lost[w] = True
        if self._observed:  # nobody reads args otherwise
            self._done(a, {"src": t.src, "dst": t.dst, "rank": w})

    def LoseMeta(self, w: int = 0) -> None:
        """Rank w's worker meta in flight is lost; the gap shows at its next one."""
        s, a = self.state, "LoseMeta"
        if not 0 <= w < len(s.up):
            self._rank(a, w)  # raises
        if not s.up[w]:
            raise ActionNotEnabled(a, f"no worker meta of rank {w} in flight")
        s.up[w].clear()
        s.lost[w] = True
        if self._observed:  # nobody reads args otherwise
            self._done(a, {"rank": w})

    # -- helpers for drivers ------------------------------------------------

    def enabled(self) -> list[tuple[str, Callable[[], object]]]:
        """The fair worker/consumer actions enabled now (used to drain in tests)."""
        s = self.state
        out: list[tuple[str, Callable[[], object]]] = []
        for w in range(s.config.ranks):
            for tid, t in list(s.down[w].items()):
                if s.lost[w]:
                    break
                if (
                    (w in self.copiers and not self._readers_hold(t.dst))
                    or (w not in self.copiers and self._reader_may_enqueue(t))
                ):
                    out.append(("WorkerEnqueue", partial(self.WorkerEnqueue, tid, w)))
            if s.reading[w]:
                out.append(("WorkerReadsDone", partial(self.WorkerReadsDone, w)))
            for h, c in enumerate(s.copying[w]):
                if c is not None:
                    out.append(("WorkerComplete", partial(self.WorkerComplete, h, w)))
            if not s.up[w] and (s.w_enq[w] or s.w_done[w]):
                out.append(("WorkerReport", partial(self.WorkerReport, w)))
            if s.up[w] and not s.lost[w]:
                out.append(("ConsumeMeta", partial(self.ConsumeMeta, w)))
            if s.lost[w] and self._loss_path_runs(w):  # fair: a gap is noticed (GapNoticed)
                out.append(("WorkerLoss", partial(self.WorkerLoss, w)))

        if s.imp:
            out += self.import_moves()
        for r, st in s.req.items():
            if st in ("finished", "aborted") and self.retire_refusal(r) is None:
                out.append(("Retire", partial(self.Retire, r)))
        return out

    def drain(self) -> int:
        """Run the fair actions until none is enabled; returns how many ran."""
        n = 0
        while todo := self.enabled():
            todo[0][1]()
            n += 1
        return n


def _gap_refusal(w: int) -> ActionNotEnabled:
    """ConsumeMeta's refusal of a meta from rank w while it has a gap (``lost``)."""
    return ActionNotEnabled("ConsumeMeta", f"rank {w} has a gap: its metas are refused "
                                           "until the worker-loss path runs")


def _refuse_repeats(ids: Sequence[int]) -> None:
    """One direction of one worker meta names each transfer at most once."""
    if len(ids) < 2:  # nothing to repeat
        return
    seen: set[int] = set()
    for tid in ids:
        if tid in seen:
            raise UnknownTransfer(tid, "repeated within one worker meta")
        seen.add(tid)


# one subclass per injected bug, built once (a class, not a patched instance: the
# compiled build's native machine has no instance dictionary to patch)
_VARIANT_CLASSES: dict[str, type[ProtocolMachine]] = {}


def machine_class(bug: str) -> type[ProtocolMachine]:
    """The machine class for injected bug ``bug``: ProtocolMachine for "none", else its
    subclass whose one step is the variant's (spec/catalogue.py)."""
    if bug == "none":
        return ProtocolMachine
    cls = _VARIANT_CLASSES.get(bug)
    if cls is None:
        v = variant(bug)  # (KeyError: unknown bug, with the known names)
        body = {v.step: v.impl, "injected": bug, "__module__": __name__}
        cls = type(f"ProtocolMachine_{bug}", (ProtocolMachine,), body)
        _VARIANT_CLASSES[bug] = cls
    return cls
