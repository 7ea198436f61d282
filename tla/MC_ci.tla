-------------------------------- MODULE MC_ci --------------------------------
(* CI: three requests (two share their page's content), three GPU blocks, *)
(* four host blocks (9 units / 2 a block), aborts and batched acks        *)
(* enabled. Safety is exhaustive under block symmetry; liveness (no       *)
(* symmetry) runs on one GPU and two host blocks.                         *)
EXTENDS HiSparse, TLC
CONSTANTS r1, r2, r3, g1, g2, g3, h1, h2, h3, h4, k1, k2
MCRequests == {r1, r2, r3}
MCGpuBlocks == {g1, g2, g3}
MCHostBlocks == {h1, h2, h3, h4}
MCKeys == {k1, k2}
MCPageKeys == (r1 :> <<k1>>) @@ (r2 :> <<k1>>) @@ (r3 :> <<k2>>)
MCHostPoolBytes == 9
MCHostBlockBytes == 2
MCBug == "none"
MCGpuBlocksLive == {g1}
MCHostBlocksLive == {h1, h2}
MCSymmetry == Permutations(MCGpuBlocks) \cup Permutations(MCHostBlocks)
=============================================================================
