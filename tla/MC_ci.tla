-------------------------------- MODULE MC_ci --------------------------------
(* CI: three requests (two share a first page, one a two-page prefix),    *)
(* three GPU blocks, four host blocks (9 units / 2 a block), aborts and   *)
(* batched acks enabled. Safety is exhaustive under block symmetry.       *)
EXTENDS HiSparse, TLC
CONSTANTS r1, r2, r3, g1, g2, g3, h1, h2, h3, h4, k1, k2, k3
MCRequests == {r1, r2, r3}
MCGpuBlocks == {g1, g2, g3}
MCHostBlocks == {h1, h2, h3, h4}
MCKeys == {k1, k2, k3}
MCPageKeys == (r1 :> <<k1, k2>>) @@ (r2 :> <<k1>>) @@ (r3 :> <<k1, k3>>)
MCHostPoolBytes == 9
MCHostBlockBytes == 2
MCBug == "none"
MCSymmetry == Permutations(MCGpuBlocks) \cup Permutations(MCHostBlocks)
=============================================================================
