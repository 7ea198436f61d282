"""Rules that survivors of the whole mutation run's map-decided mutants showed no test
stated (docs/mutation-run7, ninth pass): each test names the mutants it kills."""

from __future__ import annotations

from multiprocessing import shared_memory
from types import SimpleNamespace
from typing import Any

import pytest

from hisparse import sharedpool
from hisparse.bench.cli import _tiling
from hisparse.config import HiSparseConfig
from hisparse.engine.tiling import SMS_TARGET, FusedTiling
from hisparse.executor.errors import ExecutorError
from hisparse.executor.reference import ReferenceExecutor
from hisparse.spec.errors import InvariantViolation
from hisparse.spec.messages import HiSparseConnectorMetadata, SparseKVPageTransfer
from hisparse.tlc.value import ValueSyntaxError, parse_value
from hisparse.worker import HiSparseWorker
from tests.protocol_helpers import make_machine


@pytest.mark.parametrize("entries", [1, 8, 33, 64, 128, 264, 600])
def test_the_split_doubles_until_the_programs_fill_the_gpu_or_a_cap(entries: int) -> None:
    # tiling.py:41:var:6 capped the split by the entry count instead of the key tiles:
    # 64 entries of one head group then got one split, not eight
    t = FusedTiling()
    k = 2048
    s = t.splits(entries, t.heads, k)
    cap = min(t.max_split, -(-k // t.rows))
    assert s >= 1 and s & (s - 1) == 0 and s <= cap
    assert s * entries >= SMS_TARGET or s == cap  # enough programs, or no more splits
    assert s == 1 or (s // 2) * entries < SMS_TARGET  # and no doubling past that
    if entries == 64:
        assert s == 8


@pytest.mark.parametrize(("text", "ok"), [
    ("16,16,4,2", True), ("32,64,8,3", True), ("16,8,4,2", False), ("8,16,4,2", False),
    ("16,24,4,2", False), ("16,16,4", False),
])
def test_bench_tiling_takes_heads_and_rows_powers_of_two_of_at_least_16(
        text: str, ok: bool) -> None:
    # bench/cli.py:208:int:3 and 208:cmp:6 refused ROWS = 16, the least the help allows
    import argparse

    if ok:
        heads, rows, warps, stages = (int(v) for v in text.split(","))
        assert _tiling(text) == FusedTiling(heads=heads, rows=rows, warps=warps,
                                            stages=stages)
    else:
        with pytest.raises(argparse.ArgumentTypeError, match="powers of 2 of at least 16"):
            _tiling(text)


def test_an_attach_refused_as_too_small_closes_the_handle_it_opened(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # a refusal changes nothing: sharedpool.py:53:call:9 left the refused attach's
    # mapping open (the allocation it names stays, the owner's)
    opened: list[shared_memory.SharedMemory] = []

    def recording(*args: Any, **kwargs: Any) -> shared_memory.SharedMemory:
        shm = shared_memory.SharedMemory(*args, **kwargs)
        opened.append(shm)
        return shm

    monkeypatch.setattr(sharedpool, "shared_memory", SimpleNamespace(SharedMemory=recording))
    cfg = HiSparseConfig(host_pool_blocks=4, block_tokens=4, row_bytes=16, top_k=4, layers=1)
    owner = sharedpool.SharedHostPool(cfg.pool_layout(4, 2), 1)
    try:
        with pytest.raises(ExecutorError, match="the layout needs"):
            sharedpool.SharedHostPool(cfg.pool_layout(4, 2), 3, name=owner.name)
        assert len(opened) == 2 and opened[1].buf is None  # closed
        assert owner.shm.buf is not None  # the owner's stays
    finally:
        owner.close()


def test_double_allocation_takes_a_leased_block_after_the_free_ones() -> None:
    # the bug variant's candidates are the free blocks, then the leased ones:
    # machine.py:317:cmp:221 offered the free ones twice (a block for two pages of one
    # request), not the deviation the variant is there to show
    m = make_machine("double_allocation", gpu_blocks=2)
    m.Arrive("r1")  # GPU block 0
    with pytest.raises(InvariantViolation) as e:
        m.Arrive("r0")  # two pages, one free block: block 1, then r1's block 0
    assert str(e.value) == ("invariant NoDoubleOwnership violated: GPU block 0 backs both "
                            "('r0', 2) and ('r1', 1)")


@pytest.mark.parametrize(("text", "tok"), [(")", r"'\)'"), ("@@", "'@@'"), ("|->", r"'\|->'")])
def test_a_value_with_a_token_no_value_starts_with_is_refused_naming_it(
        text: str, tok: str) -> None:
    # tlc/value.py:110:raise:0 returned None for it, to fail later on "trailing text"
    # (inside a tuple or set, with no end: a token never consumed)
    with pytest.raises(ValueSyntaxError, match=rf"^unexpected {tok}$"):
        parse_value(text)


def test_a_transfer_that_names_no_rank_is_taken_by_none() -> None:
    # ranks=() is a list of ranks, empty: no rank copies it (worker.py:220:none:15 read
    # the empty tuple as "not given", every rank)
    cfg = HiSparseConfig(host_pool_blocks=3, block_tokens=4, row_bytes=16, top_k=4, layers=1)
    w = HiSparseWorker(cfg, ReferenceExecutor(), gpu_blocks=4, slots=2, rank=0)
    none = SparseKVPageTransfer.model_construct(transfer_id=5, src_gpu_block=0,
                                                dst_host_block=0, ranks=())
    every = SparseKVPageTransfer.model_construct(transfer_id=7, src_gpu_block=2,
                                                 dst_host_block=2, ranks=None)
    w.apply(HiSparseConnectorMetadata.model_construct(transfers=(none, every),
                                                      replacements=()))
    assert w.executor.queued() == [7]

