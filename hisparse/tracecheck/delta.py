"""The invariants a trace replay checks at what each step changed, not over the state.

The model configs check ``TypeOK``, ``NoDoubleOwnership``, ``RetiredUnreferenced`` and
``PublishedDataCorrect`` over every page and key; a replay of a long run has tens of
thousands of both, and checking every one in every state was 85 % of its time. Here
each is checked in the state after a step at the pages and keys that step can have
changed it for, and over every block as before (blocks are few and fixed by the pool).
Why that is the same check, step by step:

- The replay's first state (``Init``, or a window's recorded first state) gets the
  spec's whole invariant (``TrFull``), and TLC stops at the first state that breaks
  one, so in the state before any later step every invariant held.
- What a step changed is verified, not trusted: ``MatchPost`` makes every variable the
  step reports equal to its value before with the reported entries replaced, and every
  variable it does not report unchanged (``module.match_post``). So an entry of
  ``req``, ``loc``, ``prefix``, ``hostState`` or ``hostKey`` that the step does not
  name has its old value (``TrWrote(v)``: the names).
- A per-element part that reads only unchanged entries has its old value, true. Each
  definition below lists what its element reads and checks the elements where some of
  that changed.

``TrTrack`` keeps two facts the checks need about the state before: how many pages
each GPU location holds (``trOnGpu``, updated from the step's ``loc`` entries) and the
``hostKey`` entries the step overwrote (``trOldKey``). A trace's verdict is that of the
spec's invariants: same states, same first violation, same name (``spec_name``).
"""

from __future__ import annotations

# The invariants restated here, each as the spec defines it (tests check the text): the
# incremental check below relies on exactly these parts.
SHAPES: dict[str, str] = {
    "TypeOK": (
        "TypeOK ==\n"
        "    /\\ DOMAIN req = Requests /\\ DOMAIN loc = Pages /\\ DOMAIN prefix = Keys\n"
        "    /\\ DOMAIN imp = Requests /\\ DOMAIN pg = Pages\n"
        "    /\\ TypeOKAt(Requests, Pages, Keys)\n"
        "    /\\ TypeOKBlocks\n"
    ),
    "NoDoubleOwnership": "NoDoubleOwnership == NoDoubleOwnershipGpu /\\ NoDoubleOwnershipHost\n",
    "PublishedDataCorrect": (
        "PublishedDataCorrect == PublishedDataCorrectAt(Keys) /\\ PublishedDataCorrectPools\n"
    ),
    "RetiredUnreferenced": (
        "RetiredUnreferenced == RetiredUnreferencedAt(Pages) /\\ RetiredUnreferencedBlocks\n"
    ),
}

PREFIX = "TrDelta_"
AUX_VARS = ("trOnGpu", "trOldKey")


def cfg_name(invariant: str) -> str:
    """The name the replay's cfg checks for a spec invariant."""
    return PREFIX + invariant if invariant in SHAPES else invariant


def spec_name(name: str) -> str:
    """The spec invariant a name TLC reports stands for."""
    base = name.removeprefix(PREFIX)
    return base if base in SHAPES else name


TLA = r"""
\* ---- Invariants at what a step changed (hisparse/tracecheck/delta.py) ----
\* The entries of variable v that step e reports (those it may have changed).
TrWrites(e, v) == IF v \in DOMAIN e.post THEN TrArgs(e.post[v]) ELSE {}
\* The first state gets the spec's invariants whole; every later one is the state after
\* step TrLast, and TrWrote(v) the entries of v it may have changed (the others did not:
\* MatchPost).
TrFull == cursor = 1
TrLast == Traces[tr][cursor - 1]
TrWrote(v) == IF TrFull THEN {} ELSE TrWrites(TrLast, v)

\* The GPU block a location names, as a set (none for a host block or NoLoc).
TrGpuAt(l) == IF l[1] = "gpu" THEN {l[2]} ELSE {}
\* trOnGpu[b]: how many pages loc places on GPU block b (b in its domain when some did).
TrOnGpuInit ==
    LET G == {p \in Pages : loc[p][1] = "gpu"}
    IN [b \in {loc[p][2] : p \in G} |-> Cardinality({p \in G : loc[p][2] = b})] @@ <<>>
TrUse(b) == IF b \in DOMAIN trOnGpu THEN trOnGpu[b] ELSE 0
\* Step e moves only the pages it reports in loc: each leaves its old block's count and
\* joins its new one's. trOldKey: the hostKey entries e overwrites, as they were before.
TrTrack(e) ==
    /\ trOnGpu' =
          LET P == TrWrites(e, "loc")
              B == UNION {TrGpuAt(loc[p]) \cup TrGpuAt(loc'[p]) : p \in P}
          IN [b \in B |-> TrUse(b) - Cardinality({p \in P : loc[p] = <<"gpu", b>>})
                                   + Cardinality({p \in P : loc'[p] = <<"gpu", b>>})]
             @@ trOnGpu
    /\ trOldKey' = [h \in TrWrites(e, "hostKey") |-> hostKey[h]] @@ <<>>

\* TypeOK. Its req, imp, loc, pg and prefix conjuncts read one entry each, so they are
\* checked at the written entries (a request whose req or imp was written; a page whose
\* loc or pg was). Domains: each of the five is its value before with the written
\* entries replaced, so its domain stays Requests / Pages / Keys iff the written
\* arguments lie in it. The block- and rank-indexed conjuncts are checked whole.
TrDelta_TypeOK ==
    IF TrFull THEN TypeOK
    ELSE /\ TrWrote("req") \subseteq Requests /\ TrWrote("loc") \subseteq Pages
         /\ TrWrote("prefix") \subseteq Keys
         /\ TrWrote("imp") \subseteq Requests /\ TrWrote("pg") \subseteq Pages
         /\ TypeOKAt(TrWrote("req") \cup TrWrote("imp"), TrWrote("loc") \cup TrWrote("pg"),
                     TrWrote("prefix"))
         /\ TypeOKBlocks

\* NoDoubleOwnership. Its GPU part says no two pages share a GPU location: every count
\* trOnGpu[b] is at most 1. Only a page the step wrote can have joined a block, so only
\* the blocks the written pages now name can have gone above 1 (the others' counts
\* stayed or fell, and were at most 1 before). Its host part is checked whole.
TrDelta_NoDoubleOwnership ==
    IF TrFull THEN NoDoubleOwnership
    ELSE /\ \A b \in UNION {TrGpuAt(loc[p]) : p \in TrWrote("loc")} : trOnGpu[b] <= 1
         /\ NoDoubleOwnershipHost

\* RetiredUnreferenced. Its page part at page p reads loc[p] and req[PageReq(p)]: it is
\* checked at the written pages and at every page of a written request. Its block parts
\* are checked whole.
TrDelta_RetiredUnreferenced ==
    IF TrFull THEN RetiredUnreferenced
    ELSE /\ RetiredUnreferencedAt(TrWrote("loc") \cup UNION {PagesOf(r) : r \in TrWrote("req")})
         /\ RetiredUnreferencedBlocks

\* PublishedDataCorrect. Its key part at key k reads prefix[k] and hostState[h],
\* hostKey[h] for each h in prefix[k]. So k needs checking when prefix[k] was written, or
\* when some written block h is in prefix[k] with prefix[k] unwritten: then h was in it
\* before too, where the invariant held, so k was hostKey[h] before the step: trOldKey[h]
\* when the step wrote hostKey[h], else hostKey[h] now. Its pool part is checked whole.
TrDelta_PublishedDataCorrect ==
    IF TrFull THEN PublishedDataCorrect
    ELSE LET H == TrWrote("hostState") \cup TrWrote("hostKey")
             Was == {hostKey[h] : h \in H} \cup {trOldKey[h] : h \in DOMAIN trOldKey}
         IN /\ PublishedDataCorrectAt(TrWrote("prefix") \cup (Was \cap Keys))
            /\ PublishedDataCorrectPools
"""
