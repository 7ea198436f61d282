"""Tensor-parallel ranks: one worker process per GPU against one coordinator (issue 12).

``launch(TpOptions(...))`` starts one process per rank; ``run.run_rank`` is one rank's
lockstep loop, every rank's worker meta consumed by the coordinator with ranks
(``HiSparseConfig.tp_ranks``); ``group`` carries bytes between the ranks (pipes, or
torch.distributed over gloo).
"""

from hisparse.tp.launch import launch
from hisparse.tp.run import TpOptions, TpRunFailed

__all__ = ["TpOptions", "TpRunFailed", "launch"]
