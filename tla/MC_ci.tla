-------------------------------- MODULE MC_ci --------------------------------
(* CI: three requests (two share their page's content), two GPU blocks,  *)
(* two host blocks (5 units / 2 a block), aborts, batched acks, worker    *)
(* loss and retirement with ID reuse enabled. Safety is exhaustive under  *)
(* block symmetry and the symmetry of r1/r2 (same content); liveness (no  *)
(* symmetry) runs on r1/r2, one GPU and two host blocks. Retired IDs come *)
(* back, so every configuration of a bigger pool is reachable: MC_deep    *)
(* keeps the three-GPU, four-host-block instance for runs by hand.        *)
EXTENDS HiSparse, TLC
CONSTANTS r1, r2, r3, g1, g2, h1, h2, k1, k2
MCRequests == {r1, r2, r3}
MCGpuBlocks == {g1, g2}
MCHostBlocks == {h1, h2}
MCKeys == {k1, k2}
MCPageKeys == (r1 :> <<k1>>) @@ (r2 :> <<k1>>) @@ (r3 :> <<k2>>)
MCHostPoolBytes == 5
MCHostBlockBytes == 2
MCBug == "none"
MCRanks == {1}
MCWriter == 1
MCBacking == "private"
MCRequestsLive == {r1, r2}
MCGpuBlocksLive == {g1}
\* (with the faulty channels, two host blocks give 14,895 distinct states: 52 s
\* on the idle 2-core machine with two TLC workers, 327 s on one loaded worker)
MCHostBlocksLive == {h1, h2}
MCSymmetry ==
    Permutations(MCGpuBlocks) \cup Permutations(MCHostBlocks) \cup Permutations({r1, r2})
=============================================================================
