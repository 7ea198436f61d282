"""Toy pool sizes for ``hisparse simulate --workload mooncake`` without ``--model``.

The toy defaults (56 GPU blocks) are the synthetic workload's; a Mooncake prompt is up
to 126,195 tokens, so without a budget from the user the pools are sized from the
replayed requests: the GPU pool holds the longest of them twice, the host pool four
GPU pools. No request is then "never admitted" unless a budget the user gave is short.
"""

from __future__ import annotations

from hisparse.workload import Arrival

MIN_GPU_BLOCKS = 56  # the synthetic default: never smaller


def admitting_pools(arrivals: list[Arrival]) -> tuple[int, int]:
    """(GPU blocks, host blocks) that admit every one of ``arrivals``."""
    longest = max((len(a.page_keys) for a in arrivals), default=0)
    gpu = max(MIN_GPU_BLOCKS, 2 * longest)
    return gpu, 4 * gpu
