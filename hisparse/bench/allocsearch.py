"""The largest batch an engine holds in a memory budget, found by allocating it.

``largest_fit`` asks ``fits(batch)`` (build the engine at that batch, run what it must
run, free it all; True when nothing ran out of memory) and returns the largest batch
that fits, assuming only that fitting is monotone (a batch that fits means every
smaller one fits). It starts from a guess (the capacity arithmetic), gallops away from
it by doubling steps until the answer is bracketed, then bisects the bracket: a good
guess costs two or three probes, a bad one O(log error) more. Every probe is recorded,
so a report can show what was tried. Pure Python: the CPU tests drive it with a fake
allocator.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


class SearchError(ValueError):
    """A search that cannot start (bad guess or limit)."""


@dataclass
class FitSearch:
    """The answer (0: not even one fits) and each probe as (batch, fitted)."""

    batch: int = 0
    probes: list[tuple[int, bool]] = field(default_factory=list)


def largest_fit(fits: Callable[[int], bool], guess: int, limit: int) -> FitSearch:
    """The largest ``b`` in ``1..limit`` with ``fits(b)``, starting from ``guess``."""
    if limit < 1:
        raise SearchError(f"limit must be at least 1, got {limit}")
    if not 1 <= guess <= limit:
        raise SearchError(f"guess must be in 1..{limit}, got {guess}")
    out = FitSearch()
    known: dict[int, bool] = {}

    def probe(b: int) -> bool:
        if b not in known:
            known[b] = bool(fits(b))
            out.probes.append((b, known[b]))
        return known[b]

    step = 1
    if probe(guess):
        lo, hi = guess, None  # lo fits; hi (once found) does not
        while hi is None:
            nxt = min(lo + step, limit)
            if nxt == lo:  # lo == limit
                out.batch = lo
                return out
            if probe(nxt):
                lo = nxt
                step *= 2
            else:
                hi = nxt
    else:
        hi, lo2 = guess, None
        while lo2 is None:
            nxt = max(hi - step, 0)
            if nxt == 0:
                lo2 = 0
            elif probe(nxt):
                lo2 = nxt
            else:
                hi = nxt
                step *= 2
        lo = lo2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if probe(mid):
            lo = mid
        else:
            hi = mid
    out.batch = lo
    return out
