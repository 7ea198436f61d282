"""Shared builders for protocol tests: a fixed universe and short scenarios."""

from __future__ import annotations

import copy
import random
from collections import Counter
from collections.abc import Callable
from typing import Any

from hisparse.spec.catalogue import CATALOGUE, arguments
from hisparse.spec.constants import ProtocolConfig
from hisparse.spec.errors import ProtocolError
from hisparse.spec.machine import ProtocolMachine
from hisparse.spec.state import ProtocolState

# A universe with prefix sharing: r0/r2 share a two-page prefix, r1 its first page.
UNIVERSE: dict[str, tuple[str, ...]] = {
    "r0": ("k0", "k1"),
    "r1": ("k0",),
    "r2": ("k0", "k1"),
    "r3": ("k2",),
}


def make_machine(
    bug: str = "none",
    *,
    gpu_blocks: int = 3,
    host_pool_bytes: int = 9,
    host_block_bytes: int = 2,
    host_blocks: int = 0,
    record: bool = False,
    universe: dict[str, tuple[str, ...]] | None = None,
    ranks: int = 1,
    backing: str = "private",
    writer: int = 0,
    machine_class: type[ProtocolMachine] | None = None,
    chunks: int = 1,
    staging_slots: int = 1,
    imports: dict[str, tuple[str, ...]] | None = None,
) -> ProtocolMachine:
    """A machine with ``universe``'s requests declared (``machine_class``: a test's
    subclass, for a config without an injected bug)."""
    cfg = ProtocolConfig(
        gpu_blocks=gpu_blocks,
        host_pool_bytes=host_pool_bytes,
        host_block_bytes=host_block_bytes,
        host_blocks=host_blocks,
        ranks=ranks,
        backing=backing,  # type: ignore[arg-type]
        writer=writer,
        bug=bug,
        chunks=chunks,
        staging_slots=staging_slots,
    )
    if machine_class is None:
        m = ProtocolMachine.create(cfg, record=record)
    else:
        m = machine_class(cfg, record=record)
    for r, keys in (imports or {}).items():  # requests that arrive with prefill KV
        m.add_import(r, keys)
    for r, keys in (UNIVERSE if universe is None else universe).items():
        m.add_request(r, keys)
    return m


def full_spill(m: ProtocolMachine, page: tuple[str, int], h: int) -> int:
    """Spill one resident page through enqueued and completed acks (batched), on every
    rank (the writer first)."""
    tid = m.StartSpill(page, h)
    cfg = m.state.config
    order = [cfg.writer, *(w for w in range(cfg.ranks) if w != cfg.writer)]
    for w in order:
        m.WorkerEnqueue(tid, w)
        if w in cfg.copiers:
            m.WorkerComplete(h, w)
        m.WorkerReport(w)
        m.ConsumeMeta(w)
    return tid


def index_problems(s: ProtocolState) -> list[str]:
    """The machine's auxiliary indexes, recomputed from the spec variables (a test oracle)."""
    refs: Counter[str] = Counter(o[0] for o in s.gpu_owner if o is not None)
    refs.update(sp.page[0] for sp in s.spill if sp is not None)
    hrefs = Counter(w[1] for w in s.loc.values() if w is not None and w[0] == "host")
    open_ = {h for h, sp in enumerate(s.spill) if sp is not None}
    dst = {sp.transfer_id: h for h, sp in enumerate(s.spill) if sp is not None}
    out = []
    if dict(refs) != s.req_refs:
        out.append(f"req_refs {s.req_refs} != {dict(refs)}")
    if dict(hrefs) != s.host_refs:
        out.append(f"host_refs {s.host_refs} != {dict(hrefs)}")
    if open_ != s.open_spills:
        out.append(f"open_spills {s.open_spills} != {open_}")
    if dst != s.transfer_dst:
        out.append(f"transfer_dst {s.transfer_dst} != {dst}")
    if s.host_used != s.host_in_use():
        out.append(f"host_used {s.host_used} != {s.host_in_use()}")
    if any(not hs for hs in s.prefix.values()):
        out.append("the prefix index keeps an empty entry")
    return out


# The enabling condition of each action, stated independently of the machine (a test
# oracle): (machine, *args) -> enabled. Arguments come from the action's catalogue domain.
Guard = Callable[..., bool]


def _arrive(m: ProtocolMachine, r: str) -> bool:
    s = m.state
    need = len(s.page_keys[r]) - m.hit_len(r)
    return (
        s.req[r] == "new" and r not in s.imports  # (an import comes through ImportArrive)
        and sum(o is None for o in s.gpu_owner) >= need
    )


def _retire(m: ProtocolMachine, r: str) -> bool:
    s = m.state
    if s.req[r] not in ("finished", "aborted"):
        return False
    mine = set(s.pages_of(r))
    held = any(o in mine for o in s.gpu_owner) or any(
        sp is not None and sp.page in mine for sp in s.spill
    )
    importing = s.imp_of(r).phase in ("landing", "landed", "failed")  # holds its blocks
    return not held and not importing and all(s.loc[p] is None for p in mine)


def _start_spill(m: ProtocolMachine, p: tuple[str, int], h: int) -> bool:
    s = m.state
    where = s.loc[p]
    return (
        s.host_state[h] == "free"
        and s.host_in_use() < s.config.host_capacity
        and s.req[p[0]] == "running"
        and where is not None
        and where[0] == "gpu"
        and not s.src_pin[where[1]]
    )


def _evict(m: ProtocolMachine, h: int) -> bool:
    referenced = {w for w in m.state.loc.values() if w is not None}
    return m.state.host_state[h] == "valid" and ("host", h) not in referenced


def _worker_enqueue(m: ProtocolMachine, tid: int, w: int) -> bool:
    """A copier takes any command; a reader of a shared pool once the writer took it."""
    s = m.state
    cfg = s.config
    return (
        tid in s.down[w]
        and not s.lost[w]  # after a gap the worker refuses every later command
        and (w in cfg.copiers or tid not in s.down[cfg.writer])
    )


def _ignore_replay(m: ProtocolMachine, src: int, dst: int, w: int) -> bool:
    """A stale copy of an open transfer's command rank w no longer waits for, or of any
    command into a published block (the spec's Replayable)."""
    s = m.state
    sp = s.spill[dst]
    if sp is not None:
        return sp.src == src and sp.transfer_id not in s.down[w]
    return s.host_state[dst] == "valid"


GUARDS: dict[str, Guard] = {
    "Arrive": _arrive,
    "Finish": lambda m, r: m.state.req[r] == "running",
    "Abort": lambda m, r: m.state.req[r] in ("new", "running"),
    "StartSpill": _start_spill,
    "EvictHost": _evict,
    "Retire": _retire,
    "ConsumeMeta": lambda m, w: bool(m.state.up[w]) and not m.state.lost[w],
    "WorkerEnqueue": _worker_enqueue,
    "WorkerDrop": lambda m, tid, w: m.state.config.bug == "worker_drops_transfer",
    "WorkerComplete": lambda m, h, w: m.state.copying[w][h] is not None,
    "WorkerReport": lambda m, w: not m.state.up[w] and bool(m.state.w_enq[w] or m.state.w_done[w]),
    "WorkerLoss": lambda m, w: True,
    "IgnoreReplay": _ignore_replay,
    "LoseCommand": lambda m, tid, w: tid in m.state.down[w],
    "LoseMeta": lambda m, w: bool(m.state.up[w]),
}


# The P/D import actions (docs/pd-import.md): no oracle guard yet, so the machine is
# asked (``_accepted``); each is enabled only for a request of the spec's Imports (or a
# page of one), which is checked first: a deep copy per argument tuple made the drivers'
# move list cost seconds a step once the import actions came.
IMPORT_ACTIONS = frozenset({
    "ImportArrive", "ChooseTarget", "AdmitImport", "LeaseStaging", "LandChunk",
    "CopyToHost", "MirrorPage", "ReleaseStaging", "ReportImport", "ImportError",
    "CompleteImport", "FailImport",
})


def _of_an_import(m: ProtocolMachine, domain: str, args: tuple[Any, ...]) -> bool:
    """Necessary for every import action: its request (a page's request) is in Imports
    (ImportArrive refuses any other request; the rest need its import under way)."""
    r = args[0] if domain == "request" else args[0][0]
    return r in m.state.imports


def _accepted(m: ProtocolMachine, action: str, args: tuple[Any, ...]) -> bool:
    """Whether a copy of ``m`` takes the action: the fallback for an action the oracle
    has no guard for yet (weaker than a guard: it asks the machine)."""
    try:
        getattr(copy.deepcopy(m), action)(*args)
    except ProtocolError:
        return False
    return True


def legal_moves(
    m: ProtocolMachine, universe: dict[str, tuple[str, ...]] | None = None
) -> list[tuple[str, tuple[Any, ...]]]:
    """The enabled actions: every catalogue action over its domain, kept where its
    oracle guard holds.

    A retired request of ``universe`` (by default: every request a recording machine has
    declared, else ``UNIVERSE``) may be declared again (``add_request``)."""
    s = m.state
    moves: list[tuple[str, tuple[Any, ...]]] = []
    imported = m.declared_imports or set()
    for r, keys in (universe or m.declared or UNIVERSE).items():
        if r not in s.page_keys:
            moves.append(("add_import" if r in imported else "add_request", (r, keys)))
    for action in CATALOGUE:
        guard = GUARDS.get(action.name)
        for args in arguments(s, action.domain, action.ranked):
            if guard is not None:
                ok = guard(m, *args)
            elif action.name in IMPORT_ACTIONS and not _of_an_import(m, action.domain, args):
                ok = False
            else:
                ok = _accepted(m, action.name, args)
            if ok:
                moves.append((action.name, args))
    return moves


def random_walk(m: ProtocolMachine, steps: int, seed: int) -> int:
    """Take up to ``steps`` enabled actions chosen by a seeded RNG; returns how many ran."""
    rng = random.Random(seed)
    for n in range(steps):
        moves = legal_moves(m)
        if not moves:
            return n
        by_action: dict[str, list[tuple[Any, ...]]] = {}
        for action, args in moves:
            by_action.setdefault(action, []).append(args)
        action = rng.choice(sorted(by_action))  # actions evenly, not arguments
        getattr(m, action)(*rng.choice(by_action[action]))
    return steps


def attributes(obj: object) -> dict[str, Any]:
    """``obj``'s attributes by name, as ``vars`` gives them in pure Python; also for a
    compiled build's native class, which has no ``__dict__`` but serialises them."""
    state = obj.__getstate__()
    assert isinstance(state, dict), f"{type(obj).__name__} has no attribute state"
    return state
