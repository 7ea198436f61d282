----------------------------- MODULE MC_tpshared -----------------------------
(* Tensor parallel, two ranks, one shared host allocation written by rank *)
(* 1: the instance of MC_tp with Backing = "shared" (see MC_tp).          *)
EXTENDS MC_tp
=============================================================================
