"""Registry of bugs that can be injected into the TLA+ model.

Each entry is a deliberate protocol mistake that the spec guards with ``Bug = name``
and the machine injects as a registered variant (spec/catalogue.py holds them).
``hisparse check --inject NAME`` turns it on and expects TLC to report ``catches``:
this proves every invariant and property has teeth instead of passing vacuously.
"""

from __future__ import annotations

from dataclasses import dataclass

from hisparse.spec.catalogue import CATALOGUE, BugKind
from hisparse.spec.suffix_variants import SUFFIX_VARIANTS


@dataclass(frozen=True)
class InjectedBug:
    """One injectable bug: what it breaks and which check must catch it."""

    name: str
    catches: str
    kind: BugKind
    summary: str
    model: str = "small"  # the TLC model that catches it (tensor-parallel bugs: tp, tpshared)


# Declared with the action each one changes, as a variant in the protocol catalogue:
# the bugs of tla/HiSparse.tla (what traces, the machine and its pytest twins know).
PROTOCOL_BUGS: tuple[InjectedBug, ...] = tuple(
    InjectedBug(v.bug, v.catches, v.kind, v.summary, v.model)
    for a in CATALOGUE
    for v in a.variants
)
# The companion spec tla/IndexerSuffix.tla's bugs (model ``suffix``; spec/suffix_variants.py).
SUFFIX_BUGS: tuple[InjectedBug, ...] = tuple(
    InjectedBug(v.bug, v.catches, v.kind, v.summary, v.model) for v in SUFFIX_VARIANTS
)
# Every bug ``hisparse check --inject`` knows.
BUGS: tuple[InjectedBug, ...] = PROTOCOL_BUGS + SUFFIX_BUGS


def get_bug(name: str) -> InjectedBug:
    """Look a bug up by name; ``KeyError`` lists the valid names."""
    for bug in BUGS:
        if bug.name == name:
            return bug
    raise KeyError(f"unknown bug {name!r}; known: {', '.join(b.name for b in BUGS)}")
