"""The order in which the coordinator reads a worker meta (``on_worker_meta``), from the
nineteenth mutation pass (docs/mutation-survivors.md): who sent it first (its rank),
then whether it is news (its numbers), then what it says (its IDs). A meta numbered as
one already taken, or as sent before a loss, is dropped by its numbers alone: counted
as ignored, its body never read. An unvalidated meta (``model_construct``: an engine
in the same process) is the only way to reach these orders; bytes are validated whole
where they are parsed.
"""

from __future__ import annotations

import pytest

from hisparse.blockpool import BlockPool
from hisparse.config import HiSparseConfig
from hisparse.coordinator import HiSparseCoordinator
from hisparse.spec.errors import UnknownRank
from hisparse.spec.messages import HiSparseWorkerMeta

CFG = HiSparseConfig(host_pool_blocks=4, block_tokens=16, row_bytes=64, top_k=16)


def _coordinator() -> HiSparseCoordinator:
    return HiSparseCoordinator(CFG, BlockPool(2), gpu_blocks=2, check=True)


def test_a_meta_from_an_unknown_rank_is_refused_as_such_whatever_its_numbers() -> None:
    # kills hisparse/coordinator.py:657:reorder:8 (the numbers were read first: a meta
    # of an unknown rank with malformed numbers was refused as BadSequence)
    c = _coordinator()
    before = c.state.clone()
    bad = HiSparseWorkerMeta.model_construct(enqueued=(), completed=(), rank=5, seq="x",
                                             since=0, epoch=0)
    with pytest.raises(UnknownRank):
        c.on_worker_meta(bad)
    assert c.state == before and c.metas_ignored == 0


def test_a_replay_is_dropped_by_its_numbers_alone() -> None:
    # kills hisparse/coordinator.py:667:reorder:9 (the IDs were read before the numbers:
    # a replay whose body is not IDs was refused instead of dropped)
    c = _coordinator()
    c.on_worker_meta(HiSparseWorkerMeta(enqueued=(), completed=(), rank=0, seq=0, since=0,
                                        epoch=0))
    before = c.state.clone()
    replay = HiSparseWorkerMeta.model_construct(enqueued=("x",), completed=None, rank=0,
                                                seq=0, since=0, epoch=0)
    c.on_worker_meta(replay)  # already taken: ignored, unread
    assert c.state == before and c.metas_ignored == 1
