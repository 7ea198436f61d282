"""The indexer suffix rule and its Python twin of tla/IndexerSuffix.tla.

A DeepSeek-V3.2-style request has two cache groups: the sparse-MLA KV, whose prefix
hit HiSparse serves from its host tier, and the indexer keys, a normal
prefix-cacheable GPU group that a generic OffloadingConnector stores and restores.
``plan_suffix`` is the scheduler's rule (what the simulator runs); ``SuffixMachine``
replays the companion spec action by action so pytest explores the same state space
TLC does and catches the same injected bugs by the same invariant names.

Pages and blocks are 0-based here (block ``b`` is the spec's ``b + 1``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from itertools import product
from typing import Literal

BlockState = Literal["absent", "storing", "stored"]
BLOCK_STATES: tuple[BlockState, ...] = ("absent", "storing", "stored")
Phase = Literal["lookup", "admitted", "decoding"]


@dataclass(frozen=True)
class SuffixPlan:
    """What admission does for both groups: ``admit`` pages of prefix hit (the same for
    the MLA and the indexer group) and the indexer blocks to restore first."""

    host_hit: int
    gpu_hit: int
    admit_mla: int
    admit_indexer: int
    restore: tuple[int, ...]

    @property
    def fallback(self) -> bool:
        """The host hit was cut back to the prefix both groups share."""
        return self.admit_mla < self.host_hit

    @property
    def suffix_restore(self) -> bool:
        return bool(self.restore)


def plan_suffix(host_hit: int, gpu_hit: int, restorable: Callable[[int], bool]) -> SuffixPlan:
    """Restore exactly the missing indexer suffix ``gpu_hit..host_hit - 1`` when every
    block of it is restorable; otherwise every group falls back to ``min(host_hit,
    gpu_hit)``. O(suffix): ``restorable`` is asked about the suffix's blocks only."""
    suffix = range(gpu_hit, host_hit)
    if all(restorable(b) for b in suffix):
        return SuffixPlan(host_hit, gpu_hit, host_hit, host_hit, tuple(suffix))
    shared = min(host_hit, gpu_hit)
    return SuffixPlan(host_hit, gpu_hit, shared, shared, ())


# --- the twin of the companion spec ------------------------------------------------


@dataclass(frozen=True)
class SuffixState:
    """The spec's variables (hashable: the explorer keeps a set of them)."""

    host_hit: int
    gpu_hit: int
    held: tuple[BlockState, ...]
    phase: Phase = "lookup"
    admit_mla: int = 0
    admit_idx: int = 0
    restoring: frozenset[int] = frozenset()
    racy: frozenset[int] = frozenset()
    on_gpu: frozenset[int] = frozenset()


class SuffixMachine:
    """tla/IndexerSuffix.tla's actions over ``SuffixState``; a subclass that replaces one
    small step (``_restorable`` or ``_plan``) is an injected bug (spec/suffix_variants.py)."""

    ACTIONS = ("StoreStart", "StoreDone", "Evict", "Decide", "RestoreDone", "Decode")
    injected = "none"

    def __init__(self, n: int) -> None:
        self.n = n

    def initial(self) -> Iterator[SuffixState]:
        for host, gpu in product(range(self.n + 1), repeat=2):
            for held in product(BLOCK_STATES, repeat=self.n):
                yield SuffixState(host, gpu, held, on_gpu=frozenset(range(gpu)))

    # -- small steps (what a bug replaces) --

    def _restorable(self, s: SuffixState, b: int) -> bool:
        return s.held[b] == "stored"

    def _plan(self, s: SuffixState) -> SuffixPlan:
        return plan_suffix(s.host_hit, s.gpu_hit, lambda b: self._restorable(s, b))

    # -- actions: the next state, or None when not enabled --

    @staticmethod
    def _held(s: SuffixState, b: int, v: BlockState) -> SuffixState:
        return replace(s, held=(*s.held[:b], v, *s.held[b + 1:]))

    def StoreStart(self, s: SuffixState, b: int) -> SuffixState | None:
        return self._held(s, b, "storing") if s.held[b] == "absent" else None

    def StoreDone(self, s: SuffixState, b: int) -> SuffixState | None:
        return self._held(s, b, "stored") if s.held[b] == "storing" else None

    def Evict(self, s: SuffixState, b: int) -> SuffixState | None:
        if s.held[b] != "stored" or b in s.restoring:  # a block being restored is pinned
            return None
        return self._held(s, b, "absent")

    def Decide(self, s: SuffixState) -> SuffixState | None:
        if s.phase != "lookup":
            return None
        p = self._plan(s)
        restore = frozenset(p.restore)
        return replace(
            s, phase="admitted", admit_mla=p.admit_mla, admit_idx=p.admit_indexer,
            restoring=restore, racy=frozenset(b for b in restore if s.held[b] != "stored"),
        )

    def RestoreDone(self, s: SuffixState, b: int) -> SuffixState | None:
        if b not in s.restoring:
            return None
        on_gpu = s.on_gpu if b in s.racy else s.on_gpu | {b}
        return replace(s, restoring=s.restoring - {b}, on_gpu=on_gpu)

    def Decode(self, s: SuffixState) -> SuffixState | None:
        if s.phase != "admitted" or s.restoring:
            return None
        return replace(s, phase="decoding")

    def successors(self, s: SuffixState) -> Iterator[tuple[str, SuffixState]]:
        for b in range(self.n):
            for name in ("StoreStart", "StoreDone", "Evict", "RestoreDone"):
                t = getattr(self, name)(s, b)
                if t is not None:
                    yield name, t
        for name in ("Decide", "Decode"):
            t = getattr(self, name)(s)
            if t is not None:
                yield name, t


# --- invariants (the spec's, by name) ------------------------------------------------


def indexer_keys_present(s: SuffixState) -> bool:
    """No decode step reads a page whose indexer keys are absent from the GPU."""
    return s.phase != "decoding" or set(range(s.admit_idx)) <= s.on_gpu


def groups_agree(s: SuffixState) -> bool:
    """No group is admitted longer than another; the MLA group within the host hit."""
    return s.phase == "lookup" or (s.admit_mla == s.admit_idx and s.admit_mla <= s.host_hit)


def restore_exact(s: SuffixState) -> bool:
    """Only missing blocks of the admitted prefix are restored, capped at the host hit."""
    return s.restoring <= set(range(s.gpu_hit, min(s.admit_idx, s.host_hit)))


def type_ok(s: SuffixState) -> bool:
    n = len(s.held)
    return (0 <= s.host_hit <= n and 0 <= s.gpu_hit <= n and 0 <= s.admit_mla <= n
            and 0 <= s.admit_idx <= n and s.restoring <= set(range(n))
            and s.racy <= set(range(n)) and s.on_gpu <= set(range(n)))


SUFFIX_INVARIANTS: dict[str, Callable[[SuffixState], bool]] = {
    "TypeOK": type_ok,
    "IndexerKeysPresent": indexer_keys_present,
    "GroupsAgree": groups_agree,
    "RestoreExact": restore_exact,
}


def violated(s: SuffixState) -> list[str]:
    return [name for name, inv in SUFFIX_INVARIANTS.items() if not inv(s)]


@dataclass
class Exploration:
    """What ``explore`` found: every reachable state and the invariants each broke."""

    states: int
    violated: set[str]
    first: tuple[SuffixState, list[str]] | None  # the first violating state, breadth first


def explore(machine: SuffixMachine) -> Exploration:
    """Breadth-first over every reachable state, as TLC does (no stop at a violation)."""
    seen = set(machine.initial())
    frontier = list(seen)
    found: set[str] = set()
    first: tuple[SuffixState, list[str]] | None = None
    while frontier:
        nxt: list[SuffixState] = []
        for s in frontier:
            bad = violated(s)
            if bad:
                found |= set(bad)
                first = first or (s, bad)
            for _, t in machine.successors(s):
                if t not in seen:
                    seen.add(t)
                    nxt.append(t)
        frontier = nxt
    return Exploration(len(seen), found, first)
