-------------------------------- MODULE MC_tp --------------------------------
(* Tensor parallel, two ranks. One request of one page (retirement lets *)
(* its ID come back, so it hits its own published page), one GPU block,  *)
(* aborts, batched acks, per-rank worker loss, ID reuse.                 *)
(* MC_tp.cfg / MC_tp_live.cfg: a private host pool per rank, one host    *)
(* block (each rank writes its own copy; two blocks give 330,803 states, *)
(* 4.5 min on one worker, kept out of CI).                              *)
(* MC_tpshared*.cfg (module MC_tpshared): one shared allocation written  *)
(* by rank 1; safety with two host blocks under symmetry, liveness with  *)
(* one.                                                                  *)
EXTENDS HiSparse, TLC
CONSTANTS r1, r2, g1, g2, h1, h2, k1, k2
MCRequests == {r1}
MCGpuBlocks == {g1}
MCHostBlocks == {h1, h2}
MCHostBlocksOne == {h1}
MCKeys == {k1}
MCPageKeys == (r1 :> <<k1>>)
MCHostPoolBytes == 4
MCHostBlockBytes == 2
MCBug == "none"
MCRanks == {1, 2}
MCWriter == 1
MCPrivate == "private"
MCShared == "shared"
MCSymmetry == Permutations(MCHostBlocks)
=============================================================================
