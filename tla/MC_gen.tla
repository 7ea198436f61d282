------------------------------ MODULE MC_gen --------------------------------
(* Tests generated from the model: TLC dumps this model's whole state      *)
(* graph (no SYMMETRY, so every edge is a real successor) and each of its  *)
(* transitions is replayed on the Python machine (hisparse.conformance).   *)
(* Two requests sharing a first page, two GPU blocks, two host block IDs   *)
(* over a pool of one whole block (3 units / 2 a block). Retirement makes  *)
(* request IDs come back and WorkerLoss is enabled in every state, so the  *)
(* graph holds ID reuse and abandoned transfers.                           *)
EXTENDS HiSparse, TLC
CONSTANTS r1, r2, g1, g2, h1, h2, k1, k2
MCRequests == {r1, r2}
MCGpuBlocks == {g1, g2}
MCHostBlocks == {h1, h2}
MCKeys == {k1, k2}
MCPageKeys == (r1 :> <<k1, k2>>) @@ (r2 :> <<k1>>)
MCHostPoolBytes == 3
MCHostBlockBytes == 2
MCBug == "none"
MCRanks == {1}
MCWriter == 1
MCBacking == "private"
=============================================================================
