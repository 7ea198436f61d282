"""Which trace headers TLC may be asked to check, decided before TLC starts.

A header is data from the outside: its ``bug`` must not silently switch the spec's
injected defects on (a run recorded with a bug would be "accepted" against the buggy
spec), and its constants size TLC's state, so absurd ones must fail with a message
rather than run the checker out of memory or past TLC's 32-bit integers.
"""

from __future__ import annotations

from dataclasses import dataclass

from hisparse.bugs import PROTOCOL_BUGS as BUGS
from hisparse.spec.trace import TraceHeader

# TLC's integers are 32-bit; HostCapacityRoundedUp adds the two byte constants.
TLC_INT_MAX = 2**31 - 1


@dataclass(frozen=True)
class HeaderLimits:
    """Largest constants a trace may declare; every map of TLC's state is this big."""

    blocks: int = 1 << 16  # gpu_blocks and host_blocks, each
    requests: int = 1 << 16
    pages: int = 1 << 20  # summed over requests
    bytes: int = TLC_INT_MAX  # host_pool_bytes + host_block_bytes


def header_problem(h: TraceHeader, *, allow_bug: bool, limits: HeaderLimits) -> str | None:
    """Why ``h`` must not be checked, or None. Cost: O(requests) (the header's own size)."""
    known = {b.name for b in BUGS}
    if h.bug != "none" and h.bug not in known:
        return f"header names unknown bug {h.bug!r}; known: none, {', '.join(sorted(known))}"
    if h.bug != "none" and not allow_bug:
        return (
            f"header declares injected bug {h.bug!r}: the spec would be checked with that "
            "defect switched on; pass --allow-bug (allow_bug=True) to check it so"
        )
    for name, value in (("gpu_blocks", h.gpu_blocks), ("host_blocks", h.host_blocks)):
        if value > limits.blocks:
            return f"header {name}={value} exceeds the limit of {limits.blocks}"
    if len(h.requests) > limits.requests:
        return f"header declares {len(h.requests)} requests, over the limit of {limits.requests}"
    pages = sum(len(ks) for ks in h.requests.values())
    if pages > limits.pages:
        return f"header declares {pages} pages, over the limit of {limits.pages}"
    total = h.host_pool_bytes + h.host_block_bytes
    if total > limits.bytes:
        return (
            f"header host_pool_bytes + host_block_bytes = {total} exceeds {limits.bytes} "
            "(TLC's integers are 32-bit): record the pool in coarser units"
        )
    return None
