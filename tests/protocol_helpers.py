"""Shared builders for protocol tests: a fixed universe, short scenarios and walks, and a
stand-in draw for the runs built on them."""

from __future__ import annotations

import copy
import random
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from hisparse.blockpool import BlockPool
from hisparse.config import GIB, HiSparseConfig
from hisparse.coordinator import HiSparseCoordinator
from hisparse.spec.catalogue import CATALOGUE, arguments
from hisparse.spec.constants import ProtocolConfig
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
    check: bool = True,
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
        m = ProtocolMachine.create(cfg, check=check, record=record)
    else:
        m = machine_class(cfg, check=check, record=record)
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
    "Abort": lambda m, r: m.state.req[r] in ("new", "importing", "running"),
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
    # a reader rank of a shared pool (the others copy into their own pool: nothing to order)
    "WorkerRead": lambda m, w: w in m.state.config.readers,
    "WorkerReadsDone": lambda m, w: bool(m.state.reading[w]),
}


# The P/D import actions (tla/HiSparse.tla, docs/pd-import.md), stated the same way.


def _imp(m: ProtocolMachine, r: str) -> tuple[str, str]:
    x = m.state.imp_of(r)
    return x.target, x.phase


def _chunks(m: ProtocolMachine) -> frozenset[int]:
    return frozenset(range(1, m.state.config.chunks + 1))


def _gpu_of(m: ProtocolMachine, p: tuple[str, int]) -> int | None:
    """The spec's GpuOf(p): the GPU block p owns (None where it owns none)."""
    return next((g for g, o in enumerate(m.state.gpu_owner) if o == p), None)


def _mirrored(m: ProtocolMachine, p: tuple[str, int]) -> bool:
    return p[1] == len(m.state.page_keys[p[0]])


def _mirror_holds(m: ProtocolMachine, p: tuple[str, int]) -> bool:
    g = _gpu_of(m, p)
    return g is not None and m.state.gpu_data[g] == m.state.key_of(p)


def _admit_import(m: ProtocolMachine, r: str) -> bool:
    """Some choice of destinations fits the chosen target (AdmitImport's default choice
    is the lowest free blocks, so one exists exactly when enough are free)."""
    s = m.state
    target, phase = _imp(m, r)
    if s.req[r] != "new" or phase != "announced" or target == "none":
        return False
    n, free_gpu = len(s.page_keys[r]), sum(o is None for o in s.gpu_owner)
    if target == "device":
        return n <= free_gpu
    free_hosts = sum(st == "free" for st in s.host_state)
    return free_gpu >= 1 and s.host_in_use() + n <= s.config.host_capacity and free_hosts >= n


def _lease_staging(m: ProtocolMachine, p: tuple[str, int]) -> bool:
    s, y = m.state, m.state.pg_of(p)
    return (_imp(m, p[0]) == ("host", "landing") and not y.slot and y.landed != _chunks(m)
            and sum(x.slot for x in s.pg.values()) < s.config.staging_slots)


def _land_chunk(m: ProtocolMachine, p: tuple[str, int], c: int) -> bool:
    target, phase = _imp(m, p[0])
    y = m.state.pg_of(p)
    if phase != "landing":
        return False
    return (y.slot and c not in y.staged) if target == "host" else c not in y.landed


def _mirror_page(m: ProtocolMachine, p: tuple[str, int]) -> bool:
    y = m.state.pg_of(p)
    return (_imp(m, p[0]) == ("host", "landing") and _mirrored(m, p) and y.slot
            and y.staged == _chunks(m) and not _mirror_holds(m, p))


def _release_staging(m: ProtocolMachine, p: tuple[str, int]) -> bool:
    y = m.state.pg_of(p)
    return (_imp(m, p[0])[1] == "landing" and y.slot and y.landed == _chunks(m)
            and (not _mirrored(m, p) or _mirror_holds(m, p)))


def _report_import(m: ProtocolMachine, r: str) -> bool:
    pages = [m.state.pg_of(p) for p in m.state.pages_of(r)]
    return _imp(m, r)[1] == "landing" and all(
        y.landed == _chunks(m) and not y.slot for y in pages)


IMPORT_GUARDS: dict[str, Guard] = {
    "ImportArrive": lambda m, r: (
        r in m.state.imports and m.state.req[r] == "new" and _imp(m, r)[1] == "none"),
    "ChooseTarget": lambda m, r: (
        m.state.req[r] == "new" and _imp(m, r) == ("none", "announced")),
    "AdmitImport": _admit_import,
    "LeaseStaging": _lease_staging,
    "LandChunk": _land_chunk,
    "CopyToHost": lambda m, p: (
        _imp(m, p[0])[1] == "landing" and (y := m.state.pg_of(p)).slot
        and y.staged != y.landed),
    "MirrorPage": _mirror_page,
    "ReleaseStaging": _release_staging,
    "ReportImport": _report_import,
    "ImportError": lambda m, r: _imp(m, r)[1] == "landing",
    "CompleteImport": lambda m, r: (
        _imp(m, r)[1] == "landed" and m.state.req[r] == "importing"),
    "FailImport": lambda m, r: _imp(m, r)[1] == "failed" or (
        _imp(m, r)[1] == "landed" and m.state.req[r] == "aborted"),
}
GUARDS.update(IMPORT_GUARDS)


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
        guard = GUARDS[action.name]
        moves += [(action.name, args) for args in arguments(s, action.domain, action.ranked)
                  if guard(m, *args)]
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


# three imports of two, one and four pages for the walks below (i2 has more pages than a
# three-block GPU pool: always the host target, staged in chunks)
WALK_IMPORTS = {"i0": ("k0", "k5"), "i1": ("k6",), "i2": ("k7", "k8", "k9", "k10")}


def import_walk(seed: int, steps: int, **config: Any) -> Iterator[ProtocolMachine]:
    """A recording machine with ``WALK_IMPORTS`` (``config`` to ``make_machine``) at each
    state of a seeded walk that takes an import's own action (``ImportError`` aside) four
    times in five where one is legal: the walks reach staging and the last chunks."""
    rng = random.Random(seed)
    m = make_machine(imports=WALK_IMPORTS, record=True, **config)
    for _ in range(steps):
        yield m
        moves = legal_moves(m)
        if not moves:
            return
        ours = [mv for mv in moves if mv[0] in IMPORT_GUARDS and mv[0] != "ImportError"]
        action, args = rng.choice(ours if ours and rng.random() < 0.8 else moves)
        getattr(m, action)(*args)


class ZeroDraws(random.Random):
    """A generator whose uniform draws are all 0.0, a value ``random()`` can return; its
    integer draws are the seeded ones (``getrandbits`` defined here, so ``Random`` draws
    integers from it, not from ``random()``)."""

    def random(self) -> float:
        return 0.0

    def getrandbits(self, k: int) -> int:
        return super().getrandbits(k)


HOST_BLOCK = 64 * 656  # bytes of one host block under the default config


def checked_coordinator(
    gpu: int = 4, host: int = 4, ranks: int = 1, backing: str = "private"
) -> tuple[HiSparseCoordinator, BlockPool]:
    """A coordinator that checks every invariant, over ``host`` host blocks of the
    default config and an HMA pool of ``gpu`` blocks."""
    cfg = HiSparseConfig(
        host_pool_gib=(host * HOST_BLOCK + HOST_BLOCK // 2) / GIB,
        tp_ranks=ranks,
        backing=backing,  # type: ignore[arg-type]
    )
    kv = BlockPool(gpu)
    return HiSparseCoordinator(cfg, kv, gpu_blocks=gpu, check=True), kv


def everything(c: HiSparseCoordinator, kv: BlockPool) -> Any:
    """Protocol state, the coordinator's own tables and HMA's pool (a refusal changes
    none of them)."""
    own = {k: v for k, v in attributes(c).items() if k not in ("machine", "kv")}
    return c.state.clone(), copy.deepcopy(own), copy.deepcopy(vars(kv))
