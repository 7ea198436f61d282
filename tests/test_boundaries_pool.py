"""The block pool and the configs at their limits: refusals change nothing, limits are exact."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import ValidationError

from hisparse.blockpool import BlockPool, BlockPoolError, narrow_gpu_block
from hisparse.config import GIB, HiSparseConfig
from hisparse.spec.state import HostBlock


def pool_state(p: BlockPool) -> Any:
    return (sorted(p._free), list(p._is_free), set(p._pinned), p.num_free)


def refused(p: BlockPool, call: Any) -> None:
    before = copy.deepcopy(pool_state(p))
    with pytest.raises(BlockPoolError):
        call()
    assert pool_state(p) == before


def test_pool_size_boundary() -> None:
    with pytest.raises(ValueError):
        BlockPool(0)
    with pytest.raises(ValueError):
        BlockPool(-1)
    p = BlockPool(1)
    assert p.num_free == 1 and p.allocate(1) == [0] and p.num_free == 0


def test_allocate_boundaries() -> None:
    p = BlockPool(3)
    refused(p, lambda: p.allocate(-1))
    assert p.allocate(0) == []
    before = pool_state(p)
    assert p.allocate(4) is None  # one past: no side effect
    assert pool_state(p) == before
    assert p.allocate(3) == [0, 1, 2]  # exactly all, lowest first
    assert p.allocate(1) is None and p.num_free == 0


def test_lowest_free_block_first_after_frees() -> None:
    p = BlockPool(4)
    assert p.allocate(4) == [0, 1, 2, 3]
    p.free([3, 1])
    assert p.allocate(1) == [1]
    assert p.allocate(1) == [3]


@pytest.mark.parametrize("block", [-1, 3, HostBlock(0)])
def test_unknown_blocks_are_refused_everywhere(block: int) -> None:
    p = BlockPool(3)
    p.allocate(3)
    refused(p, lambda: p.free([block]))
    refused(p, lambda: p.pin(block))
    refused(p, lambda: p.unpin(block))
    refused(p, lambda: p.is_free(block))


@pytest.mark.parametrize("block", [-1, 3])
def test_out_of_range_refusals_name_the_range(block: int) -> None:
    """Refused as outside the pool, not as a block in the wrong pin or free state."""
    p = BlockPool(3)
    p.allocate(3)
    p.pin(1)
    calls = (lambda: p.pin(block), lambda: p.unpin(block), lambda: p.free([block]),
             lambda: p.is_free(block))
    for call in calls:
        with pytest.raises(BlockPoolError, match="is not a block of this pool"):
            call()


def test_host_block_id_never_passes_for_a_pinned_gpu_block() -> None:
    p = BlockPool(3)
    p.allocate(1)
    p.pin(0)
    refused(p, lambda: p.unpin(HostBlock(0)))  # equal as an int, but the wrong kind
    refused(p, lambda: p.free([HostBlock(0)]))
    assert p.is_pinned(0)


def test_last_block_is_inside() -> None:
    p = BlockPool(3)
    p.allocate(3)
    assert p.is_free(2) is False
    p.pin(2)
    assert p.is_pinned(2)
    p.unpin(2)
    assert not p.is_pinned(2)
    p.free([2])
    assert p.is_free(2)


def test_free_is_all_or_nothing() -> None:
    p = BlockPool(4)
    p.allocate(3)  # 0, 1, 2 taken; 3 free
    refused(p, lambda: p.free([0, 3]))  # 3 is already free: 0 stays taken
    refused(p, lambda: p.free([0, 0]))  # duplicate
    p.pin(1)
    refused(p, lambda: p.free([0, 1]))  # 1 is pinned: 0 stays taken
    refused(p, lambda: p.pin(1))  # already pinned
    refused(p, lambda: p.pin(3))  # free blocks cannot be pinned
    p.unpin(1)
    refused(p, lambda: p.unpin(1))  # not pinned any more
    p.free([0, 1])
    assert p.num_free == 3 and p.is_free(0) and p.is_free(1)


def test_narrow_gpu_block() -> None:
    with pytest.raises(BlockPoolError):
        narrow_gpu_block(None, 0)
    with pytest.raises(BlockPoolError):
        narrow_gpu_block(0, HostBlock(1))
    assert narrow_gpu_block(0, 0) == 0
    assert narrow_gpu_block(2, 5) == 5


# --- HiSparseConfig ------------------------------------------------------------------------

ONE_BLOCK = 64 * 656 / GIB  # host_pool_gib holding exactly one default host block


@pytest.mark.parametrize(
    "kwargs",
    [
        {"host_pool_gib": 0},
        {"host_pool_gib": -1},
        {"host_pool_gib": ONE_BLOCK * 0.999},
        {"host_pool_gib": 1, "block_tokens": 0},
        {"host_pool_gib": 1, "row_bytes": 0},
        {"host_pool_gib": 1, "row_bytes": 8},
        {"host_pool_gib": 1, "row_bytes": 24},
        {"host_pool_gib": 1, "top_k": 0},
        {"host_pool_gib": 1, "num_speculative_tokens": -1},
        {"host_pool_gib": 1, "layers": 0},
        {"host_pool_gib": 1, "top_k": 4, "hot_rows": 3},
        {"host_pool_gib": 1, "top_k": 4, "num_speculative_tokens": 2, "hot_rows": 11},
        {"host_pool_gib": 1, "layers": 2, "index_leaders": (0,)},
        {"host_pool_gib": 1, "layers": 2, "index_leaders": (0, 0, 0)},
        {"host_pool_gib": 1, "layers": 2, "index_leaders": (0, -1)},
        {"host_pool_gib": 1, "layers": 2, "index_leaders": (1, 1)},
        {"host_pool_gib": 1, "layers": 2, "index_leaders": (0, 2)},
        {"host_pool_gib": 1, "layers": 3, "index_leaders": (0, 0, 1)},
    ],
)
def test_config_outside(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        HiSparseConfig(**kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"host_pool_gib": ONE_BLOCK},
        {"host_pool_gib": 1, "block_tokens": 1},
        {"host_pool_gib": 1, "row_bytes": 16},
        {"host_pool_gib": 1, "top_k": 1},
        {"host_pool_gib": 1, "num_speculative_tokens": 0},
        {"host_pool_gib": 1, "layers": 1},
        {"host_pool_gib": 1, "top_k": 4, "hot_rows": 4},
        {"host_pool_gib": 1, "top_k": 4, "num_speculative_tokens": 2, "hot_rows": 12},
        {"host_pool_gib": 1, "layers": 2, "index_leaders": (0, 1)},
        {"host_pool_gib": 1, "layers": 2, "index_leaders": (0, 0)},
        {"host_pool_gib": 1, "layers": 3, "index_leaders": (0, 1, 1)},
    ],
)
def test_config_inside(kwargs: dict[str, Any]) -> None:
    HiSparseConfig(**kwargs)


def test_config_derived_sizes_are_exact() -> None:
    c = HiSparseConfig(host_pool_gib=ONE_BLOCK)
    assert (c.host_blocks, c.host_pool_bytes, c.host_block_bytes) == (1, 64 * 656, 64 * 656)
    c = HiSparseConfig(host_pool_gib=3 * 16 * 32 * 2 / GIB, block_tokens=16, row_bytes=32,
                       layers=2, top_k=3, num_speculative_tokens=2)
    assert (c.host_block_bytes, c.host_blocks, c.host_pool_bytes) == (1024, 3, 3072)
    assert (c.min_hot_rows, c.default_hot_rows, c.hot) == (9, 12, 12)
    assert HiSparseConfig(host_pool_gib=1, top_k=3, hot_rows=5).hot == 5
    assert c.leaders == (0, 1) and not c.is_follower(1)
    f = HiSparseConfig(host_pool_gib=1, layers=3, index_leaders=(0, 0, 2))
    assert f.leaders == (0, 0, 2)
    assert [f.is_follower(i) for i in range(3)] == [False, True, False]
