"""The invariants a trace replay checks at what each step changed, not over the state.

The model configs check ``TypeOK``, ``NoDoubleOwnership``, ``RetiredUnreferenced``,
``PublishedDataCorrect`` and the five P/D import invariants (``StagingBounded``,
``ImportPublishedComplete``, ``MirrorBeforeRead``, ``ImportTargetStable``,
``NoImportLeak``) over every page, key or imported request; a replay of a long run has
tens of thousands of pages and keys, and checking every one in every state was 85 % of
its time (the import invariants alone, passing over every page even in a run without
imports, cost 3 s of the 512-request trace's 15.6). Here
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

``TrTrack`` keeps facts the checks need: how many pages each GPU location holds
(``trOnGpu``, updated from the step's ``loc`` entries), the ``hostKey`` entries the step
overwrote (``trOldKey``), how many pages hold a staging slot (``trSlots``) or name each
host block as an import's destination (``trImpHost``), both from the step's ``pg``
entries, and the imports waiting for their mirror check (``trMirror``, from ``req`` and
``imp``). ``TrTrackersExact`` says each tracker is what it tracks; a test checks it over
a recorded P/D run, and that a slip in each update breaks it. A trace's verdict is that of the
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
    "StagingBounded": "StagingBounded == Cardinality(Slots) <= StagingSlots\n",
    "ImportPublishedComplete": (
        "ImportPublishedComplete == ImportLandedAt(Imports) /\\ ImportHostLeasedAt(Pages)\n"
    ),
    "MirrorBeforeRead": "MirrorBeforeRead == MirroredAt({x \\in Imports : MirrorPending(x)})\n",
    "ImportTargetStable": "ImportTargetStable == ImportTargetStableAt(Imports)\n",
    "NoImportLeak": "NoImportLeak == NoImportLeakAt(Pages) /\\ NoImportLeakBlocks\n",
}

PREFIX = "TrDelta_"
AUX_VARS = ("trOnGpu", "trOldKey", "trSlots", "trImpHost", "trMirror")
# Their values in a replay's first state (Init, or a window's recorded state).
AUX_INIT = (
    "trOnGpu = TrOnGpuInit /\\ trOldKey = <<>> /\\ trSlots = Cardinality(Slots)\n"
    "    /\\ trImpHost = TrImpHostInit /\\ trMirror = {x \\in Imports : MirrorPending(x)}"
)


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
\* The import counterparts. trSlots: how many pages hold a staging slot (Cardinality(Slots)).
\* trImpHost[h]: how many pages' pg names host block h (h in its domain when some did).
\* trMirror: the requests MirrorPending holds for. Each changes only at the entries the
\* step reports (pg; req and imp).
TrHostAt(l) == IF l[1] = "host" THEN {l[2]} ELSE {}
TrImpHostInit ==
    LET P == {p \in Pages : pg[p].host[1] = "host"}
    IN [h \in {pg[p].host[2] : p \in P} |-> Cardinality({p \in P : pg[p].host[2] = h})] @@ <<>>
TrImpUse(h) == IF h \in DOMAIN trImpHost THEN trImpHost[h] ELSE 0
TrTrackImports(e) ==
    LET P == TrWrites(e, "pg")
        R == (TrWrites(e, "req") \cup TrWrites(e, "imp")) \cap Imports
        B == UNION {TrHostAt(pg[p].host) \cup TrHostAt(pg'[p].host) : p \in P}
    IN /\ trSlots' = trSlots - Cardinality({p \in P : pg[p].slot})
                             + Cardinality({p \in P : pg'[p].slot})
       /\ trImpHost' =
             [h \in B |-> TrImpUse(h) - Cardinality({p \in P : pg[p].host = <<"host", h>>})
                                      + Cardinality({p \in P : pg'[p].host = <<"host", h>>})]
             @@ trImpHost
       /\ trMirror' = (trMirror \ R) \cup {x \in R : MirrorPending(x)'}

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
    /\ TrTrackImports(e)

\* StagingBounded: trSlots is Cardinality(Slots) in every state (TrTrackImports).
TrDelta_StagingBounded ==
    IF TrFull THEN StagingBounded ELSE trSlots <= StagingSlots

\* ImportPublishedComplete. Its request part at r reads imp[r], req[r] and pg at r's pages:
\* checked at the imports whose req or imp was written or one of whose pages' pg was. Its
\* page part at p reads pg[p] and the hostState of the block pg[p] names: checked at the
\* written pages, and at each written block h that an unwritten page names: such a page
\* named h before too, so it is counted in trImpHost[h], and its check is hostState[h]'s.
TrDelta_ImportPublishedComplete ==
    IF TrFull THEN ImportPublishedComplete
    ELSE LET R == TrWrote("req") \cup TrWrote("imp") \cup {PageReq(p) : p \in TrWrote("pg")}
         IN /\ ImportLandedAt(R \cap Imports)
            /\ ImportHostLeasedAt(TrWrote("pg"))
            /\ \A h \in TrWrote("hostState") : TrImpUse(h) > 0 => hostState[h] = "leased"

\* MirrorBeforeRead. Its element at r reads the GPU tables (through GpuOf), which many steps
\* write, so it is checked at every pending request: trMirror, the set MirrorPending holds
\* for (an import between its landing and its decoding: live work, not every import).
TrDelta_MirrorBeforeRead ==
    IF TrFull THEN MirrorBeforeRead ELSE MirroredAt(trMirror)

\* ImportTargetStable. Its element at r reads imp[r] and pg at r's pages.
TrDelta_ImportTargetStable ==
    IF TrFull THEN ImportTargetStable
    ELSE ImportTargetStableAt((TrWrote("imp") \cup {PageReq(p) : p \in TrWrote("pg")}) \cap Imports)

\* NoImportLeak. Its page part at p reads pg[p] and imp[PageReq(p)]: checked at the written
\* pages and at every page of a request whose imp was written. Its block part is checked
\* whole.
TrDelta_NoImportLeak ==
    IF TrFull THEN NoImportLeak
    ELSE /\ NoImportLeakAt(TrWrote("pg")
                           \cup UNION {PagesOf(r) : r \in TrWrote("imp") \cap Requests})
         /\ NoImportLeakBlocks

\* The trackers are what they track, in every state (not a replay invariant: it passes
\* over every page; tests/test_trace_delta.py checks it over recorded P/D runs).
TrTrackersExact ==
    /\ \A b \in GpuBlocks : TrUse(b) = Cardinality({p \in Pages : loc[p] = <<"gpu", b>>})
    /\ trSlots = Cardinality(Slots)
    /\ \A h \in HostBlocks :
          TrImpUse(h) = Cardinality({p \in Pages : pg[p].host = <<"host", h>>})
    /\ trMirror = {x \in Imports : MirrorPending(x)}
"""
