"""Windows of a long trace: each starts from the recorded state of the step before.

Every step records what it changed, so the full state after any step is the spec's
``Init`` with every earlier change applied (``delta @@ var``, per rank for the nested
variables) — what ``MatchPost`` makes TLC's state be. ``States`` replays the changes
once, over the encoded values, and writes the state at each cut as a TLA+ state
predicate: a window's ``TraceInit`` (TLC starts from that one state) and the previous
window's ``TrHandoff`` invariant (its last state must be exactly it).

Why a windowed verdict is the whole trace's: on a trace without an injected bug, each
step pins its successor (it reports every variable its action writes, the action
leaves the rest unchanged), so the whole replay is one chain of states. If windows
1..k-1 accept and each ends exactly on the state the next starts from (``TrHandoff``),
window k replays the same chain from the same state as the whole run does, so it
rejects at the same step for the same reason, or accepts. A handoff that fails would
mean that argument does not hold for this trace: the caller then checks it whole.
"""

from __future__ import annotations

from dataclasses import dataclass

from hisparse.spec.observe import NESTED
from hisparse.spec.trace import POST_FIELDS, TraceHeader, TraceStep
from hisparse.tracecheck import encode
from hisparse.tracecheck.ints import Ids

HANDOFF_INVARIANT = "TrHandoff"

# Each function-valued variable's domain in the spec (its first element: States.lo).
_DOMAIN: dict[str, tuple[str]] = {
    "req": ("Requests",), "loc": ("Pages",), "gpuOwner": ("GpuBlocks",),
    "srcPin": ("GpuBlocks",), "hostState": ("HostBlocks",),
    "hostKey": ("HostBlocks",), "prefix": ("Keys",), "spill": ("HostBlocks",),
    "gpuData": ("GpuBlocks",), "imp": ("Requests",), "pg": ("Pages",),
}
_INIT: dict[str, str] = {
    "req": '"new"', "loc": "NoLoc", "gpuOwner": "NoPage", "srcPin": "FALSE",
    "hostState": '"free"', "hostKey": "NoKey", "prefix": "{}", "spill": "NoSpill",
    "gpuData": "Empty", "down": "{}", "up": "<<>>", "lost": "FALSE", "waits": "{}",
    "reading": "{}",
    "wEnq": "{}", "wDone": "{}", "copying": "Idle", "hostData": "Empty",
    "imp": "NoImp", "pg": "NoPg",
}


@dataclass(frozen=True)
class WindowState:
    """A full state as TLA+: ``defs`` (tables, one per variable) and ``predicate``."""

    defs: list[tuple[str, str]]
    predicate: str


class States:
    """The full state of a trace after each step, kept as encoded entries."""

    def __init__(self, header: TraceHeader, ids: Ids) -> None:
        self.ids = ids
        # each domain's first element (host blocks follow the GPU blocks: Ids.host)
        self.lo = {"Requests": 1, "Pages": 1, "Keys": 1, "GpuBlocks": 0,
                   "HostBlocks": ids.host(0)}
        size = {
            "Requests": len(ids.requests), "Pages": ids.pages, "Keys": len(ids.keys),
            "GpuBlocks": header.gpu_blocks, "HostBlocks": header.host_blocks,
        }
        self.flat: dict[str, list[str]] = {
            v: [_INIT[v]] * size[dom] for v, (dom,) in _DOMAIN.items()
        }
        ranks = [encode.rank(w) for w in range(header.ranks)]
        copiers = [encode.rank(w) for w in header.copiers()]
        self.ranked: dict[str, dict[str, str]] = {
            v: dict.fromkeys(ranks, _INIT[v])
            for v in POST_FIELDS
            if v not in _DOMAIN and v not in NESTED
        }
        self.nested: dict[str, dict[str, list[str]]] = {
            "copying": {w: [_INIT["copying"]] * header.host_blocks for w in ranks},
            "hostData": {w: [_INIT["hostData"]] * header.host_blocks for w in copiers},
        }

    def apply(self, step: TraceStep) -> None:
        """Apply one step's recorded changes."""
        for var, pairs in encode.post_fields(step.post, self.ids):
            assert not isinstance(pairs, str)
            if var in _DOMAIN:
                lo = self.lo[_DOMAIN[var][0]]
                for arg, value in pairs:
                    self.flat[var][int(arg) - lo] = value
            elif var not in NESTED:
                self.ranked[var].update(pairs)
        for var in NESTED:
            delta = getattr(step.post, var)
            for w, blocks in (delta or {}).items():
                row = self.nested[var][encode.rank(w)]
                for h, x in blocks.items():
                    row[h] = "Idle" if x is None else self.ids.data(x)

    def state(self, prefix: str) -> WindowState:
        """The current state as definitions named ``<prefix>_<var>`` and a predicate."""
        defs: list[tuple[str, str]] = []
        conj: list[str] = []
        for var in POST_FIELDS:
            if var in _DOMAIN:
                dom = _DOMAIN[var][0]
                lo = self.lo[dom]
                table = f"{prefix}_{var}"
                defs.append((table, encode.tup(self.flat[var])))
                # a domain 1..N: the table itself (a sequence is that function, and TLC
                # looks a sequence up in O(1), any other function linearly)
                value = table if lo == 1 else f"[x \\in {dom} |-> {table}[x + {1 - lo}]]"
            elif var in NESTED:
                arms = []
                for w, row in sorted(self.nested[var].items(), key=lambda wr: int(wr[0])):
                    table = f"{prefix}_{var}_{w}"
                    defs.append((table, encode.tup(row)))
                    shift = 1 - self.lo["HostBlocks"]
                    arms.append((w, f"[y \\in HostBlocks |-> {table}[y + {shift}]]"))
                defs.append((f"{prefix}_{var}", encode.function(arms)))
                value = f"{prefix}_{var}"
            else:
                ranked = sorted(self.ranked[var].items(), key=lambda wv: int(wv[0]))
                defs.append((f"{prefix}_{var}", encode.function(ranked)))
                value = f"{prefix}_{var}"
            conj.append(f"{var} = {value}")
        return WindowState(defs, "\n    /\\ ".join(["", *conj]).lstrip("\n"))
