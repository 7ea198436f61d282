------------------------------ MODULE HiSparse ------------------------------
(***************************************************************************)
(* The HiSparse lease/spill/publish protocol.                             *)
(*                                                                         *)
(* Two processes share nothing but two channels:                          *)
(*   - the scheduler (HiSparseCoordinator + the KV cache manager, HMA)    *)
(*     sends SparseKVPageTransfer commands down in kv_connector_metadata  *)
(*     (`down`);                                                           *)
(*   - the worker (HiSparseWorker) returns enqueued and completed         *)
(*     transfer IDs up in kv_connector_worker_meta (`up`).                *)
(*                                                                         *)
(* A transfer is identified by its destination host block: the            *)
(* destination lease is exclusive and is only released when the completed *)
(* ack has been consumed, so no two live transfers share a destination and *)
(* no stale ack can name a reused block (NoDoubleOwnership checks this).  *)
(*                                                                         *)
(* Data is modelled abstractly: a block holds the key (prefix identity)   *)
(* of the logical page whose bytes it contains, "empty", or "garbage"     *)
(* (bytes written by unrelated work after HMA reused the block).          *)
(* A GPU-to-host copy reads its source at its position in the worker's    *)
(* stream: WorkerEnqueue snapshots the source bytes, which is exactly why *)
(* HMA may reuse the block once the copy is enqueued and not before.      *)
(* HMA reuse is modelled in its worst case: a block handed back to HMA is *)
(* overwritten by unrelated work at once ("garbage"), and so is a host    *)
(* block handed back to the pool; any later read of it is caught.         *)
(*                                                                         *)
(* Retirement: an ended request that nothing references any more leaves  *)
(* the protocol state; its ID is free again, which the spec writes as     *)
(* req[r] = "new" (exactly its Init value), so the ID may be reused.      *)
(* Worker loss: the worker restarts or a metadata message is lost; the    *)
(* engine tells the coordinator, which recovers in the same step.         *)
(*                                                                         *)
(* Faulty channels. Engines retry steps and re-send messages, so each     *)
(* message may arrive twice, late (after later ones) or never, in both    *)
(* directions. Every connector metadata carries a per-rank sequence       *)
(* number, and so does every worker meta; both only grow (a restarted     *)
(* worker is told the next numbers in its restart handshake). A receiver  *)
(* applies the message it expects next, ignores one numbered below it (a  *)
(* known duplicate, or one overtaken by a loss: nothing changes) and      *)
(* refuses one numbered above it: a gap, reported to the engine, which     *)
(* runs the worker-loss path (WorkerLoss). The model abstracts the        *)
(* numbers to what the receivers can tell apart: `down` holds the fresh   *)
(* commands, `lost` marks an unnoticed gap on a rank's channels            *)
(* (LoseCommand, LoseMeta), and IgnoreReplay is a stale copy (numbered    *)
(* below the next number) of a command sent earlier arriving: ignored, a  *)
(* stuttering step, so no variable remembers the copies in flight. A late *)
(* message is a gap (the later one arrives first) and then a stale copy;  *)
(* a duplicated or late worker meta is ignored by the scheduler: a         *)
(* stuttering step of the spec, not written as an action.                  *)
(*                                                                         *)
(* Tensor parallelism: every rank of `Ranks` holds the same KV bytes and *)
(* runs its own worker: its own command channel, copy stream, acks and   *)
(* worker meta. The host cache is one logical pool with a view per rank, *)
(* backed privately (each rank writes its own copy of every host block)  *)
(* or by one shared allocation (only `Writer` copies; every other rank   *)
(* orders its reads after the writer's copy event). A transfer's source  *)
(* is released once every rank has acknowledged it as enqueued (for a    *)
(* reader rank of a shared pool: its reads ordered after the writer's    *)
(* event); its page is published once no rank's acknowledgement is      *)
(* still owed (`need`). With Ranks = {one rank} this is the single-worker *)
(* protocol exactly.                                                     *)
(*                                                                         *)
(* `Bug` names a deliberately injected defect ("none" normally); each one *)
(* must be caught by the invariant or property that hisparse.bugs names.  *)
(***************************************************************************)
EXTENDS Naturals, FiniteSets, Sequences

CONSTANTS
    Requests,        \* request identities
    GpuBlocks,       \* blocks of HMA's device pool (the same ids on every rank)
    HostBlocks,      \* host block identities the coordinator can name
    Keys,            \* prefix identities of logical pages (their contents)
    PageKeys,        \* [Requests -> Seq(Keys)]: the content of each logical page
    HostPoolBytes,   \* host_pool_gib, in abstract units
    HostBlockBytes,  \* bytes of one host block, same units
    Ranks,           \* tensor-parallel ranks, one worker each
    Writer,          \* with a shared host allocation, the one rank that copies
    Backing,         \* "private" (a host pool per rank) or "shared" (one for all)
    Bug              \* injected defect, "none" in a correct model

ASSUME HostBlockBytes > 0 /\ HostPoolBytes >= 0
ASSUME Writer \in Ranks /\ Backing \in {"private", "shared"}

\* P/D import (docs/pd-import.md). Definitions, not CONSTANTS, so a model without
\* imports binds nothing new: a model with imports (MC_pd) overrides them in its cfg.
\* Imports: the requests that arrive with prefill KV from a prefill engine.
\* Chunks: the chunks of one page (a transport READ moves one chunk).
\* StagingSlots: the decoder's staging pool, in slots of one page each.
Imports == {}
Chunks == {1}
StagingSlots == 1

\* A page is the pair <<r, i>> (request r's i-th page, 1-based); it is read and built
\* only through PageReq, PageIdx and PageAt. Trace validation binds these, Pages,
\* PagesOf, KeyOf and the sentinels below to integer identities in its cfg
\* (hisparse/tracecheck/ints.py): TLC looks a function up in O(1) only when its domain
\* is an integer interval, and linearly otherwise.
PageReq(p) == p[1]
PageIdx(p) == p[2]
PageAt(r, i) == <<r, i>>
Pages == UNION {{PageAt(r, i) : i \in 1..Len(PageKeys[r])} : r \in Requests}
PagesOf(r) == {PageAt(r, i) : i \in 1..Len(PageKeys[r])}
KeyOf(p) == PageKeys[PageReq(p)][PageIdx(p)]

\* The ranks that copy GPU-to-host, and so the physical host pools: every
\* rank with private backing, only the writer with a shared allocation.
Copiers == IF Backing = "shared" THEN {Writer} ELSE Ranks
\* The physical pool rank w reads.
Bank(w) == IF Backing = "shared" THEN Writer ELSE w
\* The ranks that read a pool another rank writes (none with private backing).
Readers == Ranks \ Copiers

\* Sentinels. Tuples keep every comparison between values of one shape.
NoPage == <<"nopage", 0>>
NoLoc == <<"nowhere", "nowhere">>
NoKey == "nokey"
Idle == "idle"
Empty == "empty"      \* bytes of a block nothing wrote
Garbage == "garbage"  \* bytes unrelated work wrote
Data == Keys \cup {Empty, Garbage}
NoSpill == [src |-> "none", page |-> NoPage, phase |-> "none", enq |-> {}, need |-> {}]
\* An import's state per request (the landing target, chosen once, and its phase) and
\* per page (its host source block, chunks at the destination, chunks in its staging
\* slot, whether it holds one); outside an import, these.
NoImp == [target |-> "none", phase |-> "none"]
NoPg == [host |-> NoLoc, landed |-> {}, staged |-> {}, slot |-> FALSE]
\* an import whose destinations are leased and not yet returned or published
LiveImport == {"landing", "landed", "failed"}

\* The realized pool is rounded down to whole host blocks.
HostCapacity == HostPoolBytes \div HostBlockBytes
\* What a buggy sizing computes: rounded up.
HostCapacityRoundedUp ==
    (HostPoolBytes + HostBlockBytes - 1) \div HostBlockBytes

Loc == {NoLoc} \cup {<<"gpu", g>> : g \in GpuBlocks}
               \cup {<<"host", h>> : h \in HostBlocks}
Transfers == [src : GpuBlocks, dst : HostBlocks]   \* SparseKVPageTransfer
\* An open transfer. `enq`: ranks whose enqueued ack was consumed. `need`:
\* ranks whose last ack is still owed (a copier's completed ack, a reader's
\* enqueued ack), or whose copy may still be running after a worker loss.
\* "abandoned": closed by a worker loss, its destination held until `need`
\* is empty.
Spills == [src : GpuBlocks, page : Pages, phase : {"sent", "enqueued", "abandoned"},
           enq : SUBSET Ranks, need : SUBSET Ranks]
WorkerMeta == [enq : SUBSET HostBlocks, done : SUBSET HostBlocks]
Imp == [target : {"none", "device", "host"},
        phase : {"none", "announced", "landing", "landed", "failed"}]
PgImp == [host : {NoLoc} \cup {<<"host", h>> : h \in HostBlocks}, landed : SUBSET Chunks,
          staged : SUBSET Chunks, slot : BOOLEAN]

VARIABLES
    \* scheduler: requests and the block table
    req,        \* [Requests -> {"new", "importing", "running", "finished", "aborted"}]
    loc,        \* [Pages -> Loc]: the block-table entry of each logical page
    \* scheduler: HMA's device pool and the coordinator's leases
    gpuOwner,   \* [GpuBlocks -> Pages \cup {NoPage}]: resident lease (NoPage = free in HMA)
    srcPin,     \* [GpuBlocks -> BOOLEAN]: source lease of a sent transfer
    \* scheduler: the coordinator's host blocks
    hostState,  \* [HostBlocks -> {"free", "leased", "valid"}]; "leased" = destination lease
    hostKey,    \* [HostBlocks -> Keys \cup {NoKey}]: the page a host block claims to hold
    prefix,     \* [Keys -> SUBSET HostBlocks]: prefix index, published pages only
    spill,      \* [HostBlocks -> Spills \cup {NoSpill}]: the coordinator's open transfers
    \* channels, one pair per rank
    down,       \* [Ranks -> SUBSET Transfers]: commands sent, not yet taken by the rank
    up,         \* [Ranks -> Seq(WorkerMeta)]: acks reported, not yet consumed
    lost,       \* [Ranks -> BOOLEAN]: a message to or from the rank was lost, not yet noticed
    \* workers
    copying,    \* [Ranks -> [HostBlocks -> Data \cup {Idle}]]: copies in each rank's stream
    waits,      \* [Ranks -> SUBSET HostBlocks]: reader streams ordered after the writer's copy
    reading,    \* [Ranks -> SUBSET HostBlocks]: blocks a reader's queued reads may still read
    wEnq,       \* [Ranks -> SUBSET HostBlocks]: enqueued, not yet reported
    wDone,      \* [Ranks -> SUBSET HostBlocks]: completed, not yet reported
    \* the bytes
    gpuData,    \* [GpuBlocks -> Data]: the same on every rank
    hostData,   \* [Copiers -> [HostBlocks -> Data]]: each physical host pool
    \* P/D import: the scheduler's target and phase per request (the phases "landed"
    \* and "failed" are the worker's ack in flight), the pages' destinations and the
    \* worker's chunks and staging slots
    imp,        \* [Requests -> Imp]
    pg          \* [Pages -> PgImp]

schedVars == <<req, loc, gpuOwner, srcPin, hostState, hostKey, prefix, spill>>
workerVars == <<copying, waits, reading, wEnq, wDone>>
netVars == <<lost>>
impVars == <<imp, pg>>
vars == <<req, loc, gpuOwner, srcPin, hostState, hostKey, prefix, spill,
          down, up, lost, copying, waits, reading, wEnq, wDone, gpuData, hostData, imp, pg>>

Init ==
    /\ req = [r \in Requests |-> "new"]
    /\ loc = [p \in Pages |-> NoLoc]
    /\ gpuOwner = [g \in GpuBlocks |-> NoPage]
    /\ srcPin = [g \in GpuBlocks |-> FALSE]
    /\ hostState = [h \in HostBlocks |-> "free"]
    /\ hostKey = [h \in HostBlocks |-> NoKey]
    /\ prefix = [k \in Keys |-> {}]
    /\ spill = [h \in HostBlocks |-> NoSpill]
    /\ down = [w \in Ranks |-> {}]
    /\ up = [w \in Ranks |-> <<>>]
    /\ lost = [w \in Ranks |-> FALSE]
    /\ copying = [w \in Ranks |-> [h \in HostBlocks |-> Idle]]
    /\ waits = [w \in Ranks |-> {}]
    /\ reading = [w \in Ranks |-> {}]
    /\ wEnq = [w \in Ranks |-> {}]
    /\ wDone = [w \in Ranks |-> {}]
    /\ gpuData = [g \in GpuBlocks |-> Empty]
    /\ hostData = [b \in Copiers |-> [h \in HostBlocks |-> Empty]]
    /\ imp = [r \in Requests |-> NoImp]
    /\ pg = [p \in Pages |-> NoPg]

-----------------------------------------------------------------------------
(* Derived views used by actions and invariants. *)

FreeGpu == {g \in GpuBlocks : gpuOwner[g] = NoPage}
HostInUse == {h \in HostBlocks : hostState[h] # "free"}
PagesOn(l) == {p \in Pages : loc[p] = l}

\* Longest prefix of r's pages whose keys are published on the host.
HitLen(r) ==
    CHOOSE m \in 0..Len(PageKeys[r]) :
        /\ \A i \in 1..m : prefix[PageKeys[r][i]] # {}
        /\ m = Len(PageKeys[r]) \/ prefix[PageKeys[r][m + 1]] = {}

\* The host blocks some protocol artifact still in flight names. As a set, built once
\* per state in O(ranks x (blocks + artifacts)), so an invariant over every host block
\* tests membership instead of scanning the channels per block: for h \in HostBlocks,
\* h \in InFlightBlocks <=> on some rank a command in `down` has destination h, or a
\* copy into h is in the stream, or an unreported or reported ack names h; or a
\* transfer into h is open (one set term per case).
InFlightBlocks ==
    {h \in HostBlocks : spill[h] # NoSpill \/ \E w \in Ranks : copying[w][h] # Idle}
    \cup UNION {{t.dst : t \in down[w]} \cup wEnq[w] \cup wDone[w]
                \cup UNION {up[w][i].enq \cup up[w][i].done : i \in 1..Len(up[w])}
                : w \in Ranks}

\* Some protocol artifact still names a page of request r (an import in flight holds
\* its destinations).
Referenced(r) ==
    \/ imp[r].phase \in LiveImport
    \/ \E p \in PagesOf(r) : loc[p] # NoLoc
    \/ \E g \in GpuBlocks : gpuOwner[g] \in PagesOf(r)
    \/ \E h \in HostBlocks : spill[h].page \in PagesOf(r)

\* The bytes rank w's reads of host block h see. A copy into the pool w
\* reads is seen once it is ordered before the read: always for the rank's
\* own stream; for a reader of a shared pool only through `waits`. An
\* unordered read sees the block as it stood before the copy.
StreamHostData(w, h) ==
    LET c == copying[Bank(w)][h] IN
    IF c # Idle /\ (Bank(w) = w \/ h \in waits[w]) THEN c ELSE hostData[Bank(w)][h]

\* f with the entries at S (a subset of DOMAIN f) replaced by V's, for V a function on S:
\* the value [x \in DOMAIN f |-> IF x \in S THEN V[x] ELSE f[x]], built as one EXCEPT
\* per element of S. TLC evaluates a function constructor at every argument (every page
\* or key) and keeps the result as a function it looks up linearly; EXCEPT copies f's
\* values and keeps its representation (a sequence stays one: O(1) lookups).
RECURSIVE SetAt(_, _, _)
SetAt(f, S, V) ==
    IF S = {} THEN f
    ELSE LET x == CHOOSE y \in S : TRUE
         IN SetAt([f EXCEPT ![x] = V[x]], S \ {x}, V)

\* Every physical pool, with the given blocks overwritten by unrelated work.
Scribble(D) == [b \in Copiers |-> [h \in HostBlocks |->
                    IF h \in D THEN Garbage ELSE hostData[b][h]]]

-----------------------------------------------------------------------------
(* Scheduler actions. *)

\* A request arrives: published host pages serve a prefix of its longest
\* prefix hit (the whole hit, or less when the scheduler caps it: the indexer
\* suffix rule's fallback, tla/IndexerSuffix.tla); every other page gets a
\* free GPU block that prefill writes. `hosts` and `blocks` (sequences) are
\* the choice: the hit's host copies, then the GPU blocks of the remaining
\* pages in order. Arrive(r) chooses them freely; trace validation passes
\* the ones an implementation reported.
\* The hit length m, r's pages, the candidate blocks and the used ones are each bound
\* once with \E over a one-element set: TLC expands an action-level LET name at every
\* use, so as LET names they were recomputed per page and per block (see MetaConsumed).
ArriveWith(r, hosts, blocks) ==
    /\ req[r] = "new"
    /\ r \notin Imports   \* an imported request comes through ImportArrive
    /\ Len(hosts) <= HitLen(r)
    /\ \E m \in {Len(hosts)}, Mine \in {PagesOf(r)},
          Cand \in {IF Bug = "double_allocation" THEN GpuBlocks ELSE FreeGpu} :
       LET n == Len(PageKeys[r])
           At(i) == IF i <= m THEN <<"host", hosts[i]>> ELSE <<"gpu", blocks[i - m]>>
           Holder(g) == CHOOSE j \in 1..(n - m) : blocks[j] = g
       IN /\ Len(hosts) = m /\ Len(blocks) = n - m
          /\ \A i \in 1..m : hosts[i] \in prefix[PageKeys[r][i]]
          /\ \A j \in 1..(n - m) : blocks[j] \in Cand
          /\ \E Used \in {{blocks[j] : j \in 1..(n - m)}} :
             /\ Cardinality(Used) = n - m
             /\ req' = [req EXCEPT ![r] = "running"]
             /\ loc' = SetAt(loc, Mine, [p \in Mine |-> At(PageIdx(p))])
             /\ gpuOwner' = [g \in GpuBlocks |->
                                IF g \in Used THEN PageAt(r, m + Holder(g)) ELSE gpuOwner[g]]
             /\ gpuData' = [g \in GpuBlocks |->
                               IF g \in Used THEN PageKeys[r][m + Holder(g)] ELSE gpuData[g]]
    /\ UNCHANGED <<impVars, srcPin, hostState, hostKey, prefix, spill, down, up, netVars,
                   workerVars, hostData>>

Arrive(r) ==
    \E m \in 0..HitLen(r) :
        \E hosts \in [1..m -> HostBlocks], blocks \in [1..(Len(PageKeys[r]) - m) -> GpuBlocks] :
            ArriveWith(r, hosts, blocks)

\* Spill a resident page: pin the source and destination leases, send the
\* SparseKVPageTransfer down to every rank.
StartSpill(p, h) ==
    /\ req[PageReq(p)] = "running"
    /\ loc[p][1] = "gpu"
    /\ hostState[h] = "free"
    /\ Cardinality(HostInUse) <
          (IF Bug = "round_up_pool" THEN HostCapacityRoundedUp ELSE HostCapacity)
    /\ LET g == loc[p][2] IN
        /\ ~srcPin[g]
        /\ hostState' = [hostState EXCEPT ![h] = "leased"]
        /\ hostKey' = [hostKey EXCEPT ![h] = KeyOf(p)]
        /\ spill' = [spill EXCEPT ![h] = [src |-> g, page |-> p, phase |-> "sent",
                                          enq |-> {}, need |-> Ranks]]
        /\ down' = [w \in Ranks |-> down[w] \cup {[src |-> g, dst |-> h]}]
        /\ IF Bug = "release_source_at_send"
           THEN /\ loc' = [loc EXCEPT ![p] = <<"host", h>>]
                /\ gpuOwner' = [gpuOwner EXCEPT ![g] = NoPage]
                /\ gpuData' = [gpuData EXCEPT ![g] = Garbage]
                /\ UNCHANGED srcPin
           ELSE /\ srcPin' = [srcPin EXCEPT ![g] = TRUE]
                /\ UNCHANGED <<loc, gpuOwner, gpuData>>
    /\ UNCHANGED <<impVars, req, prefix, up, netVars, workerVars, hostData>>

\* The effects of enqueued acks: the transfers of E are enqueued on every
\* rank, so their block-table entries move to the host and their phase
\* advances; the sources of R (normally E) go back to HMA with their pins.
\* Stream order on every rank makes the reuse safe.
\* (The pages that move: a page p with \E h \in E : s[h].page = p whose request runs.)
AfterEnqueued(E, R, s) ==
    LET Src(g) == \E h \in R : s[h].src = g
        Moved == {p \in {s[h].page : h \in E} \cap Pages : req[PageReq(p)] = "running"}
        Dst(p) == CHOOSE h \in E : s[h].page = p
    IN [loc |-> SetAt(loc, Moved, [p \in Moved |->
                   IF Bug = "host_id_as_gpu_index" THEN <<"gpu", Dst(p)>>
                   ELSE <<"host", Dst(p)>>]),
        gpuOwner |-> [g \in GpuBlocks |-> IF Src(g) THEN NoPage ELSE gpuOwner[g]],
        gpuData |-> [g \in GpuBlocks |-> IF Src(g) THEN Garbage ELSE gpuData[g]],
        srcPin |-> [g \in GpuBlocks |->
                      IF Src(g) /\ Bug # "enqueued_ack_keeps_pin" THEN FALSE
                      ELSE srcPin[g]],
        spill |-> [h \in HostBlocks |->
                     IF h \in E THEN [s[h] EXCEPT !.phase = "enqueued"] ELSE s[h]]]

\* What consuming rank w's next worker meta makes of the scheduler's state:
\* enqueued IDs first, then completed IDs. A transfer no rank owes an ack for
\* any more closes: a completed one publishes its host page (valid + prefix
\* index) and releases the destination lease; an aborted or abandoned one
\* frees it instead. The new values come back as one record, a field per
\* variable, so the action below evaluates this LET once per step: TLC
\* re-evaluates a LET name at every use when the LET encloses primed
\* variables, and these names use one another (cost multiplied per level).
MetaConsumed(w) ==
    LET m == Head(up[w])
        Acked == {h \in m.enq : spill[h] # NoSpill}
        E0 == {h \in Acked : spill[h].phase = "sent"}
        \* a reader's enqueued ack is its last: its reads are ordered
        s1 == [h \in HostBlocks |->
                 IF h \notin Acked THEN spill[h]
                 ELSE [spill[h] EXCEPT
                         !.enq = IF h \in E0 THEN @ \cup {w} ELSE @,
                         !.need = IF w \in Copiers THEN @ ELSE @ \ {w}]]
        E == {h \in E0 : s1[h].enq = Ranks}
        R == IF Bug = "release_source_at_first_enqueued" THEN E0 ELSE E
        a == AfterEnqueued(E, R, s1)
        \* the buggy order handles completions first and drops those it
        \* cannot match to an enqueued transfer
        D == IF Bug = "batched_done_before_enqueued"
             THEN {h \in m.done : spill[h].phase = "enqueued"}
             ELSE {h \in m.done : spill[h] # NoSpill}
        s2 == [h \in HostBlocks |->
                 IF h \in D THEN [a.spill[h] EXCEPT !.need = @ \ {w}] ELSE a.spill[h]]
        Early(h) == \/ Bug = "publish_after_one_rank_done"
                       /\ req[PageReq(s2[h].page)] # "aborted" /\ s2[h].phase = "enqueued"
                    \/ Bug = "abort_frees_after_one_rank_done"
                       /\ req[PageReq(s2[h].page)] = "aborted"
        Close == {h \in Acked \cup D : /\ s2[h].phase # "sent"
                                       /\ s2[h].need = {} \/ (h \in D /\ Early(h))}
        Publish == {h \in Close : /\ req[PageReq(s2[h].page)] # "aborted"
                                  /\ s2[h].phase = "enqueued"}
        PublishEarly == IF Bug = "publish_at_enqueued" THEN E ELSE {}
        Valid == Publish \cup PublishEarly
        Free == Close \ Valid
    IN [loc |-> a.loc, gpuOwner |-> a.gpuOwner, gpuData |-> a.gpuData, srcPin |-> a.srcPin,
        spill |-> [h \in HostBlocks |-> IF h \in Close THEN NoSpill ELSE s2[h]],
        hostState |-> [h \in HostBlocks |->
                         IF h \in Valid THEN "valid"
                         ELSE IF h \in Free THEN "free"
                         ELSE hostState[h]],
        hostKey |-> [h \in HostBlocks |-> IF h \in Free THEN NoKey ELSE hostKey[h]],
        \* (only the keys of Valid blocks gain a block: SetAt over them)
        prefix |-> LET K == {hostKey[h] : h \in Valid} \cap Keys
                   IN SetAt(prefix, K, [k \in K |-> prefix[k] \cup {h \in Valid : hostKey[h] = k}]),
        hostData |-> Scribble(Free)]

\* Consume rank w's next worker meta (MetaConsumed). `n` is bound by \E over a
\* one-element set, TLC's way to evaluate an expression once inside an action.
ConsumeMeta(w) ==
    /\ up[w] # <<>>
    /\ ~lost[w]   \* after a gap the scheduler refuses the rank's later metas
    /\ \E n \in {MetaConsumed(w)} :
          /\ loc' = n.loc
          /\ gpuOwner' = n.gpuOwner
          /\ gpuData' = n.gpuData
          /\ srcPin' = n.srcPin
          /\ spill' = n.spill
          /\ hostState' = n.hostState
          /\ hostKey' = n.hostKey
          /\ prefix' = n.prefix
          /\ hostData' = n.hostData
    /\ up' = [up EXCEPT ![w] = Tail(@)]
    /\ UNCHANGED <<impVars, req, down, netVars, workerVars>>

\* A request ends. Its block-table entries go; unpinned resident blocks go
\* back to HMA; pinned ones wait for their enqueued acks; an importing request's
\* destinations wait for the worker's ack of its abort (FailImport returns them).
EndRequest(r, how) ==
    /\ req' = [req EXCEPT ![r] = how]
    /\ \E Mine \in {PagesOf(r)} :  \* bound once, as in ArriveWith
       /\ loc' = SetAt(loc, Mine, [p \in Mine |-> NoLoc])
       /\ \E Freed \in {IF how = "aborted" /\ Bug = "abort_keeps_resident_blocks" THEN {}
                        ELSE IF req[r] = "importing" THEN {}
                        ELSE {g \in GpuBlocks : gpuOwner[g] \in Mine /\ ~srcPin[g]}} :
          /\ gpuOwner' = [g \in GpuBlocks |-> IF g \in Freed THEN NoPage ELSE gpuOwner[g]]
          /\ gpuData' = [g \in GpuBlocks |-> IF g \in Freed THEN Garbage ELSE gpuData[g]]

Finish(r) ==
    /\ req[r] = "running"
    /\ EndRequest(r, "finished")
    /\ UNCHANGED <<impVars, srcPin, hostState, hostKey, prefix, spill, down, up, netVars,
                   workerVars, hostData>>

\* Aborts may come at any moment, also while the request's copies or its import are
\* in flight (the import's abort goes to the worker, whose ImportError acks it).
Abort(r) ==
    /\ req[r] \in {"new", "importing", "running"}
    /\ EndRequest(r, "aborted")
    /\ IF Bug = "abort_frees_inflight_host"
       THEN LET Mine == {h \in HostBlocks : spill[h].page \in PagesOf(r)} IN
            /\ hostState' = [h \in HostBlocks |-> IF h \in Mine THEN "free" ELSE hostState[h]]
            /\ hostKey' = [h \in HostBlocks |-> IF h \in Mine THEN NoKey ELSE hostKey[h]]
            /\ spill' = [h \in HostBlocks |-> IF h \in Mine THEN NoSpill ELSE spill[h]]
       ELSE UNCHANGED <<hostState, hostKey, spill>>
    /\ UNCHANGED <<impVars, srcPin, prefix, down, up, netVars, workerVars, hostData>>

\* Drop a published host page nobody references (host-pool pressure).
EvictHost(h) ==
    /\ hostState[h] = "valid"
    /\ Bug = "evict_referenced_host" \/ PagesOn(<<"host", h>>) = {}
    /\ hostState' = [hostState EXCEPT ![h] = "free"]
    /\ hostKey' = [hostKey EXCEPT ![h] = NoKey]
    /\ prefix' = IF Bug = "evict_keeps_index" THEN prefix
                 ELSE [prefix EXCEPT ![hostKey[h]] = @ \ {h}]
    /\ hostData' = Scribble({h})
    /\ UNCHANGED <<impVars, req, loc, gpuOwner, srcPin, spill, down, up, netVars,
                   workerVars, gpuData>>

\* An ended request that nothing references leaves the protocol state: its
\* ID is free again (the Init value), and may be declared anew.
Retire(r) ==
    /\ req[r] \in {"finished", "aborted"}
    /\ IF Bug = "retire_inflight"
       THEN \A p \in PagesOf(r) : loc[p] = NoLoc
       ELSE ~Referenced(r)
    /\ Bug = "retire_waits_for_host_pages" =>
          \A h \in HostBlocks : hostKey[h] \notin {KeyOf(p) : p \in PagesOf(r)}
    /\ req' = [req EXCEPT ![r] = "new"]
    /\ imp' = [imp EXCEPT ![r] = NoImp]
    /\ pg' = SetAt(pg, PagesOf(r), [p \in PagesOf(r) |-> NoPg])
    /\ UNCHANGED <<loc, gpuOwner, srcPin, hostState, hostKey, prefix, spill,
                   down, up, netVars, workerVars, gpuData, hostData>>

-----------------------------------------------------------------------------
(* P/D import (docs/pd-import.md): a request's prefill KV arrives from a prefill  *)
(* engine. The scheduler chooses the landing target once, leases the            *)
(* destinations, and publishes on the worker's done ack; the worker moves the   *)
(* bytes chunk by chunk through its bounded staging pool. One rank (ASSUME).    *)

ASSUME Imports \subseteq Requests /\ (Imports # {} => Cardinality(Ranks) = 1)

\* The pages a decode step needs resident (the final page: the one writable page).
Mirrored(p) == PageIdx(p) = Len(PageKeys[PageReq(p)])
\* The GPU block an importing page holds (its destination, or its mirror).
GpuOf(p) == CHOOSE g \in GpuBlocks : gpuOwner[g] = p
\* The admission calculation: every page fits the free GPU pool; or the host-backed
\* footprint (the mirrored page's GPU block, a host block per page) fits.
DeviceFits(r) == Len(PageKeys[r]) <= Cardinality(FreeGpu)
HostFits(r) == /\ 1 <= Cardinality(FreeGpu)
               /\ Cardinality(HostInUse) + Len(PageKeys[r]) <= HostCapacity
TargetFor(r) == IF DeviceFits(r) THEN "device" ELSE "host"
Slots == {p \in Pages : pg[p].slot}
\* an import's chunks are all at the destination and its slot is back
PageDone(p) == pg[p].landed = Chunks /\ ~pg[p].slot

\* r arrives with its prefill KV announced: its pages and their keys (PageKeys[r]).
ImportArrive(r) ==
    /\ r \in Imports
    /\ req[r] = "new"
    /\ imp[r].phase = "none"
    /\ imp' = [imp EXCEPT ![r].phase = "announced"]
    /\ UNCHANGED <<pg, schedVars, down, up, netVars, workerVars, gpuData, hostData>>

\* The landing target, chosen once (at the first admission attempt) from the
\* admission calculation; kept across every retry.
ChooseTarget(r) ==
    /\ req[r] = "new"
    /\ imp[r].phase = "announced"
    /\ imp[r].target = "none"
    /\ imp' = [imp EXCEPT ![r].target = TargetFor(r)]
    /\ UNCHANGED <<pg, schedVars, down, up, netVars, workerVars, gpuData, hostData>>

\* The chosen target's destinations fit: lease them and send the ImportCommand.
\* Device: a GPU block per page. Host: a host block per page (leased, claiming the
\* page's key, not published) and the mirrored page's GPU block. Otherwise the
\* request waits (this action is not enabled) and retries with the same target.
\* `blocks` and `hosts` (sequences) are the choice: for the device target a GPU block
\* per page and no host block; for the host target the mirrored final page's GPU block
\* and a host block per page. AdmitImport(r) chooses them freely; trace validation
\* passes the ones an implementation reported (as ArriveWith: TLC would otherwise
\* enumerate every choice, |free blocks| ^ pages of them).
AdmitImportWith(r, blocks, hosts) ==
    /\ req[r] = "new"
    /\ imp[r].phase = "announced"
    /\ imp[r].target # "none"
    /\ \E t \in {IF Bug = "retarget_on_retry" THEN TargetFor(r) ELSE imp[r].target},
          Mine \in {PagesOf(r)} :
       LET n == Len(PageKeys[r]) IN
       /\ IF t = "device"
          THEN /\ DeviceFits(r)
               /\ Len(blocks) = n /\ Len(hosts) = 0
               /\ \A i \in 1..n : blocks[i] \in FreeGpu
               /\ Cardinality({blocks[i] : i \in 1..n}) = n
               /\ gpuOwner' = [g \in GpuBlocks |->
                                 IF \E i \in 1..n : blocks[i] = g
                                 THEN PageAt(r, CHOOSE i \in 1..n : blocks[i] = g)
                                 ELSE gpuOwner[g]]
               /\ UNCHANGED <<hostState, hostKey, pg>>
          ELSE /\ HostFits(r)
               /\ Len(blocks) = 1 /\ Len(hosts) = n
               /\ blocks[1] \in FreeGpu
               /\ \A i \in 1..n : hosts[i] \in HostBlocks /\ hostState[hosts[i]] = "free"
               /\ Cardinality({hosts[i] : i \in 1..n}) = n
               /\ gpuOwner' = [gpuOwner EXCEPT ![blocks[1]] = PageAt(r, n)]
               /\ hostState' = [h \in HostBlocks |->
                                  IF \E i \in 1..n : hosts[i] = h THEN "leased"
                                  ELSE hostState[h]]
               /\ hostKey' = [h \in HostBlocks |->
                                IF \E i \in 1..n : hosts[i] = h
                                THEN PageKeys[r][CHOOSE i \in 1..n : hosts[i] = h]
                                ELSE hostKey[h]]
               /\ pg' = SetAt(pg, Mine, [p \in Mine |->
                           [NoPg EXCEPT !.host = <<"host", hosts[PageIdx(p)]>>]])
    /\ req' = [req EXCEPT ![r] = "importing"]
    /\ imp' = [imp EXCEPT ![r].phase = "landing"]
    /\ UNCHANGED <<loc, srcPin, prefix, spill, down, up, netVars, workerVars, gpuData,
                   hostData>>

AdmitImport(r) ==
    LET n == Len(PageKeys[r]) IN
    \/ \E blocks \in [1..n -> FreeGpu] : AdmitImportWith(r, blocks, <<>>)
    \/ \E g \in FreeGpu, hosts \in [1..n -> {h \in HostBlocks : hostState[h] = "free"}] :
          AdmitImportWith(r, <<g>>, hosts)

\* The worker leases a staging slot for a host-target page; none is left: refused.
LeaseStaging(p) ==
    /\ imp[PageReq(p)].phase = "landing"
    /\ imp[PageReq(p)].target = "host"
    /\ ~pg[p].slot
    /\ pg[p].landed # Chunks
    /\ Bug = "staging_unbounded" \/ Cardinality(Slots) < StagingSlots
    /\ pg' = [pg EXCEPT ![p].slot = TRUE]
    /\ UNCHANGED <<imp, schedVars, down, up, netVars, workerVars, gpuData, hostData>>

\* Chunk c of page p lands: in its staging slot (host), or in its GPU page (device),
\* whose bytes are the page's only once every chunk is there.
LandChunk(p, c) ==
    /\ imp[PageReq(p)].phase = "landing"
    /\ IF imp[PageReq(p)].target = "host"
       THEN /\ pg[p].slot
            /\ c \notin pg[p].staged
            /\ pg' = [pg EXCEPT ![p].staged = @ \cup {c}]
            /\ UNCHANGED gpuData
       ELSE /\ c \notin pg[p].landed
            /\ pg' = [pg EXCEPT ![p].landed = @ \cup {c}]
            /\ gpuData' = [gpuData EXCEPT ![GpuOf(p)] =
                              IF pg[p].landed \cup {c} = Chunks THEN KeyOf(p) ELSE Garbage]
    /\ UNCHANGED <<imp, schedVars, down, up, netVars, workerVars, hostData>>

\* The staged chunks are copied into the page's host block (its bytes are the
\* page's only once every chunk was staged).
CopyToHost(p) ==
    /\ imp[PageReq(p)].phase = "landing"
    /\ pg[p].slot
    /\ pg[p].staged # pg[p].landed
    /\ pg' = [pg EXCEPT ![p].landed = pg[p].staged]
    /\ hostData' = [b \in Copiers |-> [hostData[b] EXCEPT ![pg[p].host[2]] =
                       IF pg[p].staged = Chunks THEN KeyOf(p) ELSE Garbage]]
    /\ UNCHANGED <<imp, schedVars, down, up, netVars, workerVars, gpuData>>

\* A page needed immediately, complete in staging, is copied into its resident GPU block.
MirrorPage(p) ==
    /\ imp[PageReq(p)].phase = "landing"
    /\ imp[PageReq(p)].target = "host"
    /\ Mirrored(p)
    /\ pg[p].slot
    /\ pg[p].staged = Chunks
    /\ gpuData[GpuOf(p)] # KeyOf(p)
    /\ gpuData' = [gpuData EXCEPT ![GpuOf(p)] = KeyOf(p)]
    /\ UNCHANGED <<impVars, schedVars, down, up, netVars, workerVars, hostData>>

\* The slot goes back once every chunk is in the host block and the mirror ran.
ReleaseStaging(p) ==
    /\ imp[PageReq(p)].phase = "landing"
    /\ pg[p].slot
    /\ pg[p].landed = Chunks
    /\ IF Bug = "release_before_mirror" \/ ~Mirrored(p) THEN TRUE
       ELSE gpuData[GpuOf(p)] = KeyOf(p)
    /\ pg' = [pg EXCEPT ![p].slot = FALSE, ![p].staged = {}]
    /\ UNCHANGED <<imp, schedVars, down, up, netVars, workerVars, gpuData, hostData>>

\* Every page landed and no slot is held: the done ack goes up (imports_done).
ReportImport(r) ==
    /\ imp[r].phase = "landing"
    /\ Bug # "import_done_unreported"
    /\ IF Bug = "report_partial_page"
       THEN /\ \A p \in PagesOf(r) : pg[p].landed # {}
            /\ pg' = [p \in Pages |-> IF PageReq(p) = r
                                      THEN [pg[p] EXCEPT !.slot = FALSE, !.staged = {}]
                                      ELSE pg[p]]
       ELSE /\ \A p \in PagesOf(r) : PageDone(p)
            /\ UNCHANGED pg
    /\ imp' = [imp EXCEPT ![r].phase = "landed"]
    /\ UNCHANGED <<schedVars, down, up, netVars, workerVars, gpuData, hostData>>

\* The transport fails (NIXL error, the prefiller gone, an announcement refused) or
\* the import's abort reaches the worker: its slots and staged chunks go, the failed
\* ack goes up (imports_failed).
ImportError(r) ==
    /\ imp[r].phase = "landing"
    /\ imp' = [imp EXCEPT ![r].phase = "failed"]
    /\ pg' = SetAt(pg, PagesOf(r), [p \in PagesOf(r) |->
                                      [pg[p] EXCEPT !.slot = FALSE, !.staged = {}]])
    /\ UNCHANGED <<schedVars, down, up, netVars, workerVars, gpuData, hostData>>

\* The done ack: the host pages become valid and are published (prefix-indexed),
\* the block table names every page (the mirrored one at its resident block), and
\* the request decodes.
CompleteImport(r) ==
    /\ imp[r].phase = "landed"
    /\ req[r] = "importing"
    /\ \E Mine \in {PagesOf(r)} :
       \E Hosts \in {{pg[p].host[2] : p \in {q \in Mine : pg[q].host # NoLoc}}} :
       /\ loc' = SetAt(loc, Mine, [p \in Mine |->
                    IF pg[p].host = NoLoc \/ Mirrored(p) THEN <<"gpu", GpuOf(p)>>
                    ELSE pg[p].host])
       /\ hostState' = [h \in HostBlocks |-> IF h \in Hosts THEN "valid" ELSE hostState[h]]
       \* only the published blocks' keys gain a block (the others' union adds nothing)
       /\ prefix' = LET K == {hostKey[h] : h \in Hosts} \cap Keys
                    IN SetAt(prefix, K, [k \in K |-> prefix[k] \cup {h \in Hosts : hostKey[h] = k}])
       /\ pg' = SetAt(pg, Mine, [p \in Mine |-> [pg[p] EXCEPT !.host = NoLoc]])
    /\ req' = [req EXCEPT ![r] = "running"]
    /\ imp' = [imp EXCEPT ![r].phase = "none"]
    /\ UNCHANGED <<gpuOwner, srcPin, hostKey, spill, down, up, netVars, workerVars, gpuData,
                   hostData>>

\* The failed ack, or a done ack of an aborted request: nothing is published; every
\* host block and GPU block of the import goes back; the request ends aborted.
FailImport(r) ==
    /\ \/ imp[r].phase = "failed"
       \/ imp[r].phase = "landed" /\ req[r] = "aborted"
    /\ \E Mine \in {PagesOf(r)} :
       \E Hosts \in {{pg[p].host[2] : p \in {q \in Mine : pg[q].host # NoLoc}}},
          Gpus \in {{g \in GpuBlocks : gpuOwner[g] \in Mine}} :
       /\ gpuOwner' = [g \in GpuBlocks |-> IF g \in Gpus THEN NoPage ELSE gpuOwner[g]]
       /\ gpuData' = [g \in GpuBlocks |-> IF g \in Gpus THEN Garbage ELSE gpuData[g]]
       /\ IF Bug = "fail_keeps_host_blocks"
          THEN UNCHANGED <<hostState, hostKey, hostData>>
          ELSE /\ hostState' = [h \in HostBlocks |-> IF h \in Hosts THEN "free" ELSE hostState[h]]
               /\ hostKey' = [h \in HostBlocks |-> IF h \in Hosts THEN NoKey ELSE hostKey[h]]
               /\ hostData' = Scribble(Hosts)
       /\ pg' = SetAt(pg, Mine, [p \in Mine |->
                   IF Bug = "fail_keeps_host_blocks" THEN [NoPg EXCEPT !.host = pg[p].host]
                   ELSE NoPg])
    /\ req' = [req EXCEPT ![r] = "aborted"]
    /\ imp' = [imp EXCEPT ![r].phase = "none"]
    /\ UNCHANGED <<loc, srcPin, prefix, spill, down, up, netVars, workerVars>>

-----------------------------------------------------------------------------
(* Worker actions, each on one rank. *)

\* Rank w takes a command. A copier enqueues its GPU-to-host copy, which
\* carries the source bytes as they stand at its stream position. A reader
\* of a shared pool copies nothing: it orders its stream after the writer's
\* copy event, which exists once the writer has taken the command.
\* After a gap (`lost`) the worker refuses every later command: the gap goes
\* through the worker-loss path.
WorkerEnqueue(w, t) ==
    /\ t \in down[w]
    /\ ~lost[w] \/ Bug = "worker_skips_gap"
    /\ down' = [down EXCEPT ![w] = @ \ {t}]
    /\ lost' = IF Bug = "worker_skips_gap" THEN [lost EXCEPT ![w] = FALSE] ELSE lost
    /\ wEnq' = [wEnq EXCEPT ![w] = @ \cup {t.dst}]
    /\ IF w \in Copiers
       THEN /\ Bug = "writer_skips_reader_done" \/ \A v \in Readers : t.dst \notin reading[v]
            /\ copying' = [copying EXCEPT ![w][t.dst] = gpuData[t.src]]
            /\ UNCHANGED waits
       ELSE /\ Bug = "reader_skips_writer_event" \/ t \notin down[Writer]
            /\ waits' = IF Bug = "reader_skips_writer_event" \/ copying[Writer][t.dst] = Idle
                        THEN waits
                        ELSE [waits EXCEPT ![w] = @ \cup {t.dst}]
            /\ UNCHANGED copying
    /\ UNCHANGED <<impVars, schedVars, up, reading, wDone, gpuData, hostData>>

\* Injected defect: a received command is lost.
WorkerDrop(w, t) ==
    /\ Bug = "worker_drops_transfer"
    /\ t \in down[w]
    /\ down' = [down EXCEPT ![w] = @ \ {t}]
    /\ UNCHANGED <<impVars, schedVars, up, netVars, workerVars, gpuData, hostData>>

\* Rank w's copy reaches its event: the bytes land in its host pool, and
\* reader streams waiting on that event are released.
WorkerComplete(w, h) ==
    /\ copying[w][h] # Idle
    /\ hostData' = [hostData EXCEPT ![w][h] = copying[w][h]]
    /\ copying' = [copying EXCEPT ![w][h] = Idle]
    /\ wDone' = [wDone EXCEPT ![w] = @ \cup {h}]
    /\ waits' = [v \in Ranks |-> waits[v] \ {h}]
    /\ UNCHANGED <<impVars, schedVars, down, up, netVars, reading, wEnq, gpuData>>

\* Rank w reports every ack not yet reported: acks may be late, batched
\* across steps, and carry enqueued and completed for one transfer together.
\* One worker meta per rank is in flight at a time: the engine returns it
\* with the step's output and the scheduler consumes it before the next step.
WorkerReport(w) ==
    /\ up[w] = <<>>
    /\ wEnq[w] \cup wDone[w] # {}
    /\ up' = [up EXCEPT ![w] = <<[enq |-> wEnq[w], done |-> wDone[w]]>>]
    /\ wEnq' = [wEnq EXCEPT ![w] = {}]
    /\ wDone' = [wDone EXCEPT ![w] = {}]
    /\ UNCHANGED <<impVars, schedVars, down, netVars, copying, waits, reading, gpuData, hostData>>

\* Reader rank w of a shared pool queues a decode step: its kernels read the
\* host blocks of the running requests' host pages, in its stream, until
\* they finish. Nothing orders the writer's stream after them except
\* WorkerReadsDone (the reader's read-done event).
WorkerRead(w) ==
    /\ w \in Readers
    /\ reading' = [reading EXCEPT ![w] = @ \cup
                      {loc[p][2] : p \in {q \in Pages : req[PageReq(q)] = "running"
                                                      /\ loc[q][1] = "host"}}]
    /\ UNCHANGED <<impVars, schedVars, down, up, netVars, copying, waits, wEnq, wDone, gpuData,
                   hostData>>

\* Reader rank w's queued reads have finished (its read-done event has
\* fired): the writer may copy into those blocks again.
WorkerReadsDone(w) ==
    /\ reading[w] # {}
    /\ reading' = [reading EXCEPT ![w] = {}]
    /\ UNCHANGED <<impVars, schedVars, down, up, netVars, copying, waits, wEnq, wDone, gpuData,
                   hostData>>

\* Loss of rank w: its worker restarts, or a metadata message to or from it
\* is lost. Its commands not yet taken, acks not yet reported and worker
\* meta in transit are gone; copies and reads already in its stream keep
\* running.
\* The engine tells the coordinator in the same step, and the restarted
\* worker names the destinations its stream still writes (Busy). Recovery:
\*  - a transfer not yet enqueued on every rank is abandoned: its source pin
\*    goes (the page stays resident; an ended request's block returns to
\*    HMA), and nothing is published;
\*  - rank w owes no ack any more for a transfer unless its copy may still
\*    be running (then it owes the completed ack);
\*  - a transfer no rank owes an ack for closes: an enqueued one is
\*    published (its bytes landed everywhere; the acks were lost), or freed
\*    for an aborted request; an abandoned one's destination returns.
\* LossRecovered is that recovery, as one record of new values (evaluated once
\* per step: see MetaConsumed).
LossRecovered(w) ==
    LET Busy(h) == copying[w][h] # Idle
        Open == {h \in HostBlocks : spill[h] # NoSpill}
        Sent == {h \in Open : spill[h].phase = "sent"}
        Ended(h) == req[PageReq(spill[h].page)] \in {"finished", "aborted"}
        Unpinned == {spill[h].src : h \in Sent}
        Returned == {spill[h].src : h \in {x \in Sent : Ended(x)}}
        Need(h) == IF Busy(h) THEN spill[h].need ELSE spill[h].need \ {w}
        Close == {h \in Open : Need(h) = {} \/ (Bug = "recover_frees_busy_destination"
                                                /\ h \in Sent)}
        Publish == IF Bug = "recover_publishes_unsent"
                   THEN {h \in Close : ~Busy(h) /\ req[PageReq(spill[h].page)] # "aborted"}
                   ELSE {h \in Close : spill[h].phase = "enqueued"
                                       /\ req[PageReq(spill[h].page)] # "aborted"}
        Free == Close \ Publish
    IN [srcPin |-> [g \in GpuBlocks |-> IF g \in Unpinned THEN FALSE ELSE srcPin[g]],
        gpuOwner |-> [g \in GpuBlocks |-> IF g \in Returned THEN NoPage ELSE gpuOwner[g]],
        gpuData |-> [g \in GpuBlocks |-> IF g \in Returned THEN Garbage ELSE gpuData[g]],
        spill |-> [h \in HostBlocks |->
                     IF h \in Close THEN NoSpill
                     ELSE IF h \in Open
                          THEN [spill[h] EXCEPT !.need = Need(h),
                                                !.phase = IF h \in Sent THEN "abandoned" ELSE @]
                     ELSE spill[h]],
        hostState |-> [h \in HostBlocks |->
                         IF h \in Publish THEN "valid"
                         ELSE IF h \in Free THEN "free"
                         ELSE hostState[h]],
        hostKey |-> [h \in HostBlocks |-> IF h \in Free THEN NoKey ELSE hostKey[h]],
        prefix |-> LET K == {hostKey[h] : h \in Publish} \cap Keys
                   IN SetAt(prefix, K, [k \in K |-> prefix[k] \cup {h \in Publish : hostKey[h] = k}]),
        hostData |-> Scribble(Free)]

\* Rank w is lost; the coordinator recovers in the same step (LossRecovered). The
\* worker's imports die with it: their slots and staged chunks are gone, and every
\* import in flight fails (a done ack not yet consumed is lost with the meta).
WorkerLoss(w) ==
    /\ Bug = "loss_path_ignores_gaps" => ~lost[w]
    /\ down' = [down EXCEPT ![w] = {}]
    /\ up' = [up EXCEPT ![w] = <<>>]
    /\ lost' = [lost EXCEPT ![w] = FALSE]
    /\ wEnq' = [wEnq EXCEPT ![w] = {}]
    /\ wDone' = [wDone EXCEPT ![w] = {}]
    /\ \E n \in {LossRecovered(w)} :
          /\ srcPin' = n.srcPin
          /\ gpuOwner' = n.gpuOwner
          /\ gpuData' = n.gpuData
          /\ spill' = n.spill
          /\ hostState' = n.hostState
          /\ hostKey' = n.hostKey
          /\ prefix' = n.prefix
          /\ hostData' = n.hostData
    \* SetAt at the entries that change (a page with no slot and nothing staged is its own
    \* cleared self), so a replay's imp and pg stay sequences (tracecheck/module.py TrInit)
    /\ imp' = LET L == {r \in Requests : imp[r].phase \in {"landing", "landed"}}
              IN SetAt(imp, L, [r \in L |-> [imp[r] EXCEPT !.phase = "failed"]])
    /\ pg' = LET S == {p \in Pages : pg[p].slot \/ pg[p].staged # {}}
             IN SetAt(pg, S, [p \in S |-> [pg[p] EXCEPT !.slot = FALSE, !.staged = {}]])
    /\ UNCHANGED <<req, loc, copying, waits, reading>>

-----------------------------------------------------------------------------
(* The channels' faults, each on one rank. *)

\* The commands a stale copy to rank w may carry: that of an open transfer
\* whose command rank w no longer waits for (taken, or lost on the way), or
\* one naming a published block (its source is not remembered once the
\* transfer closed: any GPU block). Ignoring one changes nothing, so this
\* set only matters for the injected bugs that execute replays.
Replayable(w) ==
    {[src |-> spill[h].src, dst |-> h] :
        h \in {x \in HostBlocks : spill[x] # NoSpill
                                 /\ [src |-> spill[x].src, dst |-> x] \notin down[w]}}
    \cup {[src |-> g, dst |-> h] : g \in GpuBlocks, h \in {x \in HostBlocks : hostState[x] = "valid"}}

\* A stale copy of command t (a duplicate, or one sent before the rank's
\* last loss) reaches rank w, at any later time, also after the worker
\* restarted (the restart starts a new epoch of numbers). Its number is
\* below the next one: the worker ignores it, enqueuing nothing: a stutter.
\* (The injected bugs execute it as a fresh command.)
IgnoreReplay(w, t) ==
    /\ t \in Replayable(w)
    /\ LET Exec == \/ Bug = "worker_applies_replay"
                   \/ Bug = "worker_forgets_published" /\ hostState[t.dst] = "valid"
                                                       /\ spill[t.dst] = NoSpill
       IN IF Exec
          THEN /\ wEnq' = [wEnq EXCEPT ![w] = @ \cup {t.dst}]
               /\ copying' = IF w \in Copiers
                             THEN [copying EXCEPT ![w][t.dst] = gpuData[t.src]]
                             ELSE copying
          ELSE UNCHANGED <<wEnq, copying>>
    /\ UNCHANGED <<impVars, schedVars, down, up, lost, waits, reading, wDone, gpuData, hostData>>

\* A connector metadata to rank w carrying command t never arrives: the gap
\* shows at the rank's next metadata (one goes every step).
LoseCommand(w, t) ==
    /\ t \in down[w]
    /\ down' = [down EXCEPT ![w] = @ \ {t}]
    /\ lost' = [lost EXCEPT ![w] = TRUE]
    /\ UNCHANGED <<impVars, schedVars, up, workerVars, gpuData, hostData>>

\* Rank w's worker meta in flight never arrives: the gap shows at its next.
LoseMeta(w) ==
    /\ up[w] # <<>>
    /\ up' = [up EXCEPT ![w] = <<>>]
    /\ lost' = [lost EXCEPT ![w] = TRUE]
    /\ UNCHANGED <<impVars, schedVars, down, workerVars, gpuData, hostData>>

\* A receiver notices rank w's gap (the next message is numbered above the
\* one expected): it refuses it and the engine runs the worker-loss path.
GapNoticed(w) == lost[w] /\ WorkerLoss(w)

-----------------------------------------------------------------------------

\* Every request has ended: the run may stop here (not a deadlock).
Quiescent ==
    /\ \A r \in Requests : req[r] \in {"finished", "aborted"}
    /\ UNCHANGED vars

SchedulerNext ==
    \/ \E r \in Requests : Arrive(r) \/ Finish(r) \/ Abort(r)
    \/ \E r \in Requests : ImportArrive(r) \/ ChooseTarget(r) \/ AdmitImport(r)
    \/ \E r \in Requests : CompleteImport(r) \/ FailImport(r)
    \/ \E p \in Pages, h \in HostBlocks : StartSpill(p, h)
    \/ \E w \in Ranks : ConsumeMeta(w)
    \/ \E h \in HostBlocks : EvictHost(h)
    \/ \E r \in Requests : Retire(r)

WorkerNext ==
    \/ \E w \in Ranks :
          \/ \E t \in down[w] : WorkerEnqueue(w, t) \/ WorkerDrop(w, t)
          \/ \E h \in HostBlocks : WorkerComplete(w, h)
          \/ WorkerReport(w)
          \/ WorkerRead(w) \/ WorkerReadsDone(w)
          \/ WorkerLoss(w)
          \/ \E t \in down[w] : LoseCommand(w, t)
          \/ \E t \in Transfers : IgnoreReplay(w, t)
          \/ LoseMeta(w)
    \/ \E p \in Pages : LeaseStaging(p) \/ CopyToHost(p) \/ MirrorPage(p) \/ ReleaseStaging(p)
    \/ \E p \in Pages, c \in Chunks : LandChunk(p, c)
    \/ \E r \in Requests : ReportImport(r) \/ ImportError(r)

Next == SchedulerNext \/ WorkerNext \/ Quiescent

\* Every rank's worker, the scheduler's consumption of each rank's meta and
\* retirement are weakly fair, each command, copy and request on its own: a
\* retired ID may come back, so a behaviour may hold infinitely many
\* transfers and requests, and fairness of the disjunction would let one
\* starve behind the others.
Fairness ==
    /\ \A w \in Ranks :
          /\ \A t \in Transfers : WF_vars(WorkerEnqueue(w, t))
          /\ \A h \in HostBlocks : WF_vars(WorkerComplete(w, h))
          /\ WF_vars(WorkerReport(w))
          /\ WF_vars(WorkerReadsDone(w))
          /\ WF_vars(ConsumeMeta(w))
          /\ WF_vars(GapNoticed(w))
    /\ \A r \in Requests : WF_vars(Retire(r))
    \* the worker's import steps and the scheduler's consumption of its acks
    /\ \A p \in Pages : /\ SF_vars(LeaseStaging(p))
                       /\ WF_vars(CopyToHost(p))
                       /\ WF_vars(MirrorPage(p))
                       /\ WF_vars(ReleaseStaging(p))
                       /\ \A c \in Chunks : WF_vars(LandChunk(p, c))
    /\ \A r \in Requests : WF_vars(ReportImport(r)) /\ WF_vars(CompleteImport(r))
                          /\ WF_vars(FailImport(r))

Spec == Init /\ [][Next]_vars /\ Fairness

-----------------------------------------------------------------------------
(* Safety invariants. Each has a Python twin of the same name. *)

\* TypeOK's conjuncts on the request-, page- and key-indexed variables, at the requests
\* R, pages P and keys K only (TypeOK: at all of them, with each variable's domain). A
\* trace replay checks them only where a step wrote (hisparse/tracecheck/delta.py).
TypeOKAt(R, P, K) ==
    /\ \A r \in R : /\ req[r] \in {"new", "importing", "running", "finished", "aborted"}
                    /\ imp[r] \in Imp
    /\ \A p \in P : loc[p] \in Loc /\ pg[p] \in PgImp
    /\ \A k \in K : prefix[k] \in SUBSET HostBlocks

\* The value sets of TypeOKBlocks with a sentinel, as constant definitions: TLC computes
\* (and sorts) a constant definition once, where a union written inside TypeOK is built
\* again, unsorted, in every state and searched linearly (a trace replay's Keys are
\* thousands).
PageOrNone == Pages \cup {NoPage}
KeyOrNone == Keys \cup {NoKey}
DataOrIdle == Data \cup {Idle}

\* The rest of TypeOK: the block- and rank-indexed variables.
TypeOKBlocks ==
    /\ gpuOwner \in [GpuBlocks -> PageOrNone]
    /\ srcPin \in [GpuBlocks -> BOOLEAN]
    /\ hostState \in [HostBlocks -> {"free", "leased", "valid"}]
    /\ hostKey \in [HostBlocks -> KeyOrNone]
    /\ spill \in [HostBlocks -> Spills \cup {NoSpill}]
    /\ down \in [Ranks -> SUBSET Transfers]
    /\ lost \in [Ranks -> BOOLEAN]
    /\ \A w \in Ranks : \A i \in 1..Len(up[w]) : up[w][i] \in WorkerMeta
    /\ copying \in [Ranks -> [HostBlocks -> DataOrIdle]]
    /\ waits \in [Ranks -> SUBSET HostBlocks]
    /\ reading \in [Ranks -> SUBSET HostBlocks]
    /\ wEnq \in [Ranks -> SUBSET HostBlocks]
    /\ wDone \in [Ranks -> SUBSET HostBlocks]
    /\ gpuData \in [GpuBlocks -> Data]
    /\ hostData \in [Copiers -> [HostBlocks -> Data]]

\* req \in [Requests -> S] is "req is a function on Requests whose values are in S"; the
\* same for loc, prefix, imp and pg (each is a function: Init and every action build
\* functions).
TypeOK ==
    /\ DOMAIN req = Requests /\ DOMAIN loc = Pages /\ DOMAIN prefix = Keys
    /\ DOMAIN imp = Requests /\ DOMAIN pg = Pages
    /\ TypeOKAt(Requests, Pages, Keys)
    /\ TypeOKBlocks

\* No GPU block backs two block-table entries; no host block is free while
\* a transfer naming it is still in flight (its ID would be reused).
\* Cost O(pages + blocks) per state (a trace replay checks it in every state): "each
\* GPU block backs at most one entry", \A g : Cardinality(PagesOn(<<"gpu", g>>)) <= 1,
\* is stated as "loc is one-to-one on the entries that name a GPU block": the pages
\* located on the GPU have as many distinct locations as there are pages. The two
\* are equivalent under TypeOK (every such location is <<"gpu", g>> with g \in GpuBlocks):
\* two pages share a location iff some block's PagesOn has two elements.
NoDoubleOwnershipGpu ==
    LET OnGpu == {p \in Pages : loc[p][1] = "gpu"}
    IN Cardinality({loc[p] : p \in OnGpu}) = Cardinality(OnGpu)
NoDoubleOwnershipHost ==
    LET F == InFlightBlocks
    IN \A h \in HostBlocks : hostState[h] = "free" => h \notin F
NoDoubleOwnership == NoDoubleOwnershipGpu /\ NoDoubleOwnershipHost

\* Source and destination leases are held only by an open transfer (a host block
\* also by the import it is the destination of).
\* (\E h : spill[h].src = g /\ spill[h].phase = "sent" is g \in SentSrc: the set of the
\* sent transfers' sources, built once, so the check is O(blocks), not GPU x host blocks.)
NoLeaseLeaked ==
    /\ LET SentSrc == {spill[h].src : h \in {x \in HostBlocks : spill[x].phase = "sent"}}
       IN \A g \in GpuBlocks : srcPin[g] => g \in SentSrc
    /\ LET Imported == {pg[p].host[2] : p \in {q \in Pages : pg[q].host # NoLoc}}
       IN \A h \in HostBlocks : hostState[h] = "leased" => spill[h] # NoSpill \/ h \in Imported

\* Until its copy is enqueued on every rank, a source block stays leased,
\* pinned and intact.
NoReuseBeforeEnqueued ==
    \A h \in HostBlocks : spill[h].phase = "sent" =>
        LET g == spill[h].src IN
        /\ gpuOwner[g] = spill[h].page
        /\ srcPin[g]
        /\ gpuData[g] = KeyOf(spill[h].page)

\* A valid (published) host page has no copy of its own bytes, command or ack in
\* flight on any rank (a copy of other bytes into it is PublishedPageStable's:
\* together they say that no copy into a published page is in flight).
NoPublishBeforeComplete ==
    LET F == InFlightBlocks
    IN \A h \in HostBlocks : hostState[h] = "valid" =>
          \/ h \notin F
          \/ /\ spill[h] = NoSpill
             /\ \A w \in Ranks : /\ copying[w][h] # hostKey[h]
                               /\ \A t \in down[w] : t.dst # h
                               /\ h \notin wEnq[w] \cup wDone[w]
                               /\ \A i \in 1..Len(up[w]) : h \notin up[w][i].enq \cup up[w][i].done

\* The prefix index names only valid pages, and a valid page holds the bytes
\* of the page it claims in every physical pool.
\* (Its key-indexed part at the keys K only; a trace replay checks it only at the keys a
\* step could have changed it for: hisparse/tracecheck/delta.py.)
PublishedDataCorrectAt(K) ==
    \A k \in K : \A h \in prefix[k] : hostState[h] = "valid" /\ hostKey[h] = k
PublishedDataCorrectPools ==
    \A b \in Copiers : \A h \in HostBlocks :
        hostState[h] = "valid" => hostData[b][h] = hostKey[h]
PublishedDataCorrect == PublishedDataCorrectAt(Keys) /\ PublishedDataCorrectPools

\* Every page of a running request is readable from exactly one place, on
\* every rank.
\* "No other GPU block is leased to a running page p" was \A p : \A g : gpuOwner[g] = p
\* => loc[p] = <<"gpu", g>> (pages x GPU blocks); for each g the only p with
\* gpuOwner[g] = p is gpuOwner[g] itself, so it is the same statement per block, with
\* the running-page condition moved onto gpuOwner[g] (O(pages + blocks) per state).
\* "\A p \in Pages : req[PageReq(p)] = "running" => ..." is quantified over the running
\* requests' pages: Pages is the union of the PagesOf(r), and PageReq(p) = r for each p
\* in PagesOf(r), so both range over the same pages (O(requests + running pages)).
LivePagesReadable ==
    /\ \A g \in GpuBlocks :
          gpuOwner[g] \in Pages /\ req[PageReq(gpuOwner[g])] = "running" =>
              loc[gpuOwner[g]] = <<"gpu", g>>
    /\ \A r \in {x \in Requests : req[x] = "running"} : \A p \in PagesOf(r) :
          CASE loc[p][1] = "gpu" ->
                   gpuOwner[loc[p][2]] = p /\ gpuData[loc[p][2]] = KeyOf(p)
            [] loc[p][1] = "host" ->
                   hostState[loc[p][2]] # "free"
                   /\ \A w \in Ranks : StreamHostData(w, loc[p][2]) = KeyOf(p)
            [] OTHER -> FALSE

HostPoolNotOvercommitted == Cardinality(HostInUse) <= HostCapacity

\* A shared pool's writer never copies into a block a reader's queued reads
\* may still read, unless those reads wait on that very copy's event.
NoOverwriteUnderRead ==
    \A v \in Readers : \A h \in reading[v] :
        copying[Writer][h] # Idle => h \in waits[v]

\* A request that is not (or no longer) in the protocol state is named by
\* nothing: no block-table entry, resident lease or open transfer (each is
\* ~Referenced(r) for every new r, stated per artifact so a check costs
\* O(pages + blocks)). This is what makes its ID safe to reuse.
\* (Its page-indexed part at the pages P only; a trace replay checks it only at the pages
\* a step could have changed it for: hisparse/tracecheck/delta.py.)
RetiredUnreferencedAt(P) == \A p \in P : loc[p] # NoLoc => req[PageReq(p)] # "new"
RetiredUnreferencedBlocks ==
    /\ \A g \in GpuBlocks : gpuOwner[g] # NoPage => req[PageReq(gpuOwner[g])] # "new"
    /\ \A h \in HostBlocks : spill[h] # NoSpill => req[PageReq(spill[h].page)] # "new"
RetiredUnreferenced == RetiredUnreferencedAt(Pages) /\ RetiredUnreferencedBlocks

\* A published host page's bytes never change while it is published: no copy
\* in any rank's stream writes other bytes into it.
PublishedPageStable ==
    \A w \in Copiers : \A h \in HostBlocks :
        hostState[h] = "valid" => copying[w][h] \in {Idle, hostKey[h]}

\* A replayed command is never executed twice: on every rank, an open
\* transfer's enqueued ack exists at most once, unreported, in a worker meta
\* in flight, or consumed (`enq`).
ReplayNotExecuted ==
    \A w \in Ranks : \A h \in HostBlocks : spill[h] # NoSpill =>
        (IF h \in wEnq[w] THEN 1 ELSE 0) + (IF w \in spill[h].enq THEN 1 ELSE 0)
            + Cardinality({i \in 1..Len(up[w]) : h \in up[w][i].enq}) <= 1

\* A gap is never silently skipped: unless rank w has an unnoticed gap (which
\* the worker-loss path will handle), every command it has not acknowledged as
\* enqueued has a carrier on that rank: the command in `down`, its enqueued ack
\* unreported or in a worker meta in flight.
GapsDetected ==
    \A w \in Ranks : ~lost[w] =>
        \A h \in HostBlocks : spill[h].phase = "sent" /\ w \notin spill[h].enq =>
            \/ \E t \in down[w] : t.dst = h
            \/ h \in wEnq[w]
            \/ \E i \in 1..Len(up[w]) : h \in up[w][i].enq

\* P/D import. The staging slots in use never exceed the pool's.
StagingBounded == Cardinality(Slots) <= StagingSlots

\* The done ack (which publishes the host pages and makes the request decodable) is
\* sent only once every chunk of every page is at its destination; a running
\* imported request has all its bytes; an importing host page is never published
\* before its import completes.
\* (Its parts at the requests R and the pages P; a trace replay checks them only where a
\* step could have changed them: hisparse/tracecheck/delta.py.)
ImportLandedAt(R) ==
    \A r \in {x \in R : imp[x].phase = "landed" \/ (req[x] = "running" /\ imp[x].target # "none")} :
        \A p \in PagesOf(r) : pg[p].landed = Chunks
ImportHostLeasedAt(P) ==
    \A p \in P : pg[p].host # NoLoc => hostState[pg[p].host[2]] = "leased"
ImportPublishedComplete == ImportLandedAt(Imports) /\ ImportHostLeasedAt(Pages)

\* A mirrored page holds its bytes at its resident destination by the time its host
\* import is reported done, before the request can decode (LivePagesReadable then
\* keeps it readable).
\* (MirrorPending(r): r is such a request; MirroredAt(R): the check at those of R. A trace
\* replay keeps the set of pending ones as it changes: hisparse/tracecheck/delta.py.)
MirrorPending(r) == imp[r].target = "host" /\ imp[r].phase = "landed" /\ req[r] = "importing"
MirroredAt(R) ==
    \A r \in R : LET p == PageAt(r, Len(PageKeys[r])) IN gpuData[GpuOf(p)] = KeyOf(p)
MirrorBeforeRead == MirroredAt({x \in Imports : MirrorPending(x)})

\* An import lands where the target chosen for it says, whatever the pools were at
\* its admission: host blocks for every page iff the target is "host".
\* (Its part at the requests R: a trace replay checks it where a step could have changed it.)
ImportTargetStableAt(R) ==
    \A r \in {x \in R : imp[x].phase \in LiveImport} :
        /\ imp[r].target # "none"
        /\ (imp[r].target = "host") = (\A p \in PagesOf(r) : pg[p].host # NoLoc)
ImportTargetStable == ImportTargetStableAt(Imports)

\* Nothing of an import outlives it: only a landing import holds staging slots; only
\* a live import holds host blocks as its destinations; an ended imported request's
\* GPU blocks are pinned sources or a live import's.
\* (Its page part at the pages P, and its block part: a trace replay checks the first only
\* where a step could have changed it.)
NoImportLeakAt(P) ==
    \A p \in P : /\ pg[p].slot => imp[PageReq(p)].phase = "landing"
                /\ pg[p].host # NoLoc => imp[PageReq(p)].phase \in LiveImport
NoImportLeakBlocks ==
    \A g \in GpuBlocks :
        /\ gpuOwner[g] \in Pages
        /\ PageReq(gpuOwner[g]) \in Imports
        /\ req[PageReq(gpuOwner[g])] \in {"finished", "aborted"}
        => srcPin[g] \/ imp[PageReq(gpuOwner[g])].phase \in LiveImport
NoImportLeak == NoImportLeakAt(Pages) /\ NoImportLeakBlocks

-----------------------------------------------------------------------------
(* Liveness under worker fairness. *)

\* Every sent transfer completes and its completion is consumed.
TransfersComplete ==
    \A h \in HostBlocks : (spill[h] # NoSpill) ~> (spill[h] = NoSpill)

\* Every source and destination lease is eventually released.
LeasesReleased ==
    /\ \A g \in GpuBlocks : srcPin[g] ~> ~srcPin[g]
    /\ \A h \in HostBlocks : (hostState[h] = "leased") ~> (hostState[h] # "leased")

\* An aborted request eventually holds no GPU block and no host lease.
AbortedFreed ==
    \A r \in Requests :
        (req[r] = "aborted") ~>
            /\ \A g \in GpuBlocks : gpuOwner[g] \notin PagesOf(r)
            /\ \A h \in HostBlocks : spill[h].page \notin PagesOf(r)

\* Every ended request eventually retires (leaves the protocol state).
EndedRetired ==
    \A r \in Requests : (req[r] \in {"finished", "aborted"}) ~> (req[r] = "new")

\* Every admitted import ends, completed or failed, and returns its staging slots.
ImportsEnd ==
    /\ \A r \in Requests : (imp[r].phase = "landing") ~> (imp[r].phase = "none")
    /\ \A p \in Pages : pg[p].slot ~> ~pg[p].slot
=============================================================================
