"""How the step's Triton kernels tile their work (no torch here: CI tests the arithmetic).

A program takes ``heads`` heads of one entry over one split of its top-K, ``rows`` rows
at a time. At small batches one entry's heads alone leave most SMs idle, so the top-K is
split across programs (a merge kernel sums the parts); at large batches one split is
enough and the single-split kernel writes the output itself.
"""

from __future__ import annotations

from dataclasses import dataclass

SCAN_TILES = 2
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


SMALL_BATCH_TILING = FusedTiling(heads=16, rows=32, warps=4, max_split=32)
"""Few entries: small head blocks and many splits keep the SMs busy (H200, 2026-12-02,
``bench engine-kernels``: 18.9 µs at one entry against 27.6 for ``LARGE_BATCH_TILING``)."""
LARGE_BATCH_TILING = FusedTiling(heads=64, rows=32, warps=8)
"""Many entries: a program reads and converts each row once for 64 heads (206.8 µs at
32 entries against 383.3 for 16 heads; 63.3 against 100.0 at 8)."""
SMALL_BATCH = 4
"""Entries below which ``pick_tiling`` takes the small-batch tiling (measured at 1 and 8
only: the crossover between them is a guess)."""


def pick_tiling(entries: int) -> FusedTiling:
    """The measured-best tiling for a launch of ``entries`` entries."""
    return SMALL_BATCH_TILING if entries < SMALL_BATCH else LARGE_BATCH_TILING
