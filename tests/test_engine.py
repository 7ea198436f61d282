"""The engine's decode loop (``hisparse.engine``).

GPU tests (marked ``gpu``; they import torch only once the marker has let them run):
- a HiSparse engine, one CUDA graph per step, and the same model with every KV row
  resident produce identical tokens and bit-identical logits over 256 decode steps at
  batch 32, contexts 8k-128k from the Mooncake trace, with spills, prefix hits, aborts
  and speculative verification steps;
- the graph run equals the eager run, and a step does no host synchronization.

The rest run everywhere (CI has no torch): the package imports without torch, shapes
are checked, the workload's prefix identities are sound, the scheduler side spills
only complete pages, and the indexer offload's scheduler side (engine/offload.py, over
the numpy OffloadingWorker) stores spilled pages' indexer blocks, restores a sharer's
host-hit suffix byte for byte, or falls back with HiSparse's hit capped. Its GPU half is
tests/test_engine_indexer_offload_gpu.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

from hisparse.config import GIB, HiSparseConfig
from hisparse.connectors.base import KVLayout
from hisparse.connectors.offloading import OffloadingScheduler, OffloadingWorker
from hisparse.engine.config import ROW_BYTES, EngineConfigError, EngineShape, ModelShape
from hisparse.engine.offload import IndexerOffload
from hisparse.engine.schedule import HiSparseScheduler, PageTables, SchedulerError
from hisparse.engine.workload import (
    EngineRequest,
    make_request,
    mooncake_requests,
    pages_needed,
)
from hisparse.executor.reference import ReferenceExecutor

# -- everywhere ---------------------------------------------------------------------------


def test_engine_package_imports_without_torch() -> None:
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import hisparse.engine, hisparse.engine.schedule, hisparse.engine.workload\n"
        "import hisparse.engine.offload\n"
        "print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_bench_engine_without_torch_exits_2_saying_what_to_install() -> None:
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from hisparse.engine.backend import EngineUnavailable, load_torch\n"
        "try:\n    load_torch()\nexcept EngineUnavailable as e:\n    print('refused:', e)\n"
        "from hisparse.cli import main\n"
        "sys.exit(main(['bench', 'engine']))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=False)
    assert out.returncode == 2, out.stderr
    assert "refused: the engine needs torch: pip install 'hisparse[engine]'" in out.stdout
    # the GPU check speaks first: without CuPy (CI) it names the extra to install, with
    # CuPy and no device (a GPU host's GPU hidden) it says so; with a GPU, the torch check
    assert any(s in out.stderr for s in ("hisparse[cuda12]", "no usable NVIDIA GPU",
                                         "hisparse[engine]"))


def test_shapes_refuse_bad_values() -> None:
    with pytest.raises(EngineConfigError, match="index_leaders"):
        ModelShape(layers=3, index_leaders=(0, 0))
    with pytest.raises(EngineConfigError, match="not an earlier layer"):
        ModelShape(layers=2, index_leaders=(1, 1))
    with pytest.raises(EngineConfigError, match="index_dim"):
        ModelShape(index_dim=32)
    # an odd index_dim is refused, an odd layer count is not (engine/config.py:63:var:8)
    with pytest.raises(EngineConfigError, match="index_dim must be even"):
        ModelShape(index_dim=65)
    assert ModelShape(layers=3, index_leaders=(0, 1, 2)).layers == 3
    with pytest.raises(EngineConfigError, match="top_k"):
        EngineShape(slots=1, max_context=1024, top_k=2048)
    with pytest.raises(EngineConfigError, match="multiple of block_tokens"):
        EngineShape(slots=1, max_context=1000, top_k=64)
    # no negative drafts (engine/config.py:112:var:24 checked slots twice)
    with pytest.raises(EngineConfigError, match=r"^num_speculative_tokens must be >= 0, got -1"):
        EngineShape(slots=1, max_context=1024, top_k=64, num_speculative_tokens=-1)
    assert EngineShape(slots=1, max_context=1024, top_k=64).num_speculative_tokens == 0
    shape = EngineShape(slots=1, max_context=1024, top_k=64)
    with pytest.raises(EngineConfigError, match="exceed max_context"):
        make_request("r", [], 1000, 100, shape=shape, vocab=100)
    # a prompt needs two tokens; one new token is enough (engine/workload.py:80:var:4
    # tested the new tokens instead)
    with pytest.raises(EngineConfigError, match=r"^r: a prompt needs at least 2 tokens$"):
        make_request("r", [], 1, 10, shape=shape, vocab=100)
    assert make_request("r", [], 2, 1, shape=shape, vocab=100).max_new == 1


def test_a_request_covers_its_prompt_new_tokens_and_drafts() -> None:
    # pages for every position it can write: prompt + new + the last step's drafts
    # (engine/workload.py:60:arith:13 took the drafts away)
    shape = EngineShape(slots=1, max_context=1024, top_k=64, num_speculative_tokens=3)
    bt = shape.block_tokens
    assert pages_needed(bt - 4, 1, shape) == 1  # bt - 4 + 1 + 3 = bt: one page
    assert pages_needed(bt - 4, 2, shape) == 2  # one position more: a second page


def test_pages_past_the_hash_ids_get_keys_of_their_own() -> None:
    # a prompt longer than its hash ids cover: the whole blocks past them are not shared
    # (engine/workload.py:104:cmp:9 read one hash id past the end)
    shape = EngineShape(slots=1, max_context=4096, top_k=64)
    r = make_request("r", [7], 1400, 10, shape=shape, vocab=1000)
    per_block = 512 // shape.block_tokens
    assert all(k.startswith("h") for k in r.page_keys[:per_block])
    assert r.page_keys[per_block:] == tuple(f"r:{j}" for j in range(per_block,
                                                                    len(r.page_keys)))


def test_shared_prefix_pages_share_keys_and_tokens() -> None:
    shape = EngineShape(slots=2, max_context=8192, top_k=64, num_speculative_tokens=1)
    a = make_request("a", [1, 2, 3], 1400, 10, shape=shape, vocab=1000)
    b = make_request("b", [1, 2, 9], 1400, 10, shape=shape, vocab=1000)
    c = make_request("c", [7, 2, 3], 1400, 10, shape=shape, vocab=1000)
    assert len(a.page_keys) == pages_needed(1400, 10, shape)
    # blocks 0 and 1 (1024 tokens, 16 pages) are shared by a and b; block 2 differs
    assert a.page_keys[:16] == b.page_keys[:16]
    assert np.array_equal(a.prompt[:1024], b.prompt[:1024])
    assert not set(a.page_keys[16:]) & set(b.page_keys)
    # c differs in block 0, so nothing after it is shared either (chained identity)
    assert not set(c.page_keys) & set(a.page_keys)
    assert len(set(a.page_keys)) == len(a.page_keys)


def test_mooncake_workload_puts_the_longest_first_and_clips(tmp_path: Path) -> None:
    """The trace's format (one JSON request per line, a hash id per 512 tokens)."""
    rows = [(0, 9000, 100, [0, 1]), (1, 4000, 10, [0, 2]), (2, 131_050, 50, [7]),
            (3, 8192, 400, [0, 1, 3]), (4, 110_000, 5, [8]), (5, 20_000, 30, [0, 1])]
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(
        json.dumps({"timestamp": t, "input_length": n, "output_length": o, "hash_ids": h}) + "\n"
        for t, n, o, h in rows))
    shape = EngineShape(slots=4, max_context=131072, num_speculative_tokens=2)
    reqs = mooncake_requests(shape, vocab=1000, count=5, abort_every=2, path=trace,
                             arrivals_per_step=2)
    # the two longest first, then trace order; the 4000-token prompt is below 8k
    assert [len(r.prompt) for r in reqs] == [131072 - 50 - 2 - 1, 110_000, 9000, 8192, 20_000]
    assert [r.max_new for r in reqs] == [50, 32, 100, 160, 32]  # clipped to 32..160
    assert [r.arrival for r in reqs] == [0, 0, 1, 1, 2]
    assert [r.abort_after is not None for r in reqs] == [False, True, False, True, False]
    # requests 2, 3 and 5 share hash ids 0, 1: their first 16 pages (1024 tokens) share keys
    a, b, c = reqs[2], reqs[3], reqs[4]
    assert a.page_keys[:16] == b.page_keys[:16] == c.page_keys[:16]
    assert np.array_equal(a.prompt[:1024], c.prompt[:1024])
    # a prompt of exactly long_context tokens is a long one (engine/workload.py:125:cmp:3)
    longest = 131072 - 50 - 2 - 1
    for bound, first in ((110_000, [longest, 110_000, 9000]), (110_001, [longest, 9000, 8192])):
        got = mooncake_requests(shape, vocab=1000, count=5, path=trace, arrivals_per_step=2,
                                long_context=bound)
        assert [len(r.prompt) for r in got][:3] == first
    with pytest.raises(EngineConfigError, match="trace is not at"):
        mooncake_requests(shape, vocab=1000, count=1, path=tmp_path / "missing.jsonl")


def _scheduler(gpu_blocks: int) -> tuple[HiSparseScheduler, EngineShape]:
    shape = EngineShape(slots=4, max_context=2048, top_k=16, block_tokens=64)
    bb = shape.block_tokens * ROW_BYTES * 2
    config = HiSparseConfig(host_pool_gib=(64 * bb + bb // 2) / GIB, block_tokens=64,
                            row_bytes=ROW_BYTES, top_k=16, layers=2, index_leaders=(0, 0))
    return HiSparseScheduler(config, ReferenceExecutor(), gpu_blocks=gpu_blocks,
                             slots=shape.slots, max_pages=shape.max_pages), shape


def test_reclaim_spills_only_complete_pages_and_tables_follow() -> None:
    sched, shape = _scheduler(gpu_blocks=12)
    a = make_request("a", [], 400, 100, shape=shape, vocab=100)  # 8 pages
    b = make_request("b", [], 400, 100, shape=shape, vocab=100)
    sched.add(a)
    sched.add(b)
    got = sched.admit(a)
    assert got is not None
    slot, _ = got
    assert sched.admit(b) is None  # 8 + 8 > 12 blocks
    short = sched.blocks_short(b)
    assert short == 4
    # a has 200 final positions: pages 1..3 are complete, page 4 (192..255) is not
    assert sched.reclaim(short, {"a": 200}) == 3
    assert sched.send_commands() == 3
    sched.deliver_acks()  # enqueued acks: the three blocks go back to the pool
    assert sched.send_commands() == 0  # the replacements went down
    assert list(sched.tables.gpu[slot, :3]) == [-1, -1, -1]
    assert (sched.tables.host[slot, :3] >= 0).all()
    assert (sched.tables.gpu[slot, 3:8] >= 0).all()
    assert sched.admit(b) is None  # still one block short: page 4 is not final
    sched.end("a", aborted=False)
    assert (sched.tables.gpu[slot] == -1).all()
    assert sched.admit(b) is not None


def test_a_full_batch_is_refused_before_the_coordinator_changes() -> None:
    sched, shape = _scheduler(gpu_blocks=64)
    reqs = [make_request(f"r{i}", [], 100, 10, shape=shape, vocab=100) for i in range(5)]
    for r in reqs:
        sched.add(r)
    for r in reqs[:4]:
        assert sched.admit(r) is not None
    free = sched.kv.num_free
    with pytest.raises(SchedulerError, match="slots are running"):
        sched.admit(reqs[4])
    assert sched.kv.num_free == free
    assert sched.coordinator.state.req["r4"] != "running"


def _offloaded(capacity: int) -> tuple[IndexerOffload, HiSparseScheduler, EngineShape,
                                         NDArray[np.uint8]]:
    """A scheduler with the indexer group offloaded to a numpy worker (any block size:
    the connector never looks inside a block)."""
    sched, shape = _scheduler(gpu_blocks=64)
    layout = KVLayout(block_tokens=shape.block_tokens)
    gpu = np.zeros((shape.slots * shape.max_pages, 96), np.uint8)
    worker = OffloadingWorker(layout, gpu, capacity)
    offload = OffloadingScheduler(layout, gpu.shape[1], capacity)
    return IndexerOffload(sched, offload, worker, max_pages=shape.max_pages), sched, shape, gpu


def _spill_and_end_a_sharer(
    ix: IndexerOffload, sched: HiSparseScheduler, shape: EngineShape, gpu: NDArray[np.uint8]
) -> EngineRequest:
    """Request a (8 prompt pages shared with b) runs, spills them, ends; b is next."""
    a = make_request("a", [1], 600, 10, shape=shape, vocab=100)
    b = make_request("b", [1], 600, 10, shape=shape, vocab=100)
    assert a.page_keys[:8] == b.page_keys[:8] and a.page_keys[8] != b.page_keys[8]
    for r in (a, b):
        sched.add(r)
        ix.add(r)
    plan = ix.plan(a)
    assert (plan.host_hit, plan.restore, plan.fallback) == (0, (), False)
    got = sched.admit(a, plan.admit_mla)
    assert got is not None
    slot, _ = got
    assert ix.admitted(a, slot, plan) == 0
    for j in range(10):  # what prefill and decode wrote into a's indexer blocks
        gpu[ix.block(slot, j)] = j + 1
    assert sched.reclaim(8, {"a": 599}) == 8  # pages 1..8 are complete
    ix.flush()  # the indexer stores go down (the numpy worker copies at once)
    ix.deliver()
    sched.drain()
    sched.end("a", aborted=False)
    ix.finished("a")
    assert "a" not in ix.hashes
    return b


def test_indexer_offload_restores_the_host_hit_suffix_byte_for_byte() -> None:
    ix, sched, shape, gpu = _offloaded(capacity=32)
    b = _spill_and_end_a_sharer(ix, sched, shape, gpu)
    assert ix.report()["stores"] == 8
    plan = ix.plan(b)
    assert (plan.host_hit, plan.gpu_hit, plan.restore) == (8, 0, tuple(range(8)))
    assert not plan.fallback and plan.admit_mla == 8
    got = sched.admit(b, plan.admit_mla)
    assert got is not None
    slot, adm = got
    assert adm.prefix_hits == 8
    gpu[ix.block(slot, 0) : ix.block(slot, shape.max_pages)] = 0  # b's slot: no old rows
    assert ix.admitted(b, slot, plan) == 8 * shape.block_tokens  # prefill starts there
    for j in range(8):
        assert (gpu[ix.block(slot, j)] == j + 1).all(), j
    assert not gpu[ix.block(slot, 8) : ix.block(slot, shape.max_pages)].any()
    ix.deliver()
    rep = ix.report()
    assert (rep["restores"], rep["restore_bytes"]) == (8, 8 * gpu.shape[1])
    assert (rep["suffix_restores"], rep["fallbacks"], rep["host_hits"]) == (1, 0, 1)
    assert rep["open_jobs"] == 0  # every copy acked


def test_indexer_offload_falls_back_to_no_hit_when_the_suffix_is_not_stored() -> None:
    ix, sched, shape, gpu = _offloaded(capacity=4)  # 4 of the 8 stores are refused
    b = _spill_and_end_a_sharer(ix, sched, shape, gpu)
    rep = ix.report()
    assert (rep["stores"], rep["store_refusals"]) == (4, 4)
    plan = ix.plan(b)
    assert plan.host_hit == 8 and plan.fallback and plan.admit_mla == plan.admit_indexer == 0
    assert plan.restore == ()
    # the capped admission needs GPU blocks for the 8 pages the host hit would have served
    assert sched.blocks_short(b, 0) == sched.blocks_short(b) + 8
    # a cap of 3 hit pages gives up the other 5 (engine/schedule.py:102:arith:3)
    assert sched.blocks_short(b, 3) == sched.blocks_short(b) + 5
    assert sched.blocks_short(b, 8) == sched.blocks_short(b, 9) == sched.blocks_short(b)
    got = sched.admit(b, plan.admit_mla)
    assert got is not None
    slot, adm = got
    assert adm.prefix_hits == 0
    assert (sched.tables.gpu[slot, :10] >= 0).all()  # prefill writes every MLA row again
    assert ix.admitted(b, slot, plan) == 0  # ... and every index key
    rep = ix.report()
    assert (rep["fallbacks"], rep["fallback_pages"], rep["restores"]) == (1, 8, 0)


def test_indexer_offload_refuses_a_second_hook() -> None:
    ix, sched, shape, _ = _offloaded(capacity=4)
    with pytest.raises(ValueError, match="on_spill"):
        IndexerOffload(sched, ix.offload, ix.worker, max_pages=shape.max_pages)


def test_indexer_offload_takes_one_page_per_request_and_refuses_none() -> None:
    # "at least 1" takes 1 (engine/offload.py:72:cmp:0 refused it)
    sched, shape = _scheduler(gpu_blocks=8)
    layout = KVLayout(block_tokens=shape.block_tokens)
    gpu = np.zeros((shape.slots * shape.max_pages, 96), np.uint8)
    worker, offload = OffloadingWorker(layout, gpu, 4), OffloadingScheduler(layout, 96, 4)
    with pytest.raises(ValueError, match="max_pages must be at least 1, got 0"):
        IndexerOffload(sched, offload, worker, max_pages=0)
    assert sched.on_spill is None  # the refusal hooked nothing
    assert IndexerOffload(sched, offload, worker, max_pages=1).max_pages == 1


# -- on the GPU ------------------------------------------------------------------------

IDENTITY_STEPS = int(os.environ.get("HISPARSE_ENGINE_STEPS", "384"))
"""Steps of the identity run: the first ones fill the batch, at least 256 run it full."""


@pytest.fixture(scope="module")
def model() -> Any:
    import torch

    from hisparse.engine.model import Model

    return Model(ModelShape(), torch.device("cuda:0"))


def _print(name: str, rep: Any) -> None:
    d = rep.as_dict()
    d.pop("batches")
    print(f"\n{name}: " + ", ".join(f"{k}={v}" for k, v in d.items()))


@pytest.mark.gpu
def test_hisparse_decode_is_bit_identical_to_all_resident(model: Any) -> None:
    """≥ 256 steps at batch 32, contexts 8k-128k, spills, prefix hits, aborts, 2 drafts."""
    from hisparse.engine.lockstep import Lockstep, hisparse_engine, resident_engine

    shape = EngineShape(slots=32, max_context=131072, top_k=2048, num_speculative_tokens=2)
    reqs = mooncake_requests(shape, vocab=model.shape.vocab, count=128, abort_every=9,
                             arrivals_per_step=8)
    hs, sched = hisparse_engine(model, shape, gpu_blocks=6144, host_blocks=40000, graph=True)
    oracle = resident_engine(model, shape, graph=False)
    rep = Lockstep([hs, oracle], [sched, None], reqs).run(IDENTITY_STEPS)
    _print("identity", rep)
    assert rep.steps == IDENTITY_STEPS
    full = sum(b >= 32 for b in rep.batches)
    print(f"steps at batch 32: {full} of {rep.steps}")
    assert rep.entries_compared > 0 and rep.nonfinite_logits == 0
    assert rep.token_mismatches == 0, rep.first_mismatch_step
    assert rep.logits_mismatched_entries == 0, (rep.first_mismatch_step, rep.max_abs_logit_diff)
    assert rep.identical
    # the workload's terms: batch 32, contexts from 8k to 128k, spills, prefix hits
    assert full >= 256
    assert rep.context_min >= 8191 and rep.context_max >= 100_000
    assert rep.spills > 0 and rep.prefix_hits > 0 and rep.misses > 0 and rep.hot_hits > 0
    assert rep.aborted > 0 and rep.finished > 0
    assert rep.drafts > 0  # every step verified two drafts per request


@pytest.mark.gpu
def test_graph_equals_eager_and_a_step_never_syncs(model: Any) -> None:
    """One CUDA graph per step equals the eager step (HiSparse and resident); replaying
    it does no host synchronization and no device-to-host copy."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from hisparse.engine.lockstep import Lockstep, hisparse_engine, resident_engine

    shape = EngineShape(slots=8, max_context=32768, top_k=2048, num_speculative_tokens=1)
    reqs = mooncake_requests(shape, vocab=model.shape.vocab, count=16, abort_every=5,
                             max_new=(24, 48))
    hs_graph, s1 = hisparse_engine(model, shape, gpu_blocks=1600, host_blocks=8000,
                                   graph=True)
    hs_eager, s2 = hisparse_engine(model, shape, gpu_blocks=1600, host_blocks=8000,
                                   graph=False)
    res_graph = resident_engine(model, shape, graph=True)
    res_eager = resident_engine(model, shape, graph=False)
    run = Lockstep([hs_graph, hs_eager, res_graph, res_eager], [s1, s2, None, None], reqs)
    rep = run.run(40)
    _print("graph-vs-eager", rep)
    assert rep.entries_compared > 0 and rep.identical, (
        rep.first_mismatch_step, rep.max_abs_logit_diff)
    assert rep.spills > 0 and rep.misses > 0

    # A step launched on the current inputs: no synchronizing call, in graph or eager.
    for eng in (hs_graph, hs_eager, res_graph):
        torch.cuda.set_sync_debug_mode("error")
        try:
            eng.launch()
        finally:
            torch.cuda.set_sync_debug_mode("default")
        eng.stream.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        hs_graph.launch()
        hs_graph.stream.synchronize()
    names = [e.name for e in prof.events()]
    print("profiled graph step, host-side calls:",
          sorted({n for n in names if n.startswith("cuda")}))
    assert names.count("cudaGraphLaunch") == 1
    assert not [n for n in names if "DtoH" in n or n.startswith("cudaMemcpy")]
    assert "cudaLaunchKernel" not in names  # every kernel of the step is in the graph


def test_a_slot_bound_again_keeps_nothing_of_its_last_table() -> None:
    # (engine/schedule.py:44:call:0: a longer table's tail stayed behind a shorter one)
    t = PageTables(slots=2, max_pages=4)
    t.bind(0, [("gpu", 3), ("host", 1), ("gpu", 2)])
    t.bind(1, [("gpu", 0)])
    t.bind(0, [("host", 0)])
    assert t.gpu[0].tolist() == [-1, -1, -1, -1] and t.host[0].tolist() == [0, -1, -1, -1]
    assert t.gpu[1].tolist() == [0, -1, -1, -1]  # another slot is untouched
