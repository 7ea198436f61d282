"""Trace values as TLA+ expressions, in the shapes ``tla/HiSparse.tla`` builds them.

Requests, pages and keys are numbered from 1 and blocks keep their integer IDs
(``ints.Ids``; the cfg rebinds the spec's page accessors and sentinels to match), so
TLC indexes the state's functions over intervals. Every map becomes a function
(``function``) so it
equals the spec's ``[x \\in S |-> ...]`` values (TLC compares functions by domain and
values). ``None`` entries become the spec's sentinels. Ranks are 0-based in traces and
the spec's ``Ranks`` are ``1..W``: ``rank`` is the one place that maps them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from hisparse.spec.catalogue import ACTIONS, RequestArgs
from hisparse.spec.trace import (
    ImpRecord,
    Loc,
    Page,
    PgRecord,
    SpillRecord,
    TraceHeader,
    TracePost,
    TraceStep,
    WorkerMeta,
)
from hisparse.tracecheck.ints import Ids


def string(s: str) -> str:
    """A TLA+ string; names are validated to need no escaping."""
    return f'"{s}"'


def gpu(g: int) -> str:
    return str(g)


def host(h: int, ids: Ids) -> str:
    """A host block as its number, above every GPU block's (``Ids.host``)."""
    return str(ids.host(h))


def rank(w: int) -> str:
    """A trace's 0-based rank as the spec's rank (``Ranks = 1..W``)."""
    return str(w + 1)


def ranks(ws: Iterable[int]) -> str:
    return tla_set(rank(w) for w in sorted(ws))


def tup(items: Iterable[str]) -> str:
    return "<<" + ", ".join(items) + ">>"


def tla_set(items: Iterable[str]) -> str:
    return "{" + ", ".join(items) + "}"


def record(fields: Sequence[tuple[str, str]]) -> str:
    """A record; with no fields ``<<>>`` (TLA+ has no empty record; ``DOMAIN`` is {} either
    way), e.g. the post of an action that writes nothing."""
    if not fields:
        return "<<>>"
    return "[" + ", ".join(f"{name} |-> {value}" for name, value in fields) + "]"


def function(pairs: Sequence[tuple[str, str]], bound: str = "x") -> str:
    """A function over exactly the given domain (empty domain: ``<<>>``).

    Written ``[x \\in {...} |-> CASE x = d -> v [] ...]``, not with the TLC module's
    ``:>``/``@@``: TLC does not precompute a constant definition that applies a TLC-module
    operator, so ``TrPageKeys`` as an ``@@`` chain was rebuilt at every ``PageKeys``
    lookup (about 4 ms for 387 requests, thousands of lookups per replayed state). The
    CASE form is evaluated once, when TLC precomputes the constants. ``bound`` names
    the bound variable (a function nested in another's value needs its own).
    """
    if not pairs:
        return "<<>>"
    dom = tla_set(d for d, _ in pairs)
    arms = " [] ".join(f"{bound} = {d} -> {v}" for d, v in pairs)
    return f"[{bound} \\in {dom} |-> CASE {arms}]"


def pairs(items: Sequence[tuple[str, str]]) -> str:
    """A step's change of a function-valued variable: the sequence of its ``<<argument,
    value>>`` pairs (each argument once; the replay module's ``TrApply`` applies it).

    Not a function constructor: SANY's semantic pass costs far more per
    ``[x \\in {...} |-> CASE ...]`` (a bound variable, a CASE arm per entry) than per
    tuple, and a long trace holds tens of thousands of entries (6.7 s of parsing for the
    512-request trace's module, 3.5 s as pairs).
    """
    return tup(f"<<{d}, {v}>>" for d, v in items)


def page(p: Page | None, ids: Ids) -> str:
    if p is None:
        return "NoPage"
    return str(ids.page(p[0], p[1]))


def request(r: str, ids: Ids) -> str:
    return str(ids.request(r))


def loc(value: Loc | None, ids: Ids) -> str:
    if value is None:
        return "NoLoc"
    tier, block = value
    return tup([string(tier), gpu(block) if tier == "gpu" else host(block, ids)])


def key(k: str | None, ids: Ids) -> str:
    return "NoKey" if k is None else str(ids.key(k))


def boolean(b: bool) -> str:
    return "TRUE" if b else "FALSE"


def hosts(hs: Iterable[int], ids: Ids) -> str:
    return tla_set(host(h, ids) for h in sorted(hs))


def _meta(m: WorkerMeta, ids: Ids) -> str:
    return record([("enq", hosts(m.enq, ids)), ("done", hosts(m.done, ids))])


def _imp(x: ImpRecord) -> str:
    return record([("target", string(x.target)), ("phase", string(x.phase))])


def _pg(y: PgRecord, ids: Ids) -> str:
    return record([
        ("host", "NoLoc" if y.host is None else tup([string("host"), host(y.host, ids)])),
        ("landed", tla_set(str(c) for c in sorted(y.landed))),
        ("staged", tla_set(str(c) for c in sorted(y.staged))),
        ("slot", boolean(y.slot)),
    ])


# A function value as (argument, value) pairs, in a fixed order.
Pairs = list[tuple[str, str]]


def _spill(s: SpillRecord | None, ids: Ids) -> str:
    if s is None:
        return "NoSpill"
    return record(
        [
            ("src", gpu(s.src)),
            ("page", page(s.page, ids)),
            ("phase", string(s.phase)),
            ("enq", ranks(s.enq)),
            ("need", ranks(s.need)),
        ]
    )


def _blocks(
    delta: dict[int, Any] | None, block: Callable[[int], str], value: Callable[[Any], str]
) -> Pairs | None:
    if delta is None:
        return None
    return [(block(b), value(v)) for b, v in sorted(delta.items())]


def post_fields(p: TracePost, ids: Ids) -> list[tuple[str, str | Pairs]]:
    """The reported variables of ``p``: changed entries of a function-valued variable as
    ``Pairs`` (applied to the variable's value before the step), other values whole."""
    def hb(b: int) -> str:
        return host(b, ids)

    def hs(blocks: Iterable[int]) -> str:
        return hosts(blocks, ids)

    deltas: list[tuple[str, Pairs | None]] = [
        (
            "req",
            None if p.req is None else [(request(r, ids), string(s)) for r, s in p.req.items()],
        ),
        ("loc", None if p.loc is None else [(page(pg, ids), loc(lc, ids)) for pg, lc in p.loc]),
        ("gpuOwner", _blocks(p.gpuOwner, gpu, lambda pg: page(pg, ids))),
        ("srcPin", _blocks(p.srcPin, gpu, boolean)),
        ("hostState", _blocks(p.hostState, hb, string)),
        ("hostKey", _blocks(p.hostKey, hb, lambda k: key(k, ids))),
        (
            "prefix",
            None
            if p.prefix is None
            else [(key(k, ids), hosts(blocks, ids)) for k, blocks in p.prefix.items()],
        ),
        ("spill", _blocks(p.spill, hb, lambda x: _spill(x, ids))),
        (
            "down",
            _ranked(
                p.down,
                lambda ts: tla_set(
                    record([("src", gpu(s)), ("dst", host(d, ids))])
                    for s, d in sorted((t.src, t.dst) for t in ts)
                ),
            ),
        ),
        ("up", _ranked(p.up, lambda ms: tup(_meta(m, ids) for m in ms))),
        ("lost", _ranked(p.lost, boolean)),
        ("copying", _nested(p.copying, lambda x: "Idle" if x is None else ids.data(x), ids)),
        ("waits", _ranked(p.waits, hs)),
        ("reading", _ranked(p.reading, hs)),
        ("wEnq", _ranked(p.wEnq, hs)),
        ("wDone", _ranked(p.wDone, hs)),
        ("gpuData", _blocks(p.gpuData, gpu, ids.data)),
        ("hostData", _nested(p.hostData, ids.data, ids)),
        ("imp", None if p.imp is None else [(request(r, ids), _imp(x)) for r, x in p.imp.items()]),
        ("pg", None if p.pg is None else [(page(q, ids), _pg(y, ids)) for q, y in p.pg]),
    ]
    return [(v, d) for v, d in deltas if d is not None]


def _ranked(delta: dict[int, Any] | None, value: Callable[[Any], str]) -> Pairs | None:
    """The changed ranks of a rank-indexed variable, each with its whole new value."""
    if delta is None:
        return None
    return [(rank(w), value(v)) for w, v in sorted(delta.items())]


def _nested(
    delta: dict[int, dict[int, Any]] | None, value: Callable[[Any], str], ids: Ids
) -> Pairs | None:
    """The changed ranks of a rank-indexed function of host blocks, each with its changed
    blocks as pairs (applied to that rank's value before the step)."""
    if delta is None:
        return None
    return [
        (rank(w), pairs([(host(h, ids), value(x)) for h, x in sorted(d.items())]))
        for w, d in sorted(delta.items())
    ]


def full(value: str | Pairs) -> str:
    """A post value as one self-contained expression (a change: its pairs)."""
    return value if isinstance(value, str) else pairs(value)


def _arrive_witness(step: TraceStep, ids: Ids) -> dict[str, str]:
    """The choice Arrive made, read off its ``loc`` change (every page of the request
    leaves NoLoc): host copies of the prefix hit, then the GPU blocks of the remaining
    pages, in page order. The spec's ArriveWith
    checks that the choice was allowed; without it TLC would enumerate every choice."""
    a, loc = step.args, step.post.loc
    assert isinstance(a, RequestArgs)
    mine = sorted((p[1], where) for p, where in (loc or []) if p[0] == a.request)
    hosts = [host(w[1], ids) for _, w in mine if w is not None and w[0] == "host"]
    blocks = [gpu(w[1]) for _, w in mine if w is not None and w[0] == "gpu"]
    return {"arrive_hosts": tup(hosts), "arrive_blocks": tup(blocks)}


def _admit_witness(step: TraceStep, ids: Ids) -> dict[str, str]:
    """The blocks AdmitImport leased, read off its changes: the GPU blocks now owned by
    the request's pages (device target: one per page; host target: the mirrored final
    page's), in page order, and the host block each page's ``pg`` names, in page order.
    The spec's AdmitImportWith checks that the choice was allowed."""
    a, post = step.args, step.post
    assert isinstance(a, RequestArgs)
    owned = sorted((p[1], g) for g, p in (post.gpuOwner or {}).items()
                   if p is not None and p[0] == a.request)
    leased = sorted((q[1], y.host) for q, y in (post.pg or [])
                    if q[0] == a.request and y.host is not None)
    return {"admit_blocks": tup(gpu(g) for _, g in owned),
            "admit_hosts": tup(host(h, ids) for _, h in leased)}


# How each catalogue Encoding writes one argument value.
def _encoders(ids: Ids) -> dict[str, Callable[[Any], str]]:
    """How each catalogue Encoding writes one argument value ("name": a request)."""
    return {
        "name": lambda r: request(r, ids), "page": lambda p: page(p, ids),
        "gpu": gpu, "host": lambda h: host(h, ids), "rank": rank, "chunk": str,
    }


def args(step: TraceStep, ids: Ids) -> str:
    """The step's arguments as the record its catalogue replay reads (``<<>>``: none)."""
    fields = ACTIONS[step.action].tla_args
    if not fields:
        return "<<>>"
    encodings = {e for _, e in fields}
    witness = (_arrive_witness(step, ids) if "arrive_blocks" in encodings
               else _admit_witness(step, ids) if "admit_blocks" in encodings else {})
    encode = _encoders(ids)
    return record(
        [
            (f, witness[e] if e in witness else encode[e](getattr(step.args, f)))
            for f, e in fields
        ]
    )


def step(
    s: TraceStep, ids: Ids, name: Callable[[str, str | Pairs], str] = lambda _, v: full(v)
) -> str:
    """One step as ``[action |-> ..., args |-> ..., post |-> [var |-> value, ...]]``.

    ``name(var, value)`` may replace each post value by a reference to a definition.
    """
    post = [(var, name(var, value)) for var, value in post_fields(s.post, ids)]
    return record([("action", string(s.action)), ("args", args(s, ids)), ("post", record(post))])


def constants(h: TraceHeader, ids: Ids) -> list[tuple[str, str]]:
    """Definitions ``Tr<Constant>`` that the cfg binds to the spec's constants: intervals,
    and ``PageKeys`` as a sequence of sequences (a function over ``1..R``)."""
    return [
        ("TrRequests", f"1..{len(ids.requests)}"),
        ("TrGpuBlocks", f"0..{h.gpu_blocks - 1}"),
        ("TrHostBlocks", f"{ids.host(0)}..{ids.host(h.host_blocks - 1)}"),
        ("TrKeys", f"1..{len(ids.keys)}"),
        ("TrPageKeys", tup(tup(str(k) for k in ks) for ks in ids.page_keys)),
        ("TrHostPoolBytes", str(h.host_pool_bytes)),
        ("TrHostBlockBytes", str(h.host_block_bytes)),
        ("TrRanks", ranks(range(h.ranks))),
        ("TrWriter", rank(h.writer)),
        ("TrBacking", string(h.backing)),
        ("TrBug", string(h.bug)),
        ("TrImports", tla_set(request(r, ids) for r in sorted(h.imports))),
        ("TrChunks", f"1..{h.chunks}"),
        ("TrStagingSlots", str(h.staging_slots)),
    ]
