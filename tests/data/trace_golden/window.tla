---- MODULE HiSparseTrace ----
EXTENDS HiSparse, TLC, Integers
VARIABLES tr, cursor, trOnGpu, trOldKey, trSlots, trImpHost, trMirror
TrRequestsValue == 1..3
TrRequests == TrRequestsValue
TrGpuBlocksValue == 0..2
TrGpuBlocks == TrGpuBlocksValue
TrHostBlocksValue == 3..6
TrHostBlocks == TrHostBlocksValue
TrKeysValue == 1..4
TrKeys == TrKeysValue
TrPageKeysValue == <<<<1, 2>>, <<1, 2, 3>>, <<4>>>>
TrPageKeys == TrPageKeysValue
TrHostPoolBytesValue == 9
TrHostPoolBytes == TrHostPoolBytesValue
TrHostBlockBytesValue == 2
TrHostBlockBytes == TrHostBlockBytesValue
TrRanksValue == {1, 2}
TrRanks == TrRanksValue
TrWriterValue == 2
TrWriter == TrWriterValue
TrBackingValue == "shared"
TrBacking == TrBackingValue
TrBugValue == "none"
TrBug == TrBugValue
TrImportsValue == {}
TrImports == TrImportsValue
TrChunksValue == 1..1
TrChunks == TrChunksValue
TrStagingSlotsValue == 1
TrStagingSlots == TrStagingSlotsValue
TrBase == <<0, 2, 5>>
TrOwner == <<1, 1, 2, 2, 2, 3>>
TrKeyTab == <<1, 2, 1, 2, 3, 4>>
TrPageReq(p) == TrOwner[p]
TrPageIdx(p) == p - TrBase[TrOwner[p]]
TrPageAt(r, i) == TrBase[r] + i
TrPages == 1..6
TrPagesOf(r) == (TrBase[r] + 1)..(TrBase[r] + Len(PageKeys[r]))
TrKeyOf(p) == TrKeyTab[p]
TrNoPage == 0
TrNoLoc == <<"nowhere", -1>>
TrNoKey == 0
TrIdle == -3
TrEmpty == -1
TrGarbage == -2
TrNoSpill == [src |-> -1, page |-> 0, phase |-> "none", enq |-> {}, need |-> {}]
TrFirst_req == <<"running", "new", "new">>
TrFirst_loc == <<<<"host", 3>>, <<"gpu", 1>>, NoLoc, NoLoc, NoLoc, NoLoc>>
TrFirst_gpuOwner == <<NoPage, 2, NoPage>>
TrFirst_srcPin == <<FALSE, TRUE, FALSE>>
TrFirst_hostState == <<"valid", "free", "leased", "free">>
TrFirst_hostKey == <<1, NoKey, 2, NoKey>>
TrFirst_prefix == <<{3}, {}, {}, {}>>
TrFirst_spill == <<NoSpill, NoSpill, [src |-> 1, page |-> 2, phase |-> "sent", enq |-> {}, need |-> {1, 2}], NoSpill>>
TrFirst_down == [x \in {1, 2} |-> CASE x = 1 -> {[src |-> 1, dst |-> 5]} [] x = 2 -> {}]
TrFirst_up == [x \in {1, 2} |-> CASE x = 1 -> <<>> [] x = 2 -> <<>>]
TrFirst_lost == [x \in {1, 2} |-> CASE x = 1 -> FALSE [] x = 2 -> FALSE]
TrFirst_copying_1 == <<Idle, Idle, Idle, Idle>>
TrFirst_copying_2 == <<Idle, Idle, Idle, Idle>>
TrFirst_copying == [x \in {1, 2} |-> CASE x = 1 -> [y \in HostBlocks |-> TrFirst_copying_1[y + -2]] [] x = 2 -> [y \in HostBlocks |-> TrFirst_copying_2[y + -2]]]
TrFirst_waits == [x \in {1, 2} |-> CASE x = 1 -> {} [] x = 2 -> {}]
TrFirst_reading == [x \in {1, 2} |-> CASE x = 1 -> {} [] x = 2 -> {}]
TrFirst_wEnq == [x \in {1, 2} |-> CASE x = 1 -> {} [] x = 2 -> {5}]
TrFirst_wDone == [x \in {1, 2} |-> CASE x = 1 -> {} [] x = 2 -> {5}]
TrFirst_gpuData == <<Garbage, 2, Empty>>
TrFirst_hostData_2 == <<1, Empty, 2, Empty>>
TrFirst_hostData == [x \in {2} |-> CASE x = 2 -> [y \in HostBlocks |-> TrFirst_hostData_2[y + -2]]]
TrFirst_imp == <<NoImp, NoImp, NoImp>>
TrFirst_pg == <<NoPg, NoPg, NoPg, NoPg, NoPg, NoPg>>
TrLast_req == <<"finished", "new", "running">>
TrLast_loc == <<NoLoc, NoLoc, NoLoc, NoLoc, NoLoc, <<"gpu", 0>>>>
TrLast_gpuOwner == <<6, NoPage, NoPage>>
TrLast_srcPin == <<FALSE, FALSE, FALSE>>
TrLast_hostState == <<"valid", "free", "valid", "free">>
TrLast_hostKey == <<1, NoKey, 2, NoKey>>
TrLast_prefix == <<{3}, {5}, {}, {}>>
TrLast_spill == <<NoSpill, NoSpill, NoSpill, NoSpill>>
TrLast_down == [x \in {1, 2} |-> CASE x = 1 -> {} [] x = 2 -> {}]
TrLast_up == [x \in {1, 2} |-> CASE x = 1 -> <<>> [] x = 2 -> <<>>]
TrLast_lost == [x \in {1, 2} |-> CASE x = 1 -> FALSE [] x = 2 -> FALSE]
TrLast_copying_1 == <<Idle, Idle, Idle, Idle>>
TrLast_copying_2 == <<Idle, Idle, Idle, Idle>>
TrLast_copying == [x \in {1, 2} |-> CASE x = 1 -> [y \in HostBlocks |-> TrLast_copying_1[y + -2]] [] x = 2 -> [y \in HostBlocks |-> TrLast_copying_2[y + -2]]]
TrLast_waits == [x \in {1, 2} |-> CASE x = 1 -> {} [] x = 2 -> {}]
TrLast_reading == [x \in {1, 2} |-> CASE x = 1 -> {} [] x = 2 -> {}]
TrLast_wEnq == [x \in {1, 2} |-> CASE x = 1 -> {} [] x = 2 -> {}]
TrLast_wDone == [x \in {1, 2} |-> CASE x = 1 -> {} [] x = 2 -> {}]
TrLast_gpuData == <<4, Garbage, Empty>>
TrLast_hostData_2 == <<1, Empty, 2, Empty>>
TrLast_hostData == [x \in {2} |-> CASE x = 2 -> [y \in HostBlocks |-> TrLast_hostData_2[y + -2]]]
TrLast_imp == <<NoImp, NoImp, NoImp>>
TrLast_pg == <<NoPg, NoPg, NoPg, NoPg, NoPg, NoPg>>
Traces == <<
    <<
        [action |-> "WorkerReport", args |-> [rank |-> 2], post |-> [up |-> <<<<2, <<[enq |-> {5}, done |-> {5}]>>>>>>, wEnq |-> <<<<2, {}>>>>, wDone |-> <<<<2, {}>>>>]],
        [action |-> "ConsumeMeta", args |-> [rank |-> 2], post |-> [loc |-> <<>>, gpuOwner |-> <<>>, srcPin |-> <<>>, hostState |-> <<>>, hostKey |-> <<>>, prefix |-> <<>>, spill |-> <<<<5, [src |-> 1, page |-> 2, phase |-> "sent", enq |-> {2}, need |-> {1}]>>>>, up |-> <<<<2, <<>>>>>>, gpuData |-> <<>>, hostData |-> <<>>]],
        [action |-> "WorkerEnqueue", args |-> [rank |-> 1, src |-> 1, dst |-> 5], post |-> [down |-> <<<<1, {}>>>>, lost |-> <<>>, copying |-> <<>>, waits |-> <<>>, wEnq |-> <<<<1, {5}>>>>]],
        [action |-> "WorkerReport", args |-> [rank |-> 1], post |-> [up |-> <<<<1, <<[enq |-> {5}, done |-> {}]>>>>>>, wEnq |-> <<<<1, {}>>>>, wDone |-> <<>>]],
        [action |-> "ConsumeMeta", args |-> [rank |-> 1], post |-> [loc |-> <<<<2, <<"host", 5>>>>>>, gpuOwner |-> <<<<1, NoPage>>>>, srcPin |-> <<<<1, FALSE>>>>, hostState |-> <<<<5, "valid">>>>, hostKey |-> <<>>, prefix |-> <<<<2, {5}>>>>, spill |-> <<<<5, NoSpill>>>>, up |-> <<<<1, <<>>>>>>, gpuData |-> <<<<1, Garbage>>>>, hostData |-> <<>>]],
        [action |-> "Finish", args |-> [request |-> 1], post |-> [req |-> <<<<1, "finished">>>>, loc |-> <<<<1, NoLoc>>, <<2, NoLoc>>>>, gpuOwner |-> <<>>, gpuData |-> <<>>]],
        [action |-> "Arrive", args |-> [request |-> 2, hosts |-> <<3, 5>>, blocks |-> <<0>>], post |-> [req |-> <<<<2, "running">>>>, loc |-> <<<<3, <<"host", 3>>>>, <<4, <<"host", 5>>>>, <<5, <<"gpu", 0>>>>>>, gpuOwner |-> <<<<0, 5>>>>, gpuData |-> <<<<0, 3>>>>]],
        [action |-> "IgnoreReplay", args |-> [rank |-> 2, src |-> 1, dst |-> 5], post |-> [copying |-> <<>>, wEnq |-> <<>>]],
        [action |-> "Finish", args |-> [request |-> 2], post |-> [req |-> <<<<2, "finished">>>>, loc |-> <<<<3, NoLoc>>, <<4, NoLoc>>, <<5, NoLoc>>>>, gpuOwner |-> <<<<0, NoPage>>>>, gpuData |-> <<<<0, Garbage>>>>]],
        [action |-> "Retire", args |-> [request |-> 2], post |-> [req |-> <<<<2, "new">>>>, imp |-> <<>>, pg |-> <<>>]],
        [action |-> "Arrive", args |-> [request |-> 3, hosts |-> <<>>, blocks |-> <<0>>], post |-> [req |-> <<<<3, "running">>>>, loc |-> <<<<6, <<"gpu", 0>>>>>>, gpuOwner |-> <<<<0, 6>>>>, gpuData |-> <<<<0, 4>>>>]],
        [action |-> "WorkerRead", args |-> [rank |-> 1], post |-> [reading |-> <<>>]]>>
>>

StepAction(e) ==
    CASE e.action = "Arrive" -> ArriveWith(e.args.request, e.args.hosts, e.args.blocks)
      [] e.action = "Finish" -> Finish(e.args.request)
      [] e.action = "Abort" -> Abort(e.args.request)
      [] e.action = "StartSpill" -> StartSpill(e.args.page, e.args.host_block)
      [] e.action = "EvictHost" -> EvictHost(e.args.host_block)
      [] e.action = "Retire" -> Retire(e.args.request)
      [] e.action = "ConsumeMeta" -> ConsumeMeta(e.args.rank)
      [] e.action = "WorkerEnqueue" -> WorkerEnqueue(e.args.rank, [src |-> e.args.src, dst |-> e.args.dst])
      [] e.action = "WorkerDrop" -> WorkerDrop(e.args.rank, [src |-> e.args.src, dst |-> e.args.dst])
      [] e.action = "WorkerComplete" -> WorkerComplete(e.args.rank, e.args.host_block)
      [] e.action = "WorkerReport" -> WorkerReport(e.args.rank)
      [] e.action = "WorkerRead" -> WorkerRead(e.args.rank)
      [] e.action = "WorkerReadsDone" -> WorkerReadsDone(e.args.rank)
      [] e.action = "WorkerLoss" -> WorkerLoss(e.args.rank)
      [] e.action = "IgnoreReplay" -> IgnoreReplay(e.args.rank, [src |-> e.args.src, dst |-> e.args.dst])
      [] e.action = "LoseCommand" -> LoseCommand(e.args.rank, [src |-> e.args.src, dst |-> e.args.dst])
      [] e.action = "LoseMeta" -> LoseMeta(e.args.rank)
      [] e.action = "ImportArrive" -> ImportArrive(e.args.request)
      [] e.action = "ChooseTarget" -> ChooseTarget(e.args.request)
      [] e.action = "AdmitImport" -> AdmitImportWith(e.args.request, e.args.blocks, e.args.hosts)
      [] e.action = "LeaseStaging" -> LeaseStaging(e.args.page)
      [] e.action = "LandChunk" -> LandChunk(e.args.page, e.args.chunk)
      [] e.action = "CopyToHost" -> CopyToHost(e.args.page)
      [] e.action = "MirrorPage" -> MirrorPage(e.args.page)
      [] e.action = "ReleaseStaging" -> ReleaseStaging(e.args.page)
      [] e.action = "ReportImport" -> ReportImport(e.args.request)
      [] e.action = "ImportError" -> ImportError(e.args.request)
      [] e.action = "CompleteImport" -> CompleteImport(e.args.request)
      [] e.action = "FailImport" -> FailImport(e.args.request)

TrArgs(d) == {d[i][1] : i \in 1..Len(d)}
TrFcn(d) == [x \in TrArgs(d) |-> d[CHOOSE i \in 1..Len(d) : d[i][1] = x][2]]
RECURSIVE TrSetPairs(_, _, _)
TrSetPairs(f, d, i) ==
    IF i > Len(d) THEN f ELSE TrSetPairs([f EXCEPT ![d[i][1]] = d[i][2]], d, i + 1)
TrApply(f, d) == IF TrArgs(d) \subseteq DOMAIN f THEN TrSetPairs(f, d, 1) ELSE TrFcn(d) @@ f
RECURSIVE TrSetNested(_, _, _)
TrSetNested(f, d, i) ==
    IF i > Len(d) THEN f
    ELSE TrSetNested([f EXCEPT ![d[i][1]] = TrApply(@, d[i][2])], d, i + 1)
Nested(d, f) ==
    IF TrArgs(d) \subseteq DOMAIN f THEN TrSetNested(f, d, 1)
    ELSE [x \in TrArgs(d) |-> TrFcn(TrFcn(d)[x]) @@ f[x]] @@ f

MatchPost(e) ==
    /\ IF "req" \in DOMAIN e.post THEN req' = TrApply(req, e.post.req) ELSE UNCHANGED req
    /\ IF "loc" \in DOMAIN e.post THEN loc' = TrApply(loc, e.post.loc) ELSE UNCHANGED loc
    /\ IF "gpuOwner" \in DOMAIN e.post THEN gpuOwner' = TrApply(gpuOwner, e.post.gpuOwner) ELSE UNCHANGED gpuOwner
    /\ IF "srcPin" \in DOMAIN e.post THEN srcPin' = TrApply(srcPin, e.post.srcPin) ELSE UNCHANGED srcPin
    /\ IF "hostState" \in DOMAIN e.post THEN hostState' = TrApply(hostState, e.post.hostState) ELSE UNCHANGED hostState
    /\ IF "hostKey" \in DOMAIN e.post THEN hostKey' = TrApply(hostKey, e.post.hostKey) ELSE UNCHANGED hostKey
    /\ IF "prefix" \in DOMAIN e.post THEN prefix' = TrApply(prefix, e.post.prefix) ELSE UNCHANGED prefix
    /\ IF "spill" \in DOMAIN e.post THEN spill' = TrApply(spill, e.post.spill) ELSE UNCHANGED spill
    /\ IF "down" \in DOMAIN e.post THEN down' = TrApply(down, e.post.down) ELSE UNCHANGED down
    /\ IF "up" \in DOMAIN e.post THEN up' = TrApply(up, e.post.up) ELSE UNCHANGED up
    /\ IF "lost" \in DOMAIN e.post THEN lost' = TrApply(lost, e.post.lost) ELSE UNCHANGED lost
    /\ IF "copying" \in DOMAIN e.post THEN copying' = Nested(e.post.copying, copying) ELSE UNCHANGED copying
    /\ IF "waits" \in DOMAIN e.post THEN waits' = TrApply(waits, e.post.waits) ELSE UNCHANGED waits
    /\ IF "reading" \in DOMAIN e.post THEN reading' = TrApply(reading, e.post.reading) ELSE UNCHANGED reading
    /\ IF "wEnq" \in DOMAIN e.post THEN wEnq' = TrApply(wEnq, e.post.wEnq) ELSE UNCHANGED wEnq
    /\ IF "wDone" \in DOMAIN e.post THEN wDone' = TrApply(wDone, e.post.wDone) ELSE UNCHANGED wDone
    /\ IF "gpuData" \in DOMAIN e.post THEN gpuData' = TrApply(gpuData, e.post.gpuData) ELSE UNCHANGED gpuData
    /\ IF "hostData" \in DOMAIN e.post THEN hostData' = Nested(e.post.hostData, hostData) ELSE UNCHANGED hostData
    /\ IF "imp" \in DOMAIN e.post THEN imp' = TrApply(imp, e.post.imp) ELSE UNCHANGED imp
    /\ IF "pg" \in DOMAIN e.post THEN pg' = TrApply(pg, e.post.pg) ELSE UNCHANGED pg

TrDiagnosed == cursor <= Len(Traces[tr])

TrStart ==
    /\ req = TrFirst_req
    /\ loc = TrFirst_loc
    /\ gpuOwner = [x \in GpuBlocks |-> TrFirst_gpuOwner[x + 1]]
    /\ srcPin = [x \in GpuBlocks |-> TrFirst_srcPin[x + 1]]
    /\ hostState = [x \in HostBlocks |-> TrFirst_hostState[x + -2]]
    /\ hostKey = [x \in HostBlocks |-> TrFirst_hostKey[x + -2]]
    /\ prefix = TrFirst_prefix
    /\ spill = [x \in HostBlocks |-> TrFirst_spill[x + -2]]
    /\ down = TrFirst_down
    /\ up = TrFirst_up
    /\ lost = TrFirst_lost
    /\ copying = TrFirst_copying
    /\ waits = TrFirst_waits
    /\ reading = TrFirst_reading
    /\ wEnq = TrFirst_wEnq
    /\ wDone = TrFirst_wDone
    /\ gpuData = [x \in GpuBlocks |-> TrFirst_gpuData[x + 1]]
    /\ hostData = TrFirst_hostData
    /\ imp = TrFirst_imp
    /\ pg = TrFirst_pg

TrEnd ==
    /\ req = TrLast_req
    /\ loc = TrLast_loc
    /\ gpuOwner = [x \in GpuBlocks |-> TrLast_gpuOwner[x + 1]]
    /\ srcPin = [x \in GpuBlocks |-> TrLast_srcPin[x + 1]]
    /\ hostState = [x \in HostBlocks |-> TrLast_hostState[x + -2]]
    /\ hostKey = [x \in HostBlocks |-> TrLast_hostKey[x + -2]]
    /\ prefix = TrLast_prefix
    /\ spill = [x \in HostBlocks |-> TrLast_spill[x + -2]]
    /\ down = TrLast_down
    /\ up = TrLast_up
    /\ lost = TrLast_lost
    /\ copying = TrLast_copying
    /\ waits = TrLast_waits
    /\ reading = TrLast_reading
    /\ wEnq = TrLast_wEnq
    /\ wDone = TrLast_wDone
    /\ gpuData = [x \in GpuBlocks |-> TrLast_gpuData[x + 1]]
    /\ hostData = TrLast_hostData
    /\ imp = TrLast_imp
    /\ pg = TrLast_pg

TrHandoff == cursor > Len(Traces[tr]) => TrEnd


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


TrStep == Traces[tr][cursor]

\* A replay is a chain: MatchPost gives every spec variable its next value, TrTrack every
\* tracker its, cursor moves on and tr stays, so a state has at most one successor, and
\* it is named by <<tr, cursor>> (Init, or a window's TrStart, is one state per trace).
\* TLC fingerprints this view (cfg: VIEW) instead of the whole state, which costs
\* O(pages + keys) a state: two states with one view are the same state.
TrView == <<tr, cursor>>

TraceInit ==
    /\ TrStart /\ tr \in 1..Len(Traces) /\ cursor = 1
    /\ trOnGpu = TrOnGpuInit /\ trOldKey = <<>> /\ trSlots = Cardinality(Slots)
    /\ trImpHost = TrImpHostInit /\ trMirror = {x \in Imports : MirrorPending(x)}

TraceNext ==
    \/ /\ cursor <= Len(Traces[tr])
       /\ StepAction(TrStep)
       /\ MatchPost(TrStep)
       /\ cursor' = cursor + 1
       /\ UNCHANGED tr
       /\ TrTrack(TrStep)
    \/ /\ cursor > Len(Traces[tr])
       /\ UNCHANGED <<vars, tr, cursor, trOnGpu, trOldKey, trSlots, trImpHost, trMirror>>

TraceActionEnabled == TrDiagnosed => ENABLED StepAction(TrStep)

TraceMatches_req ==
    TrDiagnosed /\ "req" \in DOMAIN TrStep.post
        => ENABLED (StepAction(TrStep) /\ req' = TrApply(req, TrStep.post.req))
TraceMatches_loc ==
    TrDiagnosed /\ "loc" \in DOMAIN TrStep.post
        => ENABLED (StepAction(TrStep) /\ loc' = TrApply(loc, TrStep.post.loc))
TraceMatches_gpuOwner ==
    TrDiagnosed /\ "gpuOwner" \in DOMAIN TrStep.post
        => ENABLED (StepAction(TrStep) /\ gpuOwner' = TrApply(gpuOwner, TrStep.post.gpuOwner))
TraceMatches_srcPin ==
    TrDiagnosed /\ "srcPin" \in DOMAIN TrStep.post
        => ENABLED (StepAction(TrStep) /\ srcPin' = TrApply(srcPin, TrStep.post.srcPin))
TraceMatches_hostState ==
    TrDiagnosed /\ "hostState" \in DOMAIN TrStep.post
        => ENABLED (StepAction(TrStep) /\ hostState' = TrApply(hostState, TrStep.post.hostState))
TraceMatches_hostKey ==
    TrDiagnosed /\ "hostKey" \in DOMAIN TrStep.post
        => ENABLED (StepAction(TrStep) /\ hostKey' = TrApply(hostKey, TrStep.post.hostKey))
TraceMatches_prefix ==
    TrDiagnosed /\ "prefix" \in DOMAIN TrStep.post
        => ENABLED (StepAction(TrStep) /\ prefix' = TrApply(prefix, TrStep.post.prefix))
TraceMatches_spill ==
    TrDiagnosed /\ "spill" \in DOMAIN TrStep.post
        => ENABLED (StepAction(TrStep) /\ spill' = TrApply(spill, TrStep.post.spill))
TraceMatches_down ==
    TrDiagnosed /\ "down" \in DOMAIN TrStep.post
        => ENABLED (StepAction(TrStep) /\ down' = TrApply(down, TrStep.post.down))
TraceMatches_up ==
    TrDiagnosed /\ "up" \in DOMAIN TrStep.post
        => ENABLED (StepAction(TrStep) /\ up' = TrApply(up, TrStep.post.up))
TraceMatches_lost ==
    TrDiagnosed /\ "lost" \in DOMAIN TrStep.post
        => ENABLED (StepAction(TrStep) /\ lost' = TrApply(lost, TrStep.post.lost))
TraceMatches_copying ==
    TrDiagnosed /\ "copying" \in DOMAIN TrStep.post
        => ENABLED (StepAction(TrStep) /\ copying' = Nested(TrStep.post.copying, copying))
TraceMatches_waits ==
    TrDiagnosed /\ "waits" \in DOMAIN TrStep.post
        => ENABLED (StepAction(TrStep) /\ waits' = TrApply(waits, TrStep.post.waits))
TraceMatches_reading ==
    TrDiagnosed /\ "reading" \in DOMAIN TrStep.post
        => ENABLED (StepAction(TrStep) /\ reading' = TrApply(reading, TrStep.post.reading))
TraceMatches_wEnq ==
    TrDiagnosed /\ "wEnq" \in DOMAIN TrStep.post
        => ENABLED (StepAction(TrStep) /\ wEnq' = TrApply(wEnq, TrStep.post.wEnq))
TraceMatches_wDone ==
    TrDiagnosed /\ "wDone" \in DOMAIN TrStep.post
        => ENABLED (StepAction(TrStep) /\ wDone' = TrApply(wDone, TrStep.post.wDone))
TraceMatches_gpuData ==
    TrDiagnosed /\ "gpuData" \in DOMAIN TrStep.post
        => ENABLED (StepAction(TrStep) /\ gpuData' = TrApply(gpuData, TrStep.post.gpuData))
TraceMatches_hostData ==
    TrDiagnosed /\ "hostData" \in DOMAIN TrStep.post
        => ENABLED (StepAction(TrStep) /\ hostData' = Nested(TrStep.post.hostData, hostData))
TraceMatches_imp ==
    TrDiagnosed /\ "imp" \in DOMAIN TrStep.post
        => ENABLED (StepAction(TrStep) /\ imp' = TrApply(imp, TrStep.post.imp))
TraceMatches_pg ==
    TrDiagnosed /\ "pg" \in DOMAIN TrStep.post
        => ENABLED (StepAction(TrStep) /\ pg' = TrApply(pg, TrStep.post.pg))

====
