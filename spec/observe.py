"""The spec-level view of a ProtocolState as JSON, one TLA+ variable at a time.

``encode`` gives a variable's full value (sentinels as ``null``); ``Observer`` gives
the ``post`` of the public trace format (spec/trace.py): only the entries a step
changed, so a trace grows with the work done, not with the state's size. A variable
indexed by rank (``RANKED``) is an object keyed by rank: the ranks a step changed,
each with its whole value, or (``NESTED``: ``copying``, ``hostData``) its changed
entries.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hisparse.spec.catalogue import CATALOGUE, RANKED_VARIABLES
from hisparse.spec.state import NO_IMP, NO_PG, Imp, Loc, Page, PgImp, ProtocolState, Spill

JSON = Any


def _page(p: Page | None) -> JSON:
    return None if p is None else [p[0], p[1]]


def _hosts(s: ProtocolState, tids: list[int] | tuple[int, ...]) -> list[int]:
    return sorted({s.transfer_dst[t] for t in tids})


def _spill(sp: Spill | None) -> JSON:
    if sp is None:
        return None
    return {
        "src": sp.src, "page": _page(sp.page), "phase": sp.phase,
        "enq": sorted(sp.enq), "need": sorted(sp.need),
    }


def _imp(x: Imp) -> JSON:
    return {"target": x.target, "phase": x.phase}


def _pg(y: PgImp) -> JSON:
    return {
        "host": None if y.host is None else int(y.host), "landed": sorted(y.landed),
        "staged": sorted(y.staged), "slot": y.slot,
    }


# The whole value of one rank's part of a rank-indexed variable.
RANK_ENCODERS: dict[str, Callable[[ProtocolState, int], JSON]] = {
    "down": lambda s, w: sorted(
        ({"src": t.src, "dst": int(t.dst)} for t in s.down[w].values()),
        key=lambda d: (d["src"], d["dst"]),
    ),
    "up": lambda s, w: [
        {"enq": _hosts(s, m.enqueued), "done": _hosts(s, m.completed)} for m in s.up[w]
    ],
    "lost": lambda s, w: s.lost[w],
    "copying": lambda s, w: list(s.copying[w]),
    "waits": lambda s, w: sorted(int(h) for h in s.waits[w]),
    "reading": lambda s, w: sorted(int(h) for h in s.reading[w]),
    "wEnq": lambda s, w: _hosts(s, s.w_enq[w]),
    "wDone": lambda s, w: _hosts(s, s.w_done[w]),
    "hostData": lambda s, w: list(s.host_data[w]),
}
RANKED: tuple[str, ...] = RANKED_VARIABLES
NESTED: tuple[str, ...] = ("copying", "hostData")  # functions of host blocks per rank


def _domain(s: ProtocolState, var: str) -> list[int]:
    """The ranks a rank-indexed variable is defined on (``hostData``: the copiers)."""
    return sorted(s.host_data) if var == "hostData" else list(range(s.config.ranks))


def _ranked(var: str) -> Callable[[ProtocolState], JSON]:
    enc = RANK_ENCODERS[var]
    return lambda s: {w: enc(s, w) for w in _domain(s, var)}


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
    "spill": lambda s: [_spill(sp) for sp in s.spill],
    **{v: _ranked(v) for v in RANKED},
    "gpuData": lambda s: list(s.gpu_data),
    "imp": lambda s: {r: _imp(s.imp_of(r)) for r in s.req},
    "pg": lambda s: [[_page(p), _pg(s.pg_of(p))] for p in s.loc],
}

# The variables each action writes (those not in its UNCHANGED clause), its injected
# variants' included: a recorder reports them all, whichever bug is on.
ACTION_WRITES: dict[str, tuple[str, ...]] = {a.name: a.all_writes for a in CATALOGUE}


def encode(s: ProtocolState, var: str) -> JSON:
    """The JSON value of one spec variable."""
    return ENCODERS[var](s)


# Function-valued variables are recorded as changed entries (a rank-indexed one: the
# changed ranks); the rest (sets and sequences, all small) whole.
DELTA_VARS: tuple[str, ...] = (
    "req", "loc", "gpuOwner", "srcPin", "hostState", "hostKey", "prefix", "spill",
    *RANKED, "gpuData", "imp", "pg",
)
_LISTS: dict[str, Callable[[ProtocolState], list[Any]]] = {
    "gpuOwner": lambda s: s.gpu_owner,
    "srcPin": lambda s: s.src_pin,
    "hostState": lambda s: s.host_state,
    "hostKey": lambda s: s.host_key,
    "spill": lambda s: s.spill,
    "gpuData": lambda s: s.gpu_data,
}
_ENTRY: dict[str, Callable[[Any], JSON]] = {
    "gpuOwner": _page,
    "srcPin": bool,
    "hostState": str,
    "hostKey": lambda k: k,
    "spill": _spill,
    "copying": lambda k: k,
    "gpuData": str,
    "hostData": str,
}
_CHUNK = 64


def _loc(w: Loc | None) -> JSON:
    return None if w is None else [w[0], int(w[1])]


def _changed_indices(old: list[Any], new: list[Any]) -> list[int]:
    """Indices where two equal-length lists differ; slices compare at C speed first."""
    if old == new:
        return []
    out: list[int] = []
    for lo in range(0, len(new), _CHUNK):
        hi = lo + _CHUNK
        if old[lo:hi] != new[lo:hi]:
            out.extend(i for i in range(lo, min(hi, len(new))) if old[i] != new[i])
    return out


def _changed_keys(old: dict[Any, Any], new: dict[Any, Any], default: Any) -> list[Any]:
    """Keys whose value differs; an absent key has ``default`` (a retired request's value)."""
    keys = {k for k, _ in old.items() ^ new.items()}
    return sorted(k for k in keys if old.get(k, default) != new.get(k, default))


class Observer:
    """Turns each recorded step into the changes of the variables it writes.

    Keeps the last recorded value of every variable (a copy, O(state) memory once), so
    a step's record is O(its changes) in size: memory stays linear in trace length.
    """

    def __init__(self, s: ProtocolState) -> None:
        self.last: dict[str, Any] = {v: self._raw(s, v) for v in DELTA_VARS}

    @staticmethod
    def _raw(s: ProtocolState, var: str) -> Any:
        if var in _LISTS:
            return list(_LISTS[var](s))
        if var in NESTED:
            lists = s.copying if var == "copying" else s.host_data
            return {w: list(lists[w]) for w in _domain(s, var)}
        if var in RANKED:
            return _ranked(var)(s)
        if var == "req":
            return dict(s.req)
        if var == "loc":
            return dict(s.loc)
        if var == "imp":
            return dict(s.imp)
        if var == "pg":
            return dict(s.pg)
        return {k: frozenset(hs) for k, hs in s.prefix.items()}

    def _delta(self, s: ProtocolState, var: str) -> JSON:
        old, new = self.last[var], self._raw(s, var)
        self.last[var] = new
        if var in _LISTS:
            entry = _ENTRY[var]
            return {i: entry(new[i]) for i in _changed_indices(old, new)}
        if var in NESTED:
            entry = _ENTRY[var]
            out = {}
            for w, values in new.items():
                changed = _changed_indices(old[w], values)
                if changed:
                    out[w] = {i: entry(values[i]) for i in changed}
            return out
        if var in RANKED:
            return {w: v for w, v in new.items() if old[w] != v}
        if var == "req":
            return {r: new.get(r, "new") for r in _changed_keys(old, new, "new")}
        if var == "loc":
            return [[_page(p), _loc(new.get(p))] for p in _changed_keys(old, new, None)]
        if var == "imp":
            return {r: _imp(new.get(r, NO_IMP)) for r in _changed_keys(old, new, NO_IMP)}
        if var == "pg":
            return [[_page(p), _pg(new.get(p, NO_PG))] for p in _changed_keys(old, new, NO_PG)]
        empty: frozenset[int] = frozenset()
        return {k: sorted(new.get(k, empty)) for k in _changed_keys(old, new, empty)}

    def post(self, s: ProtocolState, writes: tuple[str, ...]) -> dict[str, JSON]:
        """The ``post`` of a step that wrote ``writes``: deltas, or whole small values."""
        return {v: self._delta(s, v) if v in DELTA_VARS else encode(s, v) for v in writes}
