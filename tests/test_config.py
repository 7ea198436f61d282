"""HiSparseConfig: defaults, the realized host pool, and refusals that say what to change."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from hisparse.config import DSV32_ROW_BYTES, GIB, HiSparseConfig


def test_defaults_follow_deepseek_v32() -> None:
    c = HiSparseConfig(host_pool_gib=1)
    assert (c.row_bytes, c.top_k, c.hot) == (656, 2048, 4096)
    assert DSV32_ROW_BYTES == 656


def test_speculation_raises_the_default_hot_rows() -> None:
    assert HiSparseConfig(host_pool_gib=1, num_speculative_tokens=2).hot == 4 * 2048


def test_host_pool_rounds_down_to_whole_blocks() -> None:
    c = HiSparseConfig(host_pool_gib=1, block_tokens=64, layers=61)
    block = 64 * 656 * 61
    assert c.host_block_bytes == block
    assert c.host_blocks == GIB // block
    assert c.host_pool_bytes == (GIB // block) * block <= GIB


@pytest.mark.parametrize(
    ("kwargs", "hint"),
    [
        ({"hot_rows": 2047}, "raise hot_rows"),
        ({"hot_rows": 4095, "num_speculative_tokens": 1}, "raise hot_rows"),
        ({"row_bytes": 650}, "multiple of 16"),
        ({"host_pool_gib": 1e-9}, "raise host_pool_gib"),
        ({"layers": 3, "index_leaders": (0, 0)}, "one leader per layer"),
        ({"layers": 3, "index_leaders": (0, 2, 2)}, "layer 1 follows layer 2"),
        ({"layers": 3, "index_leaders": (0, 0, 1)}, "layer 2 follows layer 1"),
        ({"unknown": 1}, "extra"),
    ],
)
def test_invalid_configs_say_what_to_change(kwargs: dict[str, object], hint: str) -> None:
    args: dict[str, object] = {"host_pool_gib": 1, **kwargs}
    with pytest.raises(ValidationError, match=hint):
        HiSparseConfig(**args)  # type: ignore[arg-type]


def test_followers() -> None:
    c = HiSparseConfig(host_pool_gib=1, layers=4, index_leaders=(0, 0, 2, 2))
    assert [c.is_follower(i) for i in range(4)] == [False, True, False, True]


def test_host_pool_in_blocks_or_gib_but_not_both() -> None:
    c = HiSparseConfig(host_pool_blocks=3, block_tokens=16, row_bytes=32, layers=2)
    assert (c.host_blocks, c.host_pool_bytes) == (3, 3 * 16 * 32 * 2)
    assert c == c.model_copy()
    same = HiSparseConfig(host_pool_gib=c.host_pool_bytes / GIB, block_tokens=16, row_bytes=32,
                          layers=2)
    assert same.host_blocks == 3
    for kwargs in ({}, {"host_pool_gib": 1, "host_pool_blocks": 3}, {"host_pool_blocks": 0}):
        with pytest.raises(ValidationError):
            HiSparseConfig(**kwargs)  # type: ignore[arg-type]


def test_protocol_and_pools_take_their_shapes_from_the_config() -> None:
    c = HiSparseConfig(host_pool_blocks=5, block_tokens=16, row_bytes=32, top_k=4,
                       num_speculative_tokens=1)
    p = c.protocol(gpu_blocks=7)
    assert (p.gpu_blocks, p.host_blocks, p.host_capacity) == (7, 5, 5)
    assert (p.host_pool_bytes, p.host_block_bytes) == (c.host_pool_bytes, c.host_block_bytes)
    spec = c.pool_layout(gpu_blocks=7, slots=2)
    assert (spec.gpu_blocks, spec.host_blocks, spec.hot_rows, spec.slots) == (7, 5, c.hot, 2)
    assert (spec.block_tokens, spec.row_bytes) == (16, 32)
