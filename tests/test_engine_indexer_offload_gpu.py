"""Issue 23 on the GPU: the engine's indexer group offloaded through the OffloadingConnector.

GPU tests only (marked ``gpu``; torch is imported once the marker has let them run):
- the torch worker stores an ``IndexCache``'s blocks to pinned host tensors and restores
  them into other blocks byte for byte (bf16 keys, and FP8 bits plus float32 scales);
- a HiSparse engine whose indexer keys are stored at spills and restored at admission by
  the suffix rule, and the all-resident oracle that computes every key, stay
  token-identical with bit-identical logits, and end with byte-identical indexer rows:
  once with a store large enough that the sharers' suffixes are restored, once with one
  so small that their stores are refused and the suffix rule falls back (HiSparse's hit
  capped, every key recomputed). Each run asserts its stores, restores or fallbacks
  happened, so neither passes vacuously.

The CPU side of the same glue (plan, cap, byte-exact numpy restore, fallback) is in
tests/test_engine.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from hisparse.engine.config import EngineShape, ModelShape
from hisparse.engine.workload import make_request


def _bytes(t: Any) -> Any:
    """A tensor's bytes (uint8; a view when ``t`` is contiguous), so random bits that
    spell NaN still compare equal."""
    import torch

    return t.contiguous().view(-1).view(torch.uint8)


@pytest.mark.gpu
@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
def test_index_cache_store_then_restore_is_byte_exact(fp8: bool) -> None:
    import torch

    from hisparse.connectors.base import KVLayout
    from hisparse.connectors.offload_store import chain_hashes
    from hisparse.connectors.offloading import OffloadingScheduler
    from hisparse.engine.cache import IndexCache
    from hisparse.engine.offload_gpu import IndexCacheWorker

    dev = torch.device("cuda:0")
    model = ModelShape(index_fp8=fp8)
    shape = EngineShape(slots=2, max_context=512, top_k=64, block_tokens=64)
    index = IndexCache(model, shape, dev)
    gen = torch.Generator(device=dev).manual_seed(3)
    for t in index.tensors():  # random bits in every row, every tensor
        b = _bytes(t)
        b.copy_(torch.randint(0, 256, b.shape, generator=gen, device=dev, dtype=torch.uint8))
    torch.cuda.synchronize(dev)
    before = [t.clone() for t in index.tensors()]
    stream = torch.cuda.Stream(device=dev)
    layout = KVLayout(block_tokens=shape.block_tokens)
    worker = IndexCacheWorker(layout, index, 4, stream)
    assert worker.block_bytes == len(model.leaders) * shape.block_tokens * model.index_key_bytes
    offload = OffloadingScheduler(layout, worker.block_bytes, 4)
    hashes = chain_hashes(["p0", "p1", "p2"])
    offload.add_request("r", hashes)
    src = [1, 3, 6]  # slot 0 pages 1 and 3, slot 1 page 6 (max_pages 8)
    dst = [8, 9, 10]  # slot 1 pages 0..2

    def round_trip() -> None:
        raw = offload.build_connector_meta()
        assert raw is not None
        worker.bind_metadata(worker.parse_metadata(raw))
        worker.land()
        worker.synchronize()
        acks = worker.get_worker_meta()
        assert acks is not None
        offload.apply_worker_meta(offload.parse_worker_meta(acks))

    assert offload.save("r", list(zip(hashes, src, strict=True))) == list(hashes)
    round_trip()
    assert all(offload.restorable(h) for h in hashes)
    bt = shape.block_tokens
    for t, host in zip(before, worker.host_blocks, strict=True):
        for slot, g in enumerate(src):  # host slots are taken lowest first
            assert torch.equal(_bytes(host[slot]), _bytes(t[g * bt : (g + 1) * bt].cpu()))
    for t in index.tensors():
        t.zero_()
    torch.cuda.synchronize(dev)
    offload.restore("r", list(zip(hashes, dst, strict=True)))
    round_trip()
    for t, old in zip(index.tensors(), before, strict=True):
        for s, d in zip(src, dst, strict=True):
            assert torch.equal(_bytes(t[d * bt : (d + 1) * bt]), _bytes(old[s * bt : (s + 1) * bt]))
        rest = torch.ones(t.shape[0], dtype=torch.bool, device=dev)
        rest[dst[0] * bt : (dst[-1] + 1) * bt] = False
        assert not bool(_bytes(t[rest]).any())  # nothing else was written
    stats = offload.get_stats()
    assert (stats["stores"], stats["restores"], stats["open_jobs"]) == (3, 3, 0)
    assert worker.copied_bytes == 6 * worker.block_bytes


def _workload(shape: EngineShape, vocab: int) -> list[Any]:
    """Four requests sharing 24 prompt pages fill the GPU pool, so the fourth makes the
    first spill those pages (their indexer blocks are stored then); two more sharers
    arrive after all four finished and hit the pages on the host."""
    one = [make_request(f"a{i}", [1, 2, 3], 1600, 24, shape=shape, vocab=vocab)
           for i in range(4)]
    two = [make_request(f"b{i}", [1, 2, 3], 1600, 16, shape=shape, vocab=vocab, arrival=40)
           for i in range(2)]
    return one + two


@pytest.fixture(scope="module", params=[False, True], ids=["bf16", "fp8"])
def model(request: Any) -> Any:
    import torch

    from hisparse.engine.model import Model

    m = Model(ModelShape(index_fp8=request.param), torch.device("cuda:0"))
    yield m
    del m
    torch.cuda.empty_cache()


@pytest.mark.gpu
@pytest.mark.parametrize("capacity", [64, 8], ids=["restores", "fallbacks"])
def test_lockstep_with_the_indexer_offloaded_is_bit_identical(model: Any, capacity: int
                                                               ) -> None:
    import torch

    from hisparse.engine.lockstep import Lockstep, hisparse_engine, resident_engine
    from hisparse.engine.offload_gpu import offload_indexer

    shape = EngineShape(slots=4, max_context=4096, top_k=256, block_tokens=64)
    reqs = _workload(shape, model.shape.vocab)
    hs, sched = hisparse_engine(model, shape, gpu_blocks=80, host_blocks=512, graph=True)
    oracle = resident_engine(model, shape, graph=False)
    ix = offload_indexer(hs, sched, capacity)
    run = Lockstep([hs, oracle], [sched, None], reqs, indexer=ix)
    steps = 52
    rep = run.run(steps)
    d = rep.as_dict()
    d.pop("batches")
    print(f"\nindexer offload ({'fp8' if model.shape.index_fp8 else 'bf16'}, capacity "
          f"{capacity}): " + ", ".join(f"{k}={v}" for k, v in d.items()))
    print(f"restore bytes {rep.indexer['restore_bytes']:,}, store bytes "
          f"{rep.indexer['store_bytes']:,}, {1e3 * rep.seconds / steps:.2f} ms per step")
    assert rep.entries_compared > 0 and rep.nonfinite_logits == 0
    assert rep.token_mismatches == 0, rep.first_mismatch_step
    assert rep.logits_mismatched_entries == 0, (rep.first_mismatch_step, rep.max_abs_logit_diff)
    assert rep.identical
    assert rep.spills > 0 and rep.admitted == len(reqs)
    k = rep.indexer
    assert k["stores"] > 0 and k["host_hits"] > 0
    if capacity >= 24:  # every spilled shared page stored: the sharers' suffixes restored
        assert k["restores"] > 0 and k["suffix_restores"] > 0 and k["restore_bytes"] > 0
    else:  # only 8 of 24 stored: the sharers fall back, HiSparse's hit capped at 0
        assert k["store_refusals"] > 0 and k["fallbacks"] > 0 and k["fallback_pages"] > 0
    # the indexer rows every running request reads are the oracle's, byte for byte
    hs.stream.synchronize()
    oracle.stream.synchronize()
    assert run.running, "the second wave should still be decoding"
    t = shape.max_context
    for slot, r in run.running.items():
        lo, hi = slot * t, slot * t + r.length
        for mine, theirs in zip(hs.index.tensors(), oracle.index.tensors(), strict=True):
            assert torch.equal(_bytes(mine[lo:hi]), _bytes(theirs[lo:hi])), (slot, r.req.request_id)
