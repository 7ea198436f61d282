------------------------------ MODULE MC_suffix ------------------------------
(* Seconds: a three-page request; every combination of host hit, GPU     *)
(* indexer hit and OffloadingConnector block states, with the store's    *)
(* concurrent stores and evictions before, during and after the restore. *)
EXTENDS IndexerSuffix
MCN == 3
MCBug == "none"
=============================================================================
