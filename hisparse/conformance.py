"""Tests generated from the model: TLC's state graph, replayed on the Python machine.

Trace validation asks whether a Python run is a behaviour of the spec. This is the other
direction: TLC enumerates the whole state graph of a small model (``tla/MC_gen``, no
symmetry, ``-dump dot,actionlabels``) and every transition is replayed on
``ProtocolMachine``, starting from a machine whose spec-level state equals the
transition's source. The machine must accept the action (its enabling checks and its
invariant checks) and land exactly on the target state. Since every transition is
checked from a matching state, every behaviour of the model (every path in the graph)
is one the Python machine can take. Arguments are read off the target state, the way
trace validation reads Arrive's choice off its post-state. A retired request has left the
machine while the spec writes it as new again: the canonical form does the same, and a
step that brings a retired ID back (Arrive, Abort) first declares it again, as an engine
would.

Run it with ``python -m hisparse.conformance`` (figures) or through its ``tlc`` test.
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
import tempfile
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hisparse.spec.catalogue import ACTIONS, VARIABLES, Action, arguments
from hisparse.spec.constants import ProtocolConfig
from hisparse.spec.errors import ProtocolError
from hisparse.spec.machine import ProtocolMachine
from hisparse.spec.observe import encode
from hisparse.tlc.acquire import TlcInstall, ensure_tlc
from hisparse.tlc.errors import ModelError
from hisparse.tlc.paths import tla_dir as default_tla_dir
from hisparse.tlc.runner import run_tlc
from hisparse.tlc.value import ModelValue, parse_state

MODEL = "MC_gen"
# tla/MC_gen.tla, as the Python machine sees it
GEN_REQUESTS: dict[str, tuple[str, ...]] = {"r1": ("k1", "k2"), "r2": ("k1",)}
GEN_CONFIG = ProtocolConfig(gpu_blocks=2, host_pool_bytes=3, host_block_bytes=2, host_blocks=2)
# TLC labels an edge with the definition that holds it: WorkerEnqueue sits in WorkerNext's
# `\E t \in down : ...` (WorkerDrop is only enabled with its bug), and so does
# LoseCommand (told apart below: it acks nothing)
LABELS = {"WorkerNext": "WorkerEnqueue"}
STUTTER = "Quiescent"

Canon = dict[str, Any]


# --- the state graph -------------------------------------------------------------------------


@dataclass
class StateGraph:
    """TLC's state graph: states by node id, labelled edges, the initial states."""

    states: dict[str, dict[str, Any]]
    edges: list[tuple[str, str, str]]
    initial: list[str]


_NODE = re.compile(r'^(-?\d+) \[label="((?:[^"\\]|\\.)*)"(,style = filled)?\]', re.M)
_EDGE = re.compile(r'^(-?\d+) -> (-?\d+) \[label="(\w+)"', re.M)


def _unescape(label: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), label)


def parse_dot(text: str) -> StateGraph:
    """The graph of a ``-dump dot,actionlabels`` file (filled nodes are initial states)."""
    states: dict[str, dict[str, Any]] = {}
    initial: list[str] = []
    for m in _NODE.finditer(text):
        states[m.group(1)] = parse_state(_unescape(m.group(2)))
        if m.group(3):
            initial.append(m.group(1))
    edges = [(m.group(1), m.group(2), m.group(3)) for m in _EDGE.finditer(text)]
    if not states or not initial:
        raise ModelError("the TLC dump holds no state graph")
    return StateGraph(states, edges, initial)


def dump_graph(
    install: TlcInstall | None = None, tla_dir: Path | None = None, workdir: Path | None = None
) -> StateGraph:
    """Explore ``tla/MC_gen`` with TLC and read back its whole state graph."""
    tla = tla_dir or default_tla_dir()
    root = Path(tempfile.mkdtemp(prefix="hisparse-conformance-", dir=workdir))
    dot = root / "states.dot"
    res = run_tlc(
        tla / f"{MODEL}.tla", tla / f"{MODEL}.cfg", root, 1,
        ["-dump", "dot,actionlabels", str(dot)], tla_dir=tla, install=install or ensure_tlc(),
    )
    if res.output.result != "ok" or not dot.is_file():
        raise ModelError(f"TLC could not explore {MODEL}: {res.output.reason} ({res.log_path})")
    return parse_dot(dot.read_text())


# --- one canonical form for both sides --------------------------------------------------------


def _index(v: Any) -> int:
    """g1/h1 (model values, 1-based names) -> 0-based pool index."""
    if not isinstance(v, ModelValue) or not v[1:].isdigit():
        raise ModelError(f"{v!r} is not a block of the model")
    return int(v[1:]) - 1


def _page(p: Any) -> tuple[str, int] | None:
    return None if p == ("nopage", 0) else (str(p[0]), int(p[1]))


def _by_index(f: dict[Any, Any], conv: Callable[[Any], Any]) -> tuple[Any, ...]:
    return tuple(conv(f[b]) for b in sorted(f, key=_index))


def _by_rank(f: Any) -> tuple[Any, ...]:
    """A rank-indexed value (``Ranks = 1..W``: TLC prints it as a sequence) by 0-based rank."""
    if isinstance(f, dict):
        return tuple(f[w] for w in sorted(f))
    return tuple(f)


def canon_tlc(s: dict[str, Any]) -> Canon:
    """A TLC state in the canonical form (pools as tuples, sentinels as None)."""
    def loc(w: Any) -> Any:
        return None if w == ("nowhere", "nowhere") else (w[0], _index(w[1]))

    def spill(sp: dict[str, Any]) -> Any:
        if sp["src"] == "none":
            return None
        return (
            _index(sp["src"]), _page(sp["page"]), sp["phase"],
            frozenset(w - 1 for w in sp["enq"]), frozenset(w - 1 for w in sp["need"]),
        )

    def hosts(hs: Any) -> frozenset[int]:
        return frozenset(_index(h) for h in hs)

    return {
        "req": {str(r): st for r, st in s["req"].items()},
        "loc": {(str(p[0]), p[1]): loc(w) for p, w in s["loc"].items()},
        "gpuOwner": _by_index(s["gpuOwner"], _page),
        "srcPin": _by_index(s["srcPin"], bool),
        "hostState": _by_index(s["hostState"], str),
        "hostKey": _by_index(s["hostKey"], lambda k: None if k == "nokey" else str(k)),
        # the machine's index holds live keys only; a key with no copy is the same fact
        "prefix": {str(k): hosts(hs) for k, hs in s["prefix"].items() if hs},
        "spill": _by_index(s["spill"], spill),
        "down": tuple(
            frozenset((_index(t["src"]), _index(t["dst"])) for t in d) for d in _by_rank(s["down"])
        ),
        "up": tuple(
            tuple((hosts(m["enq"]), hosts(m["done"])) for m in u) for u in _by_rank(s["up"])
        ),
        "lost": tuple(bool(x) for x in _by_rank(s["lost"])),
        "copying": tuple(
            _by_index(c, lambda x: None if x == "idle" else str(x)) for c in _by_rank(s["copying"])
        ),
        "waits": tuple(hosts(x) for x in _by_rank(s["waits"])),
        "reading": tuple(hosts(x) for x in _by_rank(s["reading"])),
        "wEnq": tuple(hosts(x) for x in _by_rank(s["wEnq"])),
        "wDone": tuple(hosts(x) for x in _by_rank(s["wDone"])),
        "gpuData": _by_index(s["gpuData"], str),
        "hostData": tuple(_by_index(d, str) for d in _by_rank(s["hostData"])),
        # the P/D import's entries that are not NoImp / NoPg
        "imp": {str(r): (x["target"], x["phase"]) for r, x in s["imp"].items()
                if (x["target"], x["phase"]) != ("none", "none")},
        "pg": {(str(p[0]), p[1]): pg for p, y in s["pg"].items()
               if (pg := _pg_tlc(y)) != (None, frozenset(), frozenset(), False)},
    }


def _pg_tlc(y: Any) -> tuple[Any, ...]:
    host = y["host"]
    return (None if host[0] == "nowhere" else _index(host[1]), frozenset(y["landed"]),
            frozenset(y["staged"]), bool(y["slot"]))


def canon_python(m: ProtocolMachine) -> Canon:
    """The machine's spec-level state (``spec.observe``) in the same canonical form.

    A retired request has left the machine; the spec writes it as its Init value
    (``req[r] = "new"``, no block-table entries), and so does this form."""
    j = {v: encode(m.state, v) for v in VARIABLES}

    def page(p: Any) -> Any:
        return None if p is None else (p[0], p[1])

    gone = [r for r in GEN_REQUESTS if r not in m.state.req]
    return {
        "req": {**dict(j["req"]), **dict.fromkeys(gone, "new")},
        "loc": {
            **{page(p): None if w is None else (w[0], w[1]) for p, w in j["loc"]},
            **{(r, i): None for r in gone for i in range(1, len(GEN_REQUESTS[r]) + 1)},
        },
        "gpuOwner": tuple(page(p) for p in j["gpuOwner"]),
        "srcPin": tuple(j["srcPin"]),
        "hostState": tuple(j["hostState"]),
        "hostKey": tuple(j["hostKey"]),
        "prefix": {k: frozenset(hs) for k, hs in j["prefix"].items()},
        "spill": tuple(
            None if sp is None else (
                sp["src"], page(sp["page"]), sp["phase"], frozenset(sp["enq"]),
                frozenset(sp["need"]),
            )
            for sp in j["spill"]
        ),
        "down": tuple(frozenset((t["src"], t["dst"]) for t in d) for d in _by_rank(j["down"])),
        "up": tuple(
            tuple((frozenset(x["enq"]), frozenset(x["done"])) for x in u)
            for u in _by_rank(j["up"])
        ),
        "lost": tuple(bool(x) for x in _by_rank(j["lost"])),
        "copying": tuple(tuple(c) for c in _by_rank(j["copying"])),
        "waits": tuple(frozenset(x) for x in _by_rank(j["waits"])),
        "reading": tuple(frozenset(x) for x in _by_rank(j["reading"])),
        "wEnq": tuple(frozenset(x) for x in _by_rank(j["wEnq"])),
        "wDone": tuple(frozenset(x) for x in _by_rank(j["wDone"])),
        "gpuData": tuple(j["gpuData"]),
        "hostData": tuple(tuple(d) for d in _by_rank(j["hostData"])),
        "imp": {r: (x["target"], x["phase"]) for r, x in j["imp"].items()
                if (x["target"], x["phase"]) != ("none", "none")},
        "pg": {page(p): pg for p, y in j["pg"]
               if (pg := (y["host"], frozenset(y["landed"]), frozenset(y["staged"]),
                          y["slot"])) != (None, frozenset(), frozenset(), False)},
    }


# --- replay ----------------------------------------------------------------------------------


class ReplayMismatch(ModelError):
    """A transition of the model that the Python machine refuses or lands elsewhere on."""


def _changed(a: tuple[Any, ...], b: tuple[Any, ...], test: Callable[[Any, Any], bool]) -> int:
    hits = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if test(x, y)]
    if len(hits) != 1:
        raise ReplayMismatch(f"expected one changed entry, found {hits}")
    return hits[0]


def _call(m: ProtocolMachine, action: str, u: Canon, v: Canon) -> None:
    """Apply ``action`` to ``m`` with the arguments the target state ``v`` shows."""
    if action in ("Arrive", "Finish", "Abort", "Retire"):
        (r,) = [r for r in u["req"] if u["req"][r] != v["req"][r]]
        if r not in m.state.req:  # retired: its ID is declared again (the spec's "new")
            m.add_request(r, GEN_REQUESTS[r])
        if action != "Arrive":
            getattr(m, action)(r)
            return
        mine = [v["loc"][(r, i)] for i in range(1, len(GEN_REQUESTS[r]) + 1)]
        m.Arrive(
            r,
            blocks=[w[1] for w in mine if w[0] == "gpu"],
            hosts=[w[1] for w in mine if w[0] == "host"],
        )
    elif action == "StartSpill":
        h = _changed(u["spill"], v["spill"], lambda x, y: x is None and y is not None)
        m.StartSpill(v["spill"][h][1], h)
    elif action == "EvictHost":
        evicted = _changed(u["hostState"], v["hostState"], lambda x, y: (x, y) == ("valid", "free"))
        m.EvictHost(evicted)
    elif action == "WorkerComplete":  # MC_gen has one rank
        m.WorkerComplete(
            _changed(u["copying"][0], v["copying"][0], lambda x, y: x and y is None), 0
        )
    elif action == "WorkerEnqueue":
        ((src, dst),) = u["down"][0] - v["down"][0]
        (tid,) = [t.transfer_id for t in m.state.down[0].values() if (t.src, t.dst) == (src, dst)]
        m.WorkerEnqueue(tid, 0)
    elif action in ("WorkerReport", "ConsumeMeta", "WorkerLoss"):
        getattr(m, action)(0)
    elif action in ACTIONS:
        _search(m, ACTIONS[action], v)
    else:
        raise ReplayMismatch(f"no Python action for TLC label {action!r}")


def _search(m: ProtocolMachine, action: Action, v: Canon) -> None:
    """An action with no argument reader above: take the first argument of its catalogue
    domain whose step (tried on a copy) lands on ``v``."""
    for args in arguments(m.state, action.domain, action.ranked):
        trial = copy.deepcopy(m)
        try:
            getattr(trial, action.name)(*args)
        except ProtocolError:
            continue
        if canon_python(trial) == v:
            getattr(m, action.name)(*args)
            return
    raise ReplayMismatch(f"no argument of {action.name} lands on the target state")


@dataclass
class ConformanceReport:
    """What the replay covered."""

    states: int
    transitions: int
    stutters: int
    depth: int
    behaviours: int  # distinct behaviours (paths from an initial state) of length <= depth
    by_action: dict[str, int]


def new_machine() -> ProtocolMachine:
    m = ProtocolMachine.create(GEN_CONFIG, check=True)
    for r, keys in GEN_REQUESTS.items():
        m.add_request(r, keys)
    return m


def replay_graph(g: StateGraph) -> ConformanceReport:
    """Replay every edge of ``g`` from a Python machine matching its source state."""
    canon = {n: canon_tlc(s) for n, s in g.states.items()}
    out: dict[str, list[tuple[str, str]]] = {}
    for u, v, label in g.edges:
        out.setdefault(u, []).append((v, label))
    machines: dict[str, ProtocolMachine] = {}
    dist: dict[str, int] = {}
    for n in g.initial:
        m = new_machine()
        if canon_python(m) != canon[n]:
            raise ReplayMismatch(f"initial state {n} differs from the Python machine's Init")
        machines[n], dist[n] = m, 0
    queue = deque(g.initial)
    transitions = stutters = 0
    by_action: dict[str, int] = {}
    while queue:
        u = queue.popleft()
        for v, label in out.get(u, []):
            if label == STUTTER:
                if canon[u] != canon[v]:
                    raise ReplayMismatch(f"{STUTTER} edge {u} -> {v} changes the state")
                stutters += 1
                continue
            action = LABELS.get(label, label)
            if action == "WorkerEnqueue" and canon[u]["wEnq"] == canon[v]["wEnq"]:
                action = "LoseCommand"  # the same label; a command taken is acked
            m = copy.deepcopy(machines[u])
            try:
                _call(m, action, canon[u], canon[v])
            except ProtocolError as exc:
                raise ReplayMismatch(f"{action} {u} -> {v} refused by Python: {exc}") from exc
            got = canon_python(m)
            if got != canon[v]:
                diff = [k for k in VARIABLES if got[k] != canon[v][k]]
                raise ReplayMismatch(f"{action} {u} -> {v}: Python lands elsewhere on {diff}")
            transitions += 1
            by_action[action] = by_action.get(action, 0) + 1
            if v not in machines:
                machines[v], dist[v] = m, dist[u] + 1
                queue.append(v)
    if len(machines) != len(g.states):
        raise ReplayMismatch(f"{len(g.states) - len(machines)} states unreachable in the dump")
    depth = max(dist.values())
    return ConformanceReport(
        len(machines), transitions, stutters, depth, _behaviours(g, depth), by_action
    )


def _behaviours(g: StateGraph, depth: int) -> int:
    """Paths from an initial state with at most ``depth`` non-stuttering steps."""
    succ: dict[str, list[str]] = {}
    for u, v, label in g.edges:
        if label != STUTTER:
            succ.setdefault(u, []).append(v)
    ways = dict.fromkeys(g.initial, 1)
    total = len(g.initial)
    for _ in range(depth):
        nxt: dict[str, int] = {}
        for u, w in ways.items():
            for v in succ.get(u, []):
                nxt[v] = nxt.get(v, 0) + w
        total += sum(nxt.values())
        ways = nxt
    return total


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hisparse.conformance", description=__doc__)
    ap.parse_args(argv)
    r = replay_graph(dump_graph())
    print(f"{MODEL}: {r.states} states, {r.transitions} transitions replayed on the Python "
          f"machine ({r.stutters} stuttering), depth {r.depth}, "
          f"{r.behaviours:,} behaviours of up to {r.depth} steps")
    print("by action: " + ", ".join(f"{a} {n}" for a, n in sorted(r.by_action.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
