"""Injected bugs of the indexer suffix rule: each replaces one small step of
``SuffixMachine`` (spec/suffix.py), as ``Bug = name`` does in tla/IndexerSuffix.tla.
Production code (``plan_suffix``) never names them."""

from __future__ import annotations

from dataclasses import replace

from hisparse.spec.catalogue import Variant
from hisparse.spec.suffix import SuffixMachine, SuffixPlan, SuffixState

MODEL = "suffix"  # tla/MC_suffix.tla


def restore_uncapped(m: SuffixMachine, s: SuffixState) -> SuffixPlan:
    """Restores the whole run of stored blocks past the GPU hit, beyond the host hit."""
    p = SuffixMachine._plan(m, s)
    if s.host_hit <= s.gpu_hit:
        return p
    end = s.gpu_hit
    while end < m.n and m._restorable(s, end):
        end += 1
    return replace(p, restore=tuple(range(s.gpu_hit, end)))


def no_fallback(m: SuffixMachine, s: SuffixState) -> SuffixPlan:
    """Admits the whole host hit even when part of the indexer suffix is missing."""
    restore = tuple(b for b in range(s.gpu_hit, s.host_hit) if m._restorable(s, b))
    return SuffixPlan(s.host_hit, s.gpu_hit, s.host_hit, s.host_hit, restore)


def fallback_mla_longer(m: SuffixMachine, s: SuffixState) -> SuffixPlan:
    """Falls the indexer group back but leaves the MLA group at the host hit."""
    p = SuffixMachine._plan(m, s)
    return replace(p, admit_mla=s.host_hit) if p.fallback else p


def restore_races_store(m: SuffixMachine, s: SuffixState, b: int) -> bool:
    """Counts a block whose store is still in flight as restorable."""
    return s.held[b] != "absent"


SUFFIX_VARIANTS: tuple[Variant, ...] = (
    Variant("restore_uncapped", "RestoreExact", "invariant",
            "the indexer restore is not capped at the HiSparse host prefix boundary",
            "_plan", restore_uncapped, model=MODEL),
    Variant("no_fallback", "IndexerKeysPresent", "invariant",
            "a missing indexer suffix does not make the groups fall back to their shared prefix",
            "_plan", no_fallback, model=MODEL),
    Variant("fallback_mla_longer", "GroupsAgree", "invariant",
            "the fallback cuts the indexer group back but leaves the MLA group longer",
            "_plan", fallback_mla_longer, model=MODEL),
    Variant("restore_races_store", "IndexerKeysPresent", "invariant",
            "an indexer restore copies a block whose store of the same block is in flight",
            "_restorable", restore_races_store, model=MODEL),
)


def suffix_machine(n: int, bug: str = "none") -> SuffixMachine:
    """The twin, plain or with one injected bug (its own subclass holding the variant)."""
    if bug == "none":
        return SuffixMachine(n)
    v = next((v for v in SUFFIX_VARIANTS if v.bug == bug), None)
    if v is None:
        known = ", ".join(v.bug for v in SUFFIX_VARIANTS)
        raise KeyError(f"unknown suffix bug {bug!r}; known: {known}")
    cls: type[SuffixMachine] = type(
        f"SuffixMachine_{bug}", (SuffixMachine,), {v.step: v.impl, "injected": bug}
    )
    return cls(n)
