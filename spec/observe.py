"""The spec-level view of a ProtocolState as JSON, one TLA+ variable at a time.

This is the ``post`` encoding of the public trace format (spec/trace.py): full
values over the whole domain, sentinels as ``null``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hisparse.spec.state import Page, ProtocolState

JSON = Any


def _page(p: Page | None) -> JSON:
    return None if p is None else [p[0], p[1]]


def _hosts(s: ProtocolState, tids: list[int] | tuple[int, ...]) -> list[int]:
    return sorted({s.transfer_dst[t] for t in tids})


ENCODERS: dict[str, Callable[[ProtocolState], JSON]] = {
    "req": lambda s: dict(s.req),
    "loc": lambda s: [
        [_page(p), None if w is None else [w[0], int(w[1])]] for p, w in s.loc.items()
    ],
    "gpuOwner": lambda s: [_page(p) for p in s.gpu_owner],
    "srcPin": lambda s: list(s.src_pin),
    "hostState": lambda s: list(s.host_state),
    "hostKey": lambda s: list(s.host_key),
    "prefix": lambda s: {k: sorted(int(h) for h in hs) for k, hs in s.prefix.items()},
    "spill": lambda s: [
        None if sp is None else {"src": sp.src, "page": _page(sp.page), "phase": sp.phase}
        for sp in s.spill
    ],
    "down": lambda s: sorted(
        ({"src": t.src, "dst": int(t.dst)} for t in s.down.values()),
        key=lambda d: (d["src"], d["dst"]),
    ),
    "up": lambda s: [
        {"enq": _hosts(s, m.enqueued), "done": _hosts(s, m.completed)} for m in s.up
    ],
    "copying": lambda s: list(s.copying),
    "wEnq": lambda s: _hosts(s, s.w_enq),
    "wDone": lambda s: _hosts(s, s.w_done),
    "gpuData": lambda s: list(s.gpu_data),
    "hostData": lambda s: list(s.host_data),
}

# The variables each action writes (those not in its UNCHANGED clause).
ACTION_WRITES: dict[str, tuple[str, ...]] = {
    "Arrive": ("req", "loc", "gpuOwner", "gpuData"),
    "StartSpill": (
        "hostState", "hostKey", "spill", "down", "srcPin", "loc", "gpuOwner", "gpuData",
    ),
    "ConsumeMeta": (
        "loc", "gpuOwner", "gpuData", "srcPin", "spill", "hostState", "hostKey",
        "prefix", "hostData", "up",
    ),
    "Finish": ("req", "loc", "gpuOwner", "gpuData"),
    "Abort": ("req", "loc", "gpuOwner", "gpuData", "hostState", "hostKey", "spill"),
    "EvictHost": ("hostState", "hostKey", "prefix", "hostData"),
    "Retire": ("req",),
    "WorkerLoss": (
        "down", "up", "wEnq", "wDone", "srcPin", "gpuOwner", "gpuData", "spill",
        "hostState", "hostKey", "prefix", "hostData",
    ),
    "WorkerEnqueue": ("down", "copying", "wEnq"),
    "WorkerDrop": ("down",),
    "WorkerComplete": ("hostData", "copying", "wDone"),
    "WorkerReport": ("up", "wEnq", "wDone"),
}


def encode(s: ProtocolState, var: str) -> JSON:
    """The JSON value of one spec variable."""
    return ENCODERS[var](s)
