"""The safety invariants of tla/HiSparse.tla, one Python function per TLA+ name.

Each returns a list of human-readable problems (empty = holds), so a failure
names the offending blocks and transfers. ``check_invariants`` raises
``InvariantViolation`` with the first failing invariant's name, in the order of
the TLC configuration.
"""

from __future__ import annotations

from collections.abc import Callable

from hisparse.spec.errors import InvariantViolation
from hisparse.spec.state import EMPTY, GARBAGE, LIVE_IMPORT, HostBlock, ProtocolState

Problems = list[str]


def TypeOK(s: ProtocolState) -> Problems:
    out: Problems = []
    g_n, h_n = s.config.gpu_blocks, s.config.host_blocks

    # Keys is a constant of the spec. Here the keys a block may hold are the declared
    # requests' keys, plus a retired request's published pages (still in host_key).
    data = {EMPTY, GARBAGE} | {k for ks in s.page_keys.values() for k in ks}
    data |= {k for k in s.host_key if k is not None}
    data |= s.keys_seen  # (kept only while checking: a running copy may hold a retired key)

    def bad_data(x: object) -> bool:
        return x not in data
    for r, st in s.req.items():
        if st not in ("new", "importing", "running", "finished", "aborted"):
            out.append(f"request {r} in state {st!r}")
    for p, where in s.loc.items():
        if where is None:
            continue
        tier, b = where
        limit = {"gpu": g_n, "host": h_n}.get(tier, 0)
        # a host block ID is a HostBlock; it must never index the GPU pool
        wrong_kind = (tier == "gpu") == isinstance(b, HostBlock)
        if wrong_kind or not 0 <= b < limit:
            out.append(f"page {p} located at {where!r}, not a block of its tier")
    # a page of a retired or undeclared request is RetiredUnreferenced's concern
    def bad_page(p: object) -> bool:
        if not (isinstance(p, tuple) and len(p) == 2 and isinstance(p[1], int)):
            return True
        return p[0] in s.page_keys and not s.known(p)

    for g in range(g_n):
        owner = s.gpu_owner[g]
        if owner is not None and bad_page(owner):
            out.append(f"GPU block {g} owned by malformed page {owner}")
        if bad_data(s.gpu_data[g]):
            out.append(f"GPU block {g} holds {s.gpu_data[g]!r}")
    for h in range(h_n):
        if s.host_state[h] not in ("free", "leased", "valid"):
            out.append(f"host block {h} in state {s.host_state[h]!r}")
        sp = s.spill[h]
        if sp is not None and (not 0 <= sp.src < g_n or bad_page(sp.page)):
            out.append(f"host block {h} has a malformed spill {sp}")
        for b, pool in s.host_data.items():
            if bad_data(pool[h]):
                out.append(f"host block {h} of pool {b} holds {pool[h]!r}")
        for w, copying in enumerate(s.copying):
            if bad_data(copying[h] or EMPTY):
                out.append(f"rank {w} copies {copying[h]!r} into host block {h}")
    for k, hs in s.prefix.items():
        if any(not 0 <= h < h_n for h in hs):
            out.append(f"prefix index of {k} names blocks {sorted(hs)}")
    for down in s.down:
        for t in down.values():
            if not (0 <= t.src < g_n and 0 <= t.dst < h_n):
                out.append(f"transfer {t} has out-of-range coordinates")
    cfg = s.config
    if set(s.host_data) != set(cfg.copiers):
        out.append(f"host pools {sorted(s.host_data)} are not the copiers {cfg.copiers}")
    ranks = range(cfg.ranks)
    for h, sp in enumerate(s.spill):
        if sp is not None and not (sp.enq | sp.need) <= set(ranks):
            out.append(f"host block {h}'s transfer names ranks outside 0..{cfg.ranks - 1}")
    for w, waits in enumerate(s.waits):
        if any(not 0 <= h < h_n for h in waits):
            out.append(f"rank {w} waits on blocks {sorted(waits)}")
    for w, reading in enumerate(s.reading):
        if any(not 0 <= h < h_n for h in reading):
            out.append(f"rank {w} reads blocks {sorted(reading)}")
    chunks = set(range(1, cfg.chunks + 1))
    for r, x in s.imp.items():
        if x.target not in ("none", "device", "host") or x.phase not in (
            "none", "announced", "landing", "landed", "failed"
        ):
            out.append(f"request {r}'s import is {x}")
    for pg, y in s.pg.items():
        if not (y.landed <= chunks and y.staged <= chunks) or (
            y.host is not None and not 0 <= y.host < h_n
        ):
            out.append(f"page {pg}'s import is {y}")
    return out


# -- P/D import (docs/pd-import.md) ---------------------------------------------


def StagingBounded(s: ProtocolState) -> Problems:
    """The staging slots in use never exceed the pool's."""
    used, cap = s.slots(), s.config.staging_slots
    return [f"{used} staging slots in use, the pool has {cap}"] if used > cap else []


def ImportPublishedComplete(s: ProtocolState) -> Problems:
    """The done ack is sent only once every chunk of every page is at its destination;
    a running imported request has all its bytes; an importing host page is never
    published before its import completes."""
    full = frozenset(range(1, s.config.chunks + 1))
    out: Problems = []
    for r, x in s.imp.items():
        if x.phase == "landed" or (s.req.get(r) == "running" and x.target != "none"):
            out += [f"page {(r, i)} of {r} (import {x.phase}) has chunks "
                    f"{sorted(s.pg_of((r, i)).landed)} of {sorted(full)}"
                    for i in range(1, len(s.page_keys[r]) + 1)
                    if s.pg_of((r, i)).landed != full]
    out += [f"importing page {p}'s host block {y.host} is {s.host_state[y.host]}"
            for p, y in s.pg.items()
            if y.host is not None and s.host_state[y.host] != "leased"]
    return out


def MirrorBeforeRead(s: ProtocolState) -> Problems:
    """A mirrored page holds its bytes at its resident destination by the time its host
    import is reported done, before the request can decode."""
    out: Problems = []
    for r, x in s.imp.items():
        if x.target != "host" or x.phase != "landed" or s.req.get(r) != "importing":
            continue
        p = (r, len(s.page_keys[r]))
        g = s.imp_gpu[p]
        if s.gpu_data[g] != s.key_of(p):
            out.append(f"mirrored page {p}'s resident GPU block {g} holds {s.gpu_data[g]!r}")
    return out


def ImportTargetStable(s: ProtocolState) -> Problems:
    """An import lands where its chosen target says: host blocks for every page iff the
    target is host."""
    out: Problems = []
    for r, x in s.imp.items():
        if x.phase not in LIVE_IMPORT:
            continue
        hosted = all(s.pg_of((r, i)).host is not None
                     for i in range(1, len(s.page_keys[r]) + 1))
        if x.target == "none" or (x.target == "host") != hosted:
            out.append(f"request {r}'s import chose {x.target} but lands "
                       f"{'in host blocks' if hosted else 'elsewhere'}")
    return out


def NoImportLeak(s: ProtocolState) -> Problems:
    """Nothing of an import outlives it: staging slots only for landing imports, host
    blocks as destinations only for live imports, an ended imported request's GPU blocks
    are pinned sources or a live import's."""
    def live(r: str) -> bool:
        return s.imp_of(r).phase in LIVE_IMPORT

    out = [f"page {p} holds a staging slot while its import is {s.imp_of(p[0]).phase}"
           for p, y in s.pg.items() if y.slot and s.imp_of(p[0]).phase != "landing"]
    out += [f"page {p} still holds host block {y.host} after its import ended"
            for p, y in s.pg.items() if y.host is not None and not live(p[0])]
    out += [f"GPU block {g} still leased to {o} of ended imported {o[0]}"
            for g, o in enumerate(s.gpu_owner)
            if o is not None and o[0] in s.imports
            and s.req.get(o[0]) in ("finished", "aborted")
            and not s.src_pin[g] and not live(o[0])]
    return out


def NoDoubleOwnership(s: ProtocolState) -> Problems:
    out: Problems = []
    seen: dict[tuple[str, int], object] = {}
    for p, where in s.loc.items():
        if where is not None and where[0] == "gpu":
            if where in seen:
                out.append(f"GPU block {where[1]} backs both {seen[where]} and {p}")
            seen[where] = p
    for h in range(s.config.host_blocks):
        if s.host_state[h] == "free" and s.in_flight(h):
            out.append(f"host block {h} is free while a transfer naming it is in flight")
    return out


def NoLeaseLeaked(s: ProtocolState) -> Problems:
    out: Problems = []
    for g, pinned in enumerate(s.src_pin):
        if pinned and not any(
            sp is not None and sp.src == g and sp.phase == "sent" for sp in s.spill
        ):
            out.append(f"GPU block {g} is pinned with no sent transfer")
    imported = {y.host for y in s.pg.values() if y.host is not None}
    for h, st in enumerate(s.host_state):
        if st == "leased" and s.spill[h] is None and h not in imported:
            out.append(f"host block {h} is leased with no open transfer or import")
    return out


def NoReuseBeforeEnqueued(s: ProtocolState) -> Problems:
    out: Problems = []
    for h, sp in enumerate(s.spill):
        if sp is None or sp.phase != "sent":
            continue
        g = sp.src
        # a retired request's keys are forgotten; its transfer is RetiredUnreferenced's concern
        key = s.key_of(sp.page) if s.known(sp.page) else s.gpu_data[g]
        if s.gpu_owner[g] != sp.page or not s.src_pin[g] or s.gpu_data[g] != key:
            out.append(
                f"transfer {sp.transfer_id} (GPU {g} -> host {h}) not yet enqueued but its "
                f"source is owned by {s.gpu_owner[g]}, pinned={s.src_pin[g]}, "
                f"holds {s.gpu_data[g]!r}"
            )
    return out


def NoPublishBeforeComplete(s: ProtocolState) -> Problems:
    """A valid page has no copy of its own bytes, command or ack in flight (a copy of
    other bytes into it is PublishedPageStable's)."""
    return [
        f"host block {h} is valid while its transfer is still in flight"
        for h, st in enumerate(s.host_state)
        if st == "valid" and s.in_flight(h) and not _only_foreign_copies(s, h)
    ]


def _only_foreign_copies(s: ProtocolState, h: int) -> bool:
    """What names host block h in flight is only copies of bytes other than its key."""
    dst = s.transfer_dst
    return s.spill[h] is None and not any(
        s.copying[w][h] == s.host_key[h]
        or any(t.dst == h for t in s.down[w].values())
        or any(dst.get(t) == h for t in (*s.w_enq[w], *s.w_done[w]))
        or any(dst.get(t) == h for m in s.up[w] for t in (*m.enqueued, *m.completed))
        for w in range(s.config.ranks)
    )


def PublishedDataCorrect(s: ProtocolState) -> Problems:
    out: Problems = []
    for k, hs in s.prefix.items():
        for h in sorted(hs):
            if s.host_state[h] != "valid" or s.host_key[h] != k:
                out.append(
                    f"prefix index maps {k} to host block {h} "
                    f"({s.host_state[h]}, claims {s.host_key[h]})"
                )
    for b, data in s.host_data.items():
        for h, st in enumerate(s.host_state):
            if st == "valid" and data[h] != s.host_key[h]:
                out.append(
                    f"host block {h} claims {s.host_key[h]} but holds {data[h]!r} in pool {b}"
                )
    return out


def LivePagesReadable(s: ProtocolState) -> Problems:
    out: Problems = []
    for g, owner in enumerate(s.gpu_owner):
        if owner is not None and s.req.get(owner[0]) == "running" and s.loc[owner] != ("gpu", g):
            out.append(f"GPU block {g} is leased to {owner}, whose entry is {s.loc[owner]}")
    for p, where in s.loc.items():
        if s.req[p[0]] != "running":
            continue
        key = s.key_of(p)
        if where is None:
            out.append(f"page {p} of a running request has no block")
        elif where[0] == "gpu":
            g = where[1]
            if s.gpu_owner[g] != p or s.gpu_data[g] != key:
                out.append(f"page {p} on GPU {g}: owner {s.gpu_owner[g]}, holds {s.gpu_data[g]!r}")
        else:
            h = where[1]
            if s.host_state[h] == "free":
                out.append(f"page {p} on host {h}, which is free")
            for w in range(s.config.ranks):
                seen = s.stream_host_data(w, h)
                if seen != key:
                    out.append(f"page {p} on host {h}: rank {w} reads {seen!r}, expected {key!r}")
    return out


def HostPoolNotOvercommitted(s: ProtocolState) -> Problems:
    used, cap = s.host_in_use(), s.config.host_capacity
    return [f"{used} host blocks in use, capacity {cap}"] if used > cap else []


def NoOverwriteUnderRead(s: ProtocolState) -> Problems:
    """A shared pool's writer never copies into a block a reader's queued reads may still
    read, unless those reads wait on that very copy's event (they follow it)."""
    cfg = s.config
    if not any(s.reading):
        return []
    copying = s.copying[cfg.writer]
    return [
        f"rank {v}'s queued reads of host block {h} race the writer's copy into it"
        for v in cfg.readers
        for h in sorted(s.reading[v])
        if copying[h] is not None and h not in s.waits[v]
    ]


def RetiredUnreferenced(s: ProtocolState) -> Problems:
    """A request not in the protocol state (retired, or not yet declared) or still new
    is named by no block-table entry, resident lease or open transfer."""
    def gone(r: str) -> bool:
        return s.req.get(r, "new") == "new"

    out = [f"GPU block {g} is leased to {o} of a retired or new request"
           for g, o in enumerate(s.gpu_owner) if o is not None and gone(o[0])]
    out += [f"host block {h} has an open transfer of {sp.page} of a retired or new request"
            for h, sp in enumerate(s.spill) if sp is not None and gone(sp.page[0])]
    out += [f"page {p} of a new request is located at {w}"
            for p, w in s.loc.items() if w is not None and gone(p[0])]
    return out


def PublishedPageStable(s: ProtocolState) -> Problems:
    """A published host page's bytes never change while it is published: no copy in any
    rank's stream writes other bytes into it."""
    valid = [h for h, st in enumerate(s.host_state) if st == "valid"]
    return [
        f"rank {w} copies {c!r} over published host block {h} ({s.host_key[h]!r})"
        for w in sorted(s.host_data)
        for h in valid
        if (c := s.copying[w][h]) is not None and c != s.host_key[h]
    ]


def ReplayNotExecuted(s: ProtocolState) -> Problems:
    """A replayed command is never executed twice: on every rank, an open transfer's
    enqueued ack exists at most once (unreported, in a worker meta in flight, consumed)."""
    dst = s.transfer_dst
    out: Problems = []
    for w in range(s.config.ranks):
        count: dict[int, int] = {}
        for h in {dst[t] for t in s.w_enq[w] if t in dst}:
            count[h] = count.get(h, 0) + 1
        for m in s.up[w]:
            for h in {dst[t] for t in m.enqueued if t in dst}:
                count[h] = count.get(h, 0) + 1
        for h in s.open_spills:
            sp = s.spill[h]
            if sp is not None and w in sp.enq:
                count[h] = count.get(h, 0) + 1
        out += [f"rank {w} executed the command of open transfer into host block {h} "
                f"{n} times" for h, n in sorted(count.items())
                if n > 1 and s.spill[h] is not None]
    return out


def GapsDetected(s: ProtocolState) -> Problems:
    """A gap is never silently skipped: unless rank w has an unnoticed gap, every command
    it has not acknowledged as enqueued has a carrier on that rank (the command, its
    enqueued ack unreported or in a worker meta in flight)."""
    dst = s.transfer_dst
    out: Problems = []
    for w in range(s.config.ranks):
        if s.lost[w]:
            continue
        owed = [h for h in s.open_spills
                if (sp := s.spill[h]) is not None and sp.phase == "sent" and w not in sp.enq]
        if not owed:
            continue
        carried = {t.dst for t in s.down[w].values()}
        carried |= {dst[t] for t in s.w_enq[w] if t in dst}
        carried |= {dst[t] for m in s.up[w] for t in m.enqueued if t in dst}
        out += [f"rank {w} has not acknowledged the command into host block {h}, but "
                f"nothing carries it and no gap is pending" for h in sorted(owed)
                if h not in carried]
    return out


# Order of the TLC configuration: the first failing one is reported.
INVARIANTS: dict[str, Callable[[ProtocolState], Problems]] = {
    "TypeOK": TypeOK,
    "StagingBounded": StagingBounded,
    "ImportPublishedComplete": ImportPublishedComplete,
    "MirrorBeforeRead": MirrorBeforeRead,
    "ImportTargetStable": ImportTargetStable,
    "NoImportLeak": NoImportLeak,
    "PublishedPageStable": PublishedPageStable,
    "ReplayNotExecuted": ReplayNotExecuted,
    "GapsDetected": GapsDetected,
    "NoDoubleOwnership": NoDoubleOwnership,
    "NoLeaseLeaked": NoLeaseLeaked,
    "NoReuseBeforeEnqueued": NoReuseBeforeEnqueued,
    "NoPublishBeforeComplete": NoPublishBeforeComplete,
    "PublishedDataCorrect": PublishedDataCorrect,
    "LivePagesReadable": LivePagesReadable,
    "HostPoolNotOvercommitted": HostPoolNotOvercommitted,
    "NoOverwriteUnderRead": NoOverwriteUnderRead,
    "RetiredUnreferenced": RetiredUnreferenced,
}


# The P/D import's invariants and property: the models without imports (Imports = {})
# leave them out of their cfgs (they hold there by construction); MC_pd lists them all.
IMPORT_CHECKS = frozenset({
    "StagingBounded", "ImportPublishedComplete", "MirrorBeforeRead", "ImportTargetStable",
    "NoImportLeak", "ImportsEnd",
})


def check_invariants(s: ProtocolState) -> None:
    """Raise InvariantViolation naming the first invariant that fails."""
    for name, inv in INVARIANTS.items():
        problems = inv(s)
        if problems:
            raise InvariantViolation(name, "; ".join(problems))


# -- liveness twins: evaluated at a drained state (no fair action enabled) --


def TransfersComplete(s: ProtocolState) -> Problems:
    return [f"transfer into host block {h} still open" for h, sp in enumerate(s.spill) if sp]


def LeasesReleased(s: ProtocolState) -> Problems:
    out = [f"GPU block {g} still pinned" for g, pin in enumerate(s.src_pin) if pin]
    out += [f"host block {h} still leased" for h, st in enumerate(s.host_state) if st == "leased"]
    return out


def AbortedFreed(s: ProtocolState) -> Problems:
    out: Problems = []
    for r, st in s.req.items():
        if st != "aborted":
            continue
        mine = set(s.pages_of(r))
        out += [
            f"GPU block {g} still leased to {o}" for g, o in enumerate(s.gpu_owner) if o in mine
        ]
        out += [
            f"host block {h} still open for {sp.page}"
            for h, sp in enumerate(s.spill)
            if sp is not None and sp.page in mine
        ]
    return out


def EndedRetired(s: ProtocolState) -> Problems:
    return [f"request {r} is {st} and not retired" for r, st in s.req.items()
            if st in ("finished", "aborted")]


def ImportsEnd(s: ProtocolState) -> Problems:
    """Every admitted import ended (completed or failed) and returned its slots."""
    out = [f"request {r}'s import is still {x.phase}" for r, x in s.imp.items()
           if x.phase in LIVE_IMPORT]
    out += [f"page {p} still holds a staging slot" for p, y in s.pg.items() if y.slot]
    return out


PROPERTIES: dict[str, Callable[[ProtocolState], Problems]] = {
    "TransfersComplete": TransfersComplete,
    "LeasesReleased": LeasesReleased,
    "AbortedFreed": AbortedFreed,
    "EndedRetired": EndedRetired,
    "ImportsEnd": ImportsEnd,
}
