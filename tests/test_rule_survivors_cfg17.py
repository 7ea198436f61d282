"""Config rules met by the whole mutation run's seventeenth pass (docs/mutation-survivors.md):
each size field's least allowed value reaches the rule that decides it (``int`` raised
a bound by one: ``config.py:55:int:3``, ``constants.py:31:int:2``), and an empty host
pool is refused by the check that says how to fix it, not by a field bound
(``constants.py:30:int:1``)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from hisparse.config import HiSparseConfig
from hisparse.spec.constants import ProtocolConfig


@pytest.mark.parametrize("row_bytes", [1, 15, 17])
def test_a_row_of_positive_bytes_off_16_is_refused_with_the_padding_fix(row_bytes: int) -> None:
    # one byte is a row size the field allows; the copy kernel's 16-byte rule refuses
    # it, saying how to pad (not a field bound)
    pad = -(-row_bytes // 16) * 16
    with pytest.raises(ValidationError, match=f"row_bytes={row_bytes} is not a multiple of "
                       f"16 for the GPU copy kernel: pad rows to {pad} "):
        HiSparseConfig(host_pool_blocks=2, row_bytes=row_bytes)


def test_the_least_protocol_sizes_are_a_valid_config() -> None:
    c = ProtocolConfig(gpu_blocks=1, host_pool_bytes=1, host_block_bytes=1)
    assert (c.host_blocks, c.host_capacity) == (1, 1)


@pytest.mark.parametrize("pool_bytes", [0, 1])
def test_a_host_pool_holding_no_whole_block_is_refused_with_the_fix(pool_bytes: int) -> None:
    with pytest.raises(ValidationError, match="the host pool holds no whole block: raise "
                       "host_pool_bytes to at least host_block_bytes \\(2\\)"):
        ProtocolConfig(gpu_blocks=1, host_pool_bytes=pool_bytes, host_block_bytes=2)
