"""Config rules met by the whole mutation run's sixteenth pass
(docs/mutation-survivors.md): a GPU budget that holds one whole block is a budget."""

from __future__ import annotations

import pytest

from hisparse.config import GIB, HiSparseConfig


def _config(gpu_kv_gib: float) -> HiSparseConfig:
    return HiSparseConfig(host_pool_blocks=4, top_k=64, block_tokens=64, gpu_kv_gib=gpu_kv_gib)


def test_a_gpu_budget_of_the_hot_rows_and_one_block_holds_one_block() -> None:
    # at least 1 takes 1 (config.py:87:cmp:11 and 87:int:11 refused a budget of one block)
    probe = _config(1.0)
    exact = probe.hot_slots * probe.hot_bytes + probe.host_block_bytes  # bytes: one block
    assert int(exact / GIB * GIB) == exact  # a power-of-two denominator: exact in a float
    one = _config(exact / GIB)
    assert one.gpu_blocks == 1
    with pytest.raises(ValueError, match=r"holds no whole GPU block once 1 requests' hot rows"):
        _config((exact - 1) / GIB)


def test_hot_rows_of_zero_are_refused_by_the_hot_row_rule() -> None:
    # only None means "the default"; 0 is a count, and below any top-K
    # (config.py:78:none:6 took 0 for None, skipped the rule and built a config with no
    # hot row, which config.py:119 then read as the default)
    with pytest.raises(ValueError, match=r"hot_rows=0 is below 64 = "):
        HiSparseConfig(host_pool_blocks=4, top_k=64, block_tokens=64, hot_rows=0)
    assert HiSparseConfig(host_pool_blocks=4, top_k=64, block_tokens=64, hot_rows=64).hot == 64
