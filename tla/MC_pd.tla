------------------------------- MODULE MC_pd --------------------------------
(* P/D import (docs/pd-import.md): r1 arrives with its prefill KV (two pages, *)
(* two chunks each, the final page mirrored); r2 is an ordinary request with *)
(* r1's first key, so it hits r1's page once published, and holds a GPU block *)
(* that forces r1 onto the host target. Two GPU blocks, three host blocks    *)
(* (6 units / 2 a block), one staging slot, aborts, transport failures,      *)
(* spills, worker loss and retirement with ID reuse.                         *)
EXTENDS HiSparse, TLC
CONSTANTS r1, r2, g1, g2, h1, h2, k1, k2
MCRequests == {r1, r2}
MCImports == {r1}
MCChunks == {1, 2}
MCStagingSlots == 1
MCGpuBlocks == {g1, g2}
MCHostBlocks == {h1, h2}
MCKeys == {k1, k2}
MCPageKeys == (r1 :> <<k1, k2>>) @@ (r2 :> <<k1>>)
MCHostPoolBytes == 5
MCHostBlockBytes == 2
MCBug == "none"
MCRanks == {1}
MCWriter == 1
MCBacking == "private"
\* Liveness (no symmetry): the same requests, one GPU block (r1 lands on the host).
MCGpuBlocksLive == {g1}
MCHostBlocksLive == {h1, h2}
MCSymmetry == Permutations(MCGpuBlocks) \cup Permutations(MCHostBlocks)
=============================================================================
