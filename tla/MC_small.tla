------------------------------ MODULE MC_small ------------------------------
(* Seconds: two requests sharing a first page, two GPU blocks, three host  *)
(* block identities over a pool of two whole blocks (5 units / 2 a block). *)
EXTENDS HiSparse, TLC
CONSTANTS r1, r2, g1, g2, h1, h2, h3, k1, k2
MCRequests == {r1, r2}
MCGpuBlocks == {g1, g2}
MCHostBlocks == {h1, h2, h3}
MCKeys == {k1, k2}
MCPageKeys == (r1 :> <<k1, k2>>) @@ (r2 :> <<k1>>)
MCHostPoolBytes == 5
MCHostBlockBytes == 2
MCBug == "none"
MCRanks == {1}
MCWriter == 1
MCBacking == "private"
\* Liveness runs without symmetry (unsound with it) on a smaller instance:
\* two one-page requests with the same content, one GPU and one host block
\* (retired IDs come back, so liveness explores every reuse; each injected
\* property bug is checked one property per run, so this stays seconds).
MCPageKeysLive == (r1 :> <<k1>>) @@ (r2 :> <<k1>>)
MCHostBlocksLive == {h1}
MCGpuBlocksLive == {g1}
MCSymmetry == Permutations(MCGpuBlocks) \cup Permutations(MCHostBlocks)
=============================================================================
