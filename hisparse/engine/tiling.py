"""How the step's Triton kernels tile their work (no torch here: CI tests the arithmetic).

A program takes ``heads`` heads of one entry over one split of its top-K, ``rows`` rows
at a time. At small batches one entry's heads alone leave most SMs idle, so the top-K is
split across programs (a merge kernel sums the parts); at large batches one split is
enough and the single-split kernel writes the output itself.
"""

from __future__ import annotations

from dataclasses import dataclass

SCAN_TILES = 1
"""Key tiles of 128 positions per program of the FP8 indexer scan (its queries loaded
once for all of them); ``bench engine-kernels`` measures the choice."""
SCAN_WARPS = 4
SMS_TARGET = 264
"""Programs a launch aims for (two per SM of an H100/H200) when choosing the split."""


@dataclass(frozen=True)
class FusedTiling:
    """The fused kernel's tile sizes: heads per program, rows per tile, warps, and the
    top-K split (0: chosen from the batch so the launch fills the GPU, at most
    ``max_split``: the merge reads every split's partial sums)."""

    heads: int = 16
    rows: int = 32
    warps: int = 4
    stages: int = 2
    split: int = 0
    max_split: int = 16

    def splits(self, entries: int, heads: int, k: int) -> int:
        if self.split:
            return max(1, min(self.split, -(-k // self.rows)))
        programs = entries * -(-heads // self.heads)
        want = max(1, -(-SMS_TARGET // programs))
        most = max(1, -(-k // self.rows))
        s = 1
        while s < want and s < most and s < self.max_split:
            s *= 2
        return min(s, most)


DEFAULT_TILING = FusedTiling()
