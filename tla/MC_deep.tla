-------------------------------- MODULE MC_deep --------------------------------
(* Deep, by hand: the CI instance with multi-page requests (r3 shares a    *)
(* one-page prefix with r1, r2 its first page), three keys. Safety only,   *)
(* exhaustive under block symmetry.                                        *)
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
MCRanks == {1}
MCWriter == 1
MCBacking == "private"
MCSymmetry == Permutations(MCGpuBlocks) \cup Permutations(MCHostBlocks)
=============================================================================
