--------------------------- MODULE IndexerSuffix ---------------------------
(***************************************************************************)
(* The indexer suffix rule (companion of HiSparse.tla).                    *)
(*                                                                         *)
(* A DeepSeek-V3.2-style request has two cache groups: the sparse-MLA KV, *)
(* whose prefix hit HiSparse serves from its host tier (hostHit pages),    *)
(* and the indexer keys, a normal prefix-cacheable GPU group whose        *)
(* GPU-resident prefix hit is gpuHit pages, read densely every decode     *)
(* step. A generic OffloadingConnector holds indexer blocks in its own    *)
(* host store (held[b]: absent, storing, stored), filled and evicted      *)
(* concurrently by other requests' work.                                   *)
(*                                                                         *)
(* Decide applies the rule once for the arriving request: when the host   *)
(* hit extends beyond the GPU indexer hit, restore exactly the missing    *)
(* indexer suffix gpuHit+1..hostHit, capped at the host boundary, if every *)
(* block of it is stored; otherwise every group falls back to the prefix  *)
(* they share, Min(hostHit, gpuHit). Pages past the admitted prefix are    *)
(* recomputed by prefill. A block being restored is pinned: the store     *)
(* does not evict it.                                                     *)
(***************************************************************************)
EXTENDS Naturals, FiniteSets

CONSTANTS
    N,    \* pages (= blocks) of the request
    Bug   \* "none" or the name of an injected bug

Blocks == 1..N
Min(a, b) == IF a <= b THEN a ELSE b

VARIABLES
    hostHit,   \* HiSparse host prefix hit (MLA pages served from the host tier)
    gpuHit,    \* GPU-resident indexer prefix hit
    held,      \* the OffloadingConnector's store: block -> absent | storing | stored
    phase,     \* lookup -> admitted -> decoding
    admitMla,  \* admitted prefix of the MLA group
    admitIdx,  \* admitted prefix of the indexer group
    restoring, \* indexer blocks being restored into the GPU group
    racy,      \* of those: copied while their store was still in flight
    onGpu      \* indexer blocks whose keys are on the GPU, intact

vars == <<hostHit, gpuHit, held, phase, admitMla, admitIdx, restoring, racy, onGpu>>

States == {"absent", "storing", "stored"}

\* A block the rule may restore: stored (a racing restore also takes one being stored).
Restorable(b) ==
    IF Bug = "restore_races_store" THEN held[b] # "absent" ELSE held[b] = "stored"

\* The longest run of restorable blocks from gpuHit+1 (the uncapped restore's end).
RunEnd ==
    CHOOSE e \in gpuHit..N :
        /\ \A b \in (gpuHit + 1)..e : Restorable(b)
        /\ e = N \/ ~Restorable(e + 1)

Init ==
    /\ hostHit \in 0..N
    /\ gpuHit \in 0..N
    /\ held \in [Blocks -> States]
    /\ phase = "lookup"
    /\ admitMla = 0 /\ admitIdx = 0
    /\ restoring = {} /\ racy = {}
    /\ onGpu = 1..gpuHit

\* The OffloadingConnector's own work, at any time.
StoreStart(b) ==
    /\ held[b] = "absent"
    /\ held' = [held EXCEPT ![b] = "storing"]
    /\ UNCHANGED <<hostHit, gpuHit, phase, admitMla, admitIdx, restoring, racy, onGpu>>

StoreDone(b) ==
    /\ held[b] = "storing"
    /\ held' = [held EXCEPT ![b] = "stored"]
    /\ UNCHANGED <<hostHit, gpuHit, phase, admitMla, admitIdx, restoring, racy, onGpu>>

Evict(b) ==
    /\ held[b] = "stored"
    /\ b \notin restoring   \* a block being restored is pinned
    /\ held' = [held EXCEPT ![b] = "absent"]
    /\ UNCHANGED <<hostHit, gpuHit, phase, admitMla, admitIdx, restoring, racy, onGpu>>

\* The suffix rule, applied at admission.
Decide ==
    /\ phase = "lookup"
    /\ LET suffix == (gpuHit + 1)..hostHit
           whole == \A b \in suffix : Restorable(b)
           shared == Min(hostHit, gpuHit)
           restore == IF Bug = "restore_uncapped" /\ hostHit > gpuHit
                      THEN (gpuHit + 1)..RunEnd
                      ELSE IF whole \/ Bug = "no_fallback"
                           THEN {b \in suffix : Restorable(b)}
                           ELSE {}
           mla == IF whole \/ Bug = "no_fallback" \/ Bug = "fallback_mla_longer"
                  THEN hostHit ELSE shared
           idx == IF whole \/ Bug = "no_fallback" THEN hostHit ELSE shared
       IN /\ admitMla' = mla
          /\ admitIdx' = idx
          /\ restoring' = restore
          /\ racy' = {b \in restore : held[b] # "stored"}
    /\ phase' = "admitted"
    /\ UNCHANGED <<hostHit, gpuHit, held, onGpu>>

\* A restore completes: its block's keys are on the GPU, intact unless it was racy.
RestoreDone(b) ==
    /\ b \in restoring
    /\ restoring' = restoring \ {b}
    /\ onGpu' = IF b \in racy THEN onGpu ELSE onGpu \cup {b}
    /\ UNCHANGED <<hostHit, gpuHit, held, phase, admitMla, admitIdx, racy>>

\* Decode starts once every restore has landed; prefill computed the rest.
Decode ==
    /\ phase = "admitted"
    /\ restoring = {}
    /\ phase' = "decoding"
    /\ UNCHANGED <<hostHit, gpuHit, held, admitMla, admitIdx, restoring, racy, onGpu>>

Next ==
    \/ \E b \in Blocks : StoreStart(b) \/ StoreDone(b) \/ Evict(b) \/ RestoreDone(b)
    \/ Decide
    \/ Decode

Spec == Init /\ [][Next]_vars

-----------------------------------------------------------------------------
(* Invariants. *)

TypeOK ==
    /\ hostHit \in 0..N /\ gpuHit \in 0..N
    /\ held \in [Blocks -> States]
    /\ phase \in {"lookup", "admitted", "decoding"}
    /\ admitMla \in 0..N /\ admitIdx \in 0..N
    /\ restoring \subseteq Blocks /\ racy \subseteq Blocks
    /\ onGpu \subseteq Blocks

\* No decode step reads a page whose indexer keys are absent from the GPU (or were
\* copied from a block still being stored): the admitted prefix is all on the GPU.
IndexerKeysPresent ==
    phase = "decoding" => 1..admitIdx \subseteq onGpu

\* No group is admitted longer than another, and the MLA group only as long as the
\* host hit that serves it.
GroupsAgree ==
    phase # "lookup" => admitMla = admitIdx /\ admitMla <= hostHit

\* A restore copies only missing blocks of the admitted prefix: capped at the host
\* boundary, nothing already resident on the GPU.
RestoreExact ==
    restoring \subseteq (gpuHit + 1)..Min(admitIdx, hostHit)
=============================================================================
