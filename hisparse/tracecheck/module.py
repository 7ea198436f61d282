"""Generate the TLA+ module and cfg that replay a group of traces through the spec.

All traces of one group share their constants, so one TLC run checks them all: the
initial state picks a trace (``tr``), each step applies the trace's action and must
land exactly on its recorded post-state, and a finished trace stutters. A step records
only changes: a function-valued variable's post-state is its value in TLC's current
state updated by the recorded entries (``TrApply(var, pairs)``, the function
``pairs @@ var``), so the module holds each change once and its size stays linear in
the trace's length; every variable a step does not report must stay unchanged. A step that
cannot be taken leaves a state with no successor, which TLC reports as a deadlock.
"""

from __future__ import annotations

from collections.abc import Sequence

from hisparse.spec.catalogue import CATALOGUE
from hisparse.spec.observe import DELTA_VARS, NESTED
from hisparse.spec.trace import POST_FIELDS, Trace
from hisparse.tracecheck import delta, encode, ints
from hisparse.tracecheck.window import HANDOFF_INVARIANT, WindowState

MODULE = "HiSparseTrace"
VIEW = "TrView"  # what TLC fingerprints in a replay (see _REPLAY)
# Checked after the spec's invariants when a rejection is diagnosed, they turn TLC's bare
# deadlock into a reason: the step's action is not enabled, or no successor has this one
# reported variable's value.
ENABLED_INVARIANT = "TraceActionEnabled"
MATCH_PREFIX = "TraceMatches_"



def step_action() -> str:
    """``StepAction(e)``: the catalogue's TLA+ replay of each action, by name."""
    cases = [f'e.action = "{a.name}" -> {a.replay}' for a in CATALOGUE]
    return "StepAction(e) ==\n    CASE " + "\n      [] ".join(cases) + "\n"


_REPLAY = """\
TrStep == Traces[tr][cursor]

\\* A replay is a chain: MatchPost gives every spec variable its next value, TrTrack every
\\* tracker its, cursor moves on and tr stays, so a state has at most one successor, and
\\* it is named by <<tr, cursor>> (Init, or a window's TrStart, is one state per trace).
\\* TLC fingerprints this view (cfg: VIEW) instead of the whole state, which costs
\\* O(pages + keys) a state: two states with one view are the same state.
TrView == <<tr, cursor>>

TraceInit ==
    /\\ {init} /\\ tr \\in 1..Len(Traces) /\\ cursor = 1
    /\\ {auxinit}

TraceNext ==
    \\/ /\\ cursor <= Len(Traces[tr])
       /\\ StepAction(TrStep)
       /\\ MatchPost(TrStep)
       /\\ cursor' = cursor + 1
       /\\ UNCHANGED tr
       /\\ TrTrack(TrStep)
    \\/ /\\ cursor > Len(Traces[tr])
       /\\ UNCHANGED <<vars, tr, cursor, {aux}>>

TraceActionEnabled == TrDiagnosed => ENABLED StepAction(TrStep)
"""


# A step's change ``d`` of a function-valued variable is a sequence of ``<<argument,
# value>>`` pairs (``encode.pairs``). ``TrApply(f, d)`` is the function ``d @@ f`` (``f``
# with d's entries), built with one EXCEPT per pair when d writes inside f's domain, as in
# every trace a spec step matches (TLC's ``@@`` compares every argument of ``f`` with every
# one of ``d`` and yields a function it then looks up linearly). ``Nested``: a
# rank-indexed function of host blocks, each changed rank's pairs applied to its value.
_NESTED = """\
TrArgs(d) == {d[i][1] : i \\in 1..Len(d)}
TrFcn(d) == [x \\in TrArgs(d) |-> d[CHOOSE i \\in 1..Len(d) : d[i][1] = x][2]]
RECURSIVE TrSetPairs(_, _, _)
TrSetPairs(f, d, i) ==
    IF i > Len(d) THEN f ELSE TrSetPairs([f EXCEPT ![d[i][1]] = d[i][2]], d, i + 1)
TrApply(f, d) == IF TrArgs(d) \\subseteq DOMAIN f THEN TrSetPairs(f, d, 1) ELSE TrFcn(d) @@ f
RECURSIVE TrSetNested(_, _, _)
TrSetNested(f, d, i) ==
    IF i > Len(d) THEN f
    ELSE TrSetNested([f EXCEPT ![d[i][1]] = TrApply(@, d[i][2])], d, i + 1)
Nested(d, f) ==
    IF TrArgs(d) \\subseteq DOMAIN f THEN TrSetNested(f, d, 1)
    ELSE [x \\in TrArgs(d) |-> TrFcn(TrFcn(d)[x]) @@ f[x]] @@ f
"""


def posted(v: str, e: str) -> str:
    """The post-state of ``v`` that step ``e`` records: its change applied to ``v``."""
    if v in NESTED:
        return f"Nested({e}.post.{v}, {v})"
    return f"TrApply({v}, {e}.post.{v})" if v in DELTA_VARS else f"{e}.post.{v}"


def match_post() -> str:
    """``MatchPost(e)``: every variable the step reports has exactly that value next, and
    every other one is unchanged (what ``delta`` relies on: a step changes only the
    entries it reports; the catalogue's writes are always reported, so for the correct
    spec the action's own UNCHANGED says the same)."""
    lines = [
        f'    /\\ IF "{v}" \\in DOMAIN e.post THEN {v}\' = {posted(v, "e")} ELSE UNCHANGED {v}'
        for v in POST_FIELDS
    ]
    return "MatchPost(e) ==\n" + "\n".join(lines) + "\n"


def match_invariants() -> str:
    """One ``TraceMatches_<var>`` per variable: some successor agrees on that variable."""
    return "".join(
        f"{MATCH_PREFIX}{v} ==\n"
        f'    TrDiagnosed /\\ "{v}" \\in DOMAIN TrStep.post\n'
        f"        => ENABLED (StepAction(TrStep) /\\ {v}' = {posted(v, 'TrStep')})\n"
        for v in POST_FIELDS
    )


def diagnostic_invariants() -> list[str]:
    """The generated invariants, in the order TLC should check them."""
    return [ENABLED_INVARIANT, *(f"{MATCH_PREFIX}{v}" for v in POST_FIELDS)]


def diagnosed(at: int | None) -> str:
    """``TrDiagnosed``: the states whose step the diagnostic invariants examine.

    Each costs an ENABLED evaluation, and TLC caches no LET value inside ENABLED, so a
    rejected trace's re-run examines only the step it stuck at (``at``, which the first
    run found): every earlier step had a successor there, so these invariants held.
    """
    if at is None:
        return "TrDiagnosed == cursor <= Len(Traces[tr])\n"
    if at < 1:
        raise ValueError(f"diagnosed step must be 1 or more, not {at}")
    return f"TrDiagnosed == cursor = {at}\n"


def initial(ids: ints.Ids) -> str:
    """``TrInit``: the spec's initial ``req``, ``loc``, ``prefix``, ``imp``, ``pg`` as sequences.

    TraceInit binds them so, then ``Init`` checks that they are its values (its
    constructors build the same functions); TLC keeps a sequence as one, which it looks
    up in O(1) and which EXCEPT (``SetAt``) keeps, where the functions Init's
    constructors build are looked up linearly, in every state after.
    """
    values = (("req", '"new"', len(ids.requests)), ("loc", "NoLoc", ids.pages),
              ("prefix", "{}", len(ids.keys)), ("imp", "NoImp", len(ids.requests)),
              ("pg", "NoPg", ids.pages))
    conj = "\n".join(f"    /\\ {v} = {encode.tup([x] * n)}" for v, x, n in values)
    return f"TrInit ==\n{conj}\n"


def module_text(
    traces: Sequence[Trace],
    *,
    diagnose_at: int | None = None,
    start: WindowState | None = None,
    end: WindowState | None = None,
) -> str:
    """The module replaying ``traces``; they must share one header's constants.

    ``diagnose_at``: the step the diagnostic invariants examine (default: every step).
    ``start``: a window's first state (TLC starts there, not at ``Init``); ``end``: the
    state its last step must reach (``TrHandoff``, see ``window``).
    """
    header = traces[0].header
    ids = ints.Ids(header)
    # Each constant's value gets a definition of its own, which the bound one names: TLC
    # evaluates the definition a cfg substitutes for a constant (`PageKeys <- TrPageKeys`)
    # again at every use, so TrPageKeys written out cost O(pages) per `PageKeys[r]` (60 ms
    # per step on a 5,000-request trace); a definition it names is computed once.
    defs = [
        d
        for name, value in encode.constants(header, ids)
        for d in (f"{name}Value == {value}", f"{name} == {name}Value")
    ]
    defs += [f"{name} == {value}" for name, value in ids.definitions()]
    window = []
    for name, state in (("TrStart", start), ("TrEnd", end)):
        if state is not None:
            defs += [f"{n} == {v}" for n, v in state.defs]
            window.append(f"{name} ==\n{state.predicate}\n")
    if end is not None:
        window.append(f"{HANDOFF_INVARIANT} == cursor > Len(Traces[tr]) => TrEnd\n")
    # one step a line; each written whole (naming repeated values as definitions cost
    # SANY more than it saved: 3.2 s against 2.4 s for the 512-request trace's module)
    seqs = ["<<\n        " + ",\n        ".join(encode.step(s, ids) for s in t.steps) + ">>"
            for t in traces]
    body = "Traces == <<\n    " + ",\n    ".join(seqs) + "\n>>\n"
    return "\n".join(
        [
            f"---- MODULE {MODULE} ----",
            "EXTENDS HiSparse, TLC, Integers",  # Integers: negative sentinels (ints.py)
            "VARIABLES tr, cursor, " + ", ".join(delta.AUX_VARS),
            *defs,
            body,
            step_action(),
            _NESTED,
            match_post(),
            diagnosed(diagnose_at),
            *window,
            delta.TLA,
            initial(ids) if start is None else "",
            _REPLAY.replace("{init}", "TrInit /\\ Init" if start is None else "TrStart").replace(
                "{aux}", ", ".join(delta.AUX_VARS)
            ).replace("{auxinit}", delta.AUX_INIT),
            match_invariants(),
            "====",
            "",
        ]
    )


def cfg_text(
    invariants: Sequence[str], *, diagnose: bool = False, handoff: bool = False,
    view: bool = True,
) -> str:
    """Bind the spec's constants to the module's definitions; deadlock checking stays on.

    ``diagnose`` adds the generated invariants that name why a step failed; they cost an
    ENABLED evaluation each per state, so only a rejected trace's re-run uses them.
    ``view=False`` fingerprints whole states (a test's check that a replay is a chain).
    """
    bindings = [
        ("Requests", "TrRequests"),
        ("GpuBlocks", "TrGpuBlocks"),
        ("HostBlocks", "TrHostBlocks"),
        ("Keys", "TrKeys"),
        ("PageKeys", "TrPageKeys"),
        ("HostPoolBytes", "TrHostPoolBytes"),
        ("HostBlockBytes", "TrHostBlockBytes"),
        ("Ranks", "TrRanks"),
        ("Writer", "TrWriter"),
        ("Backing", "TrBacking"),
        ("Bug", "TrBug"),
        ("Imports", "TrImports"),
        ("Chunks", "TrChunks"),
        ("StagingSlots", "TrStagingSlots"),
        *ints.bindings(),
    ]
    names = [
        *(delta.cfg_name(n) for n in invariants),
        *([HANDOFF_INVARIANT] if handoff else []),
        *(diagnostic_invariants() if diagnose else []),
    ]
    return (
        "CONSTANTS\n"
        + "".join(f"    {c} <- {d}\n" for c, d in bindings)
        + "INIT TraceInit\nNEXT TraceNext\n"
        + (f"VIEW {VIEW}\n" if view else "")
        + "INVARIANTS\n"
        + "".join(f"    {n}\n" for n in names)
    )
