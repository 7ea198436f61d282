"""Tensor-parallel ranks: one worker process per GPU against one coordinator (issue 12).

``launch(TpOptions(...))`` starts one process per rank; ``run.run_rank`` is one rank's
lockstep loop; ``merge.AckMerge`` is the W-rank ack rule in front of the coordinator;
``group`` carries bytes between the ranks (pipes, or torch.distributed over gloo).
"""

from hisparse.tp.launch import launch
from hisparse.tp.merge import AckMerge, BadRankAck
from hisparse.tp.run import TpOptions, TpRunFailed

__all__ = ["AckMerge", "BadRankAck", "TpOptions", "TpRunFailed", "launch"]
