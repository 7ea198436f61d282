"""The fused sparse MLA attention kernel against the torch path it replaces.

Everywhere: the split arithmetic (how many programs share one entry's top-K). GPU (marked ``gpu``): over random FP8 rows with padding, a ragged top-K and
head counts that are not a multiple of the tile, ``latent_fused`` equals ``latent_torch``
to bf16 rounding for every tiling and refuses a query of the wrong width; an all-padding entry gives exact zeros; and the same
rows at other places in another storage give the same bits (what the engine lockstep
needs of attention: only the bytes and their order matter, never where a row lives).
"""

from __future__ import annotations

from typing import Any

import pytest

from hisparse.engine.tiling import (
    LARGE_BATCH_TILING,
    SMALL_BATCH,
    SMALL_BATCH_TILING,
    SMS_TARGET,
    FusedTiling,
    pick_tiling,
)

TILINGS = [FusedTiling(), FusedTiling(split=1), FusedTiling(heads=32, rows=32, warps=8),
           FusedTiling(rows=64, split=4), FusedTiling(heads=16, rows=16, split=7),
           FusedTiling(heads=64, rows=16, warps=8), FusedTiling(rows=16, split=3)]


def test_tiling_follows_the_batch() -> None:
    assert pick_tiling(1) == pick_tiling(SMALL_BATCH - 1) == SMALL_BATCH_TILING
    assert pick_tiling(SMALL_BATCH) == pick_tiling(256) == LARGE_BATCH_TILING
    assert SMALL_BATCH_TILING.splits(1, 128, 2048) == 32  # 8 head blocks x 32 splits
    assert LARGE_BATCH_TILING.splits(32, 128, 2048) == 8  # 64 programs want 5: 8


def test_split_fills_the_gpu_and_never_exceeds_the_tiles() -> None:
    t = FusedTiling(heads=16, rows=32)
    assert t.splits(1, 128, 2048) == 16  # 8 head blocks want 33 splits: capped
    assert FusedTiling(max_split=64).splits(1, 128, 2048) == 64  # the power of 2 above 33
    assert FusedTiling(max_split=64).splits(1, 128, 2048) * 8 >= SMS_TARGET
    assert t.splits(4, 128, 2048) == 16 and t.splits(8, 128, 2048) == 8
    assert t.splits(64, 128, 2048) == 1  # 512 programs already
    assert t.splits(1, 128, 40) == 2  # at most one split per tile of rows
    assert FusedTiling(split=8).splits(1, 128, 2048) == 8
    assert FusedTiling(split=8, rows=64).splits(1, 128, 100) == 2


def _rows(n: int, gen: Any, dev: Any) -> Any:
    """int64 [n, 82]: n packed FP8 rows of random latents and RoPE values."""
    import torch

    from hisparse.engine.kvrow import as_words, pack_rows

    lat = torch.randn(n, 512, generator=gen, device=dev) * 2
    rope = torch.randn(n, 64, generator=gen, device=dev)
    return as_words(pack_rows(lat, rope))


@pytest.mark.gpu
@pytest.mark.parametrize("tiling", TILINGS, ids=lambda t: f"h{t.heads}r{t.rows}w{t.warps}s{t.split}")
def test_fused_equals_torch_path(tiling: FusedTiling) -> None:
    import torch

    from hisparse.engine.attention import latent_fused, latent_torch

    dev = torch.device("cuda:0")
    gen = torch.Generator(device=dev).manual_seed(11)
    for e, h, k, r in ((3, 128, 2048, 5000), (2, 20, 100, 300), (1, 4, 37, 64)):
        words = _rows(r, gen, dev)
        rows = torch.randint(0, r, (e, k), generator=gen, device=dev, dtype=torch.int32)
        rows[:, : k // 5] = -1  # padding first, as the top-K puts it
        rows[0, -3:] = -1  # and a few anywhere
        q = (torch.randn(e, h, 576, generator=gen, device=dev) * 0.3).to(torch.bfloat16)
        got = latent_fused(q, words, rows, 0.07, tiling).float()
        ref = latent_torch(q, words, rows, 0.07).float()
        assert got.shape == (e, h, 512)
        assert torch.isfinite(got).all()
        err = float((got - ref).abs().max() / ref.abs().max())
        assert err < 3e-2, (e, h, k, err)
        again = latent_fused(q, words, rows, 0.07, tiling)
        assert torch.equal(again.float(), got)  # deterministic: no atomics
    with pytest.raises(ValueError, match="576"):
        latent_fused(q[..., :500], words, rows, 0.07, tiling)


@pytest.mark.gpu
def test_padding_never_counts_and_placement_never_matters() -> None:
    import torch

    from hisparse.engine.attention import latent_fused

    dev = torch.device("cuda:0")
    gen = torch.Generator(device=dev).manual_seed(3)
    words = _rows(4096, gen, dev)
    rows = torch.randint(1, 4096, (4, 2048), generator=gen, device=dev)
    rows[1] = -1
    rows[2, ::3] = -1
    q = (torch.randn(4, 128, 576, generator=gen, device=dev) * 0.3).to(torch.bfloat16)
    garbage = words.clone()
    garbage[0] = -1  # padding reads row 0: all 0xFF bytes there (FP8 and scale NaNs)
    for tiling in TILINGS:
        out = latent_fused(q, words, rows, 0.07, tiling)
        assert torch.isfinite(out.float()).all()
        # a padded row's bytes never count
        assert torch.equal(latent_fused(q, garbage, rows, 0.07, tiling), out)
        assert torch.equal(out[1].float(), torch.zeros_like(out[1].float()))
        perm = torch.randperm(4096, generator=gen, device=dev)
        moved = torch.empty_like(words)
        moved[perm] = words  # row i now lives at perm[i]
        where = torch.where(rows >= 0, perm[rows.clamp(min=0)], -1).to(torch.int32)
        assert torch.equal(latent_fused(q, moved, where, 0.07, tiling), out)
