"""Rules of the engine's torch-free decode-loop parts (shapes, the trace workload, the
HiSparse scheduler and the indexer offload) that survivors of the whole mutation run
showed no test stated (docs/mutation-run7)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from hisparse.config import GIB, HiSparseConfig
from hisparse.connectors.base import KVLayout
from hisparse.connectors.offloading import OffloadingScheduler, OffloadingWorker
from hisparse.engine.config import (
    LATENT_DIM,
    ROPE_DIM,
    ROW_BYTES,
    EngineConfigError,
    EngineShape,
    ModelShape,
)
from hisparse.engine.offload import IndexerOffload
from hisparse.engine.schedule import HiSparseScheduler
from hisparse.engine.workload import (
    TRACE_BLOCK_TOKENS,
    _block_tokens,
    _own_block_id,
    make_request,
    mooncake_requests,
)
from hisparse.executor.reference import ReferenceExecutor
from hisparse.spec.errors import ActionNotEnabled

# --- shapes (hisparse/engine/config.py) ----------------------------------------------------


def test_a_slot_holds_max_context_over_block_tokens_pages() -> None:
    # kills engine/config.py:139:arith:9 (max_context * block_tokens) and 139:var:31
    # (divided by the slots)
    assert EngineShape(slots=3, max_context=1024, top_k=64, block_tokens=64).max_pages == 16
    assert EngineShape(slots=3, max_context=1024, top_k=64, block_tokens=32).max_pages == 32


def test_weight_bytes_count_every_matrix_a_step_reads_once_in_bf16() -> None:
    # with q_rank 0 the queries project h directly (hidden x heads x qk); with a rank,
    # through the latent (hidden x rank, rank x heads x qk)
    # kills engine/config.py:86:var:4 (tested layers for q_rank: a direct projection of 0)
    d, h, nope, v, mlp, vocab, ih, idim = 8, 2, 4, 4, 16, 10, 2, 64
    qk = nope + ROPE_DIM
    fixed = (d * (LATENT_DIM + ROPE_DIM)  # wkv_a
             + 2 * h * nope * LATENT_DIM  # wkv_b (keys' nope part and values)
             + h * v * d  # wo
             + 3 * d * mlp)  # w1, w2, w3
    for rank, wq, index_in in ((0, d * h * qk, d), (3, d * 3 + 3 * h * qk, 3)):
        shape = ModelShape(layers=2, index_leaders=(0, 0), hidden=d, heads=h, nope_dim=nope,
                           v_dim=v, mlp_dim=mlp, vocab=vocab, index_heads=ih, index_dim=idim,
                           q_rank=rank)
        index = index_in * ih * idim + d * (idim + ih)  # one indexer (one leader)
        assert shape.weight_bytes() == 2 * (2 * (wq + fixed) + index + d * vocab), rank


# --- requests (hisparse/engine/workload.py) ------------------------------------------------


def test_a_request_fits_exactly_when_prompt_new_tokens_and_drafts_fill_max_context() -> None:
    # kills engine/workload.py:82:cmp:1 (refused the exact fit) and 82:arith:6 (took the
    # drafts away from the positions a request can write)
    shape = EngineShape(slots=1, max_context=1024, top_k=64, num_speculative_tokens=2)
    r = make_request("r", [], 1000, 22, shape=shape, vocab=100)
    assert (len(r.prompt), r.max_new, len(r.page_keys)) == (1000, 22, 16)
    with pytest.raises(EngineConfigError, match=r"^r: prompt 1000 \+ 23 new tokens \(\+ drafts\) "
                       r"exceed max_context 1024$"):
        make_request("r", [], 1000, 23, shape=shape, vocab=100)


def test_a_page_prefill_writes_completely_inside_a_whole_trace_block_is_shared() -> None:
    # 513 prompt tokens: prefill writes positions 0..511, so page 7 (448..511) is complete
    # and lies in the whole first trace block: shared; page 8 is the request's own
    # kills engine/workload.py:103:cmp:4 (a page ending at the last prefill position was
    # not shared)
    shape = EngineShape(slots=1, max_context=1024, top_k=64)
    a = make_request("a", [5], 513, 10, shape=shape, vocab=100)
    b = make_request("b", [5], 513, 10, shape=shape, vocab=100)
    assert a.page_keys[:8] == b.page_keys[:8] and all(k.startswith("h") for k in a.page_keys[:8])
    assert a.page_keys[8:] == tuple(f"a:{j}" for j in range(8, len(a.page_keys)))
    # one token fewer: the last prompt token (511) is written by decode, page 7 is own
    c = make_request("c", [5], 512, 10, shape=shape, vocab=100)
    assert c.page_keys[:7] == a.page_keys[:7] and c.page_keys[7] == "c:7"


def test_prompt_tokens_are_drawn_from_their_trace_block_id() -> None:
    # equal ids, equal tokens; another id, other tokens
    # kills engine/workload.py:70:var:3 (seeded by the vocabulary: every block alike)
    shape = EngineShape(slots=1, max_context=2048, top_k=64)
    a = make_request("a", [1, 2], 1024, 10, shape=shape, vocab=1000)
    b = make_request("b", [1, 3], 1024, 10, shape=shape, vocab=1000)
    assert np.array_equal(a.prompt[:TRACE_BLOCK_TOKENS], b.prompt[:TRACE_BLOCK_TOKENS])
    assert np.array_equal(a.prompt[:TRACE_BLOCK_TOKENS], _block_tokens(1, 1000))
    assert not np.array_equal(a.prompt[TRACE_BLOCK_TOKENS:], b.prompt[TRACE_BLOCK_TOKENS:])
    assert not np.array_equal(a.prompt[:TRACE_BLOCK_TOKENS], a.prompt[TRACE_BLOCK_TOKENS:])


def test_a_requests_own_blocks_have_negative_ids_no_trace_id_equals() -> None:
    # blocks past the hash ids take a negative id of their own, stable and distinct per
    # (request, block); their tokens are drawn from it
    # kills engine/workload.py:66:arith:1 (a positive id: it may equal a trace id)
    ids = [_own_block_id(r, b) for r in ("a", "b", "m17") for b in range(4)]
    assert all(i < 0 for i in ids) and len(set(ids)) == len(ids)
    assert ids == [_own_block_id(r, b) for r in ("a", "b", "m17") for b in range(4)]
    shape = EngineShape(slots=1, max_context=2048, top_k=64)
    r = make_request("a", [9], 1100, 10, shape=shape, vocab=1000)
    assert np.array_equal(r.prompt[512:1024], _block_tokens(_own_block_id("a", 1), 1000))
    assert np.array_equal(r.prompt[1024:], _block_tokens(_own_block_id("a", 2), 1000)[:76])


# --- the Mooncake trace as engine requests -------------------------------------------------


def _trace(tmp_path: Path, rows: list[tuple[int, int, list[int]]]) -> Path:
    """A trace of (input_length, output_length, hash_ids) rows."""
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(
        json.dumps({"timestamp": 0, "input_length": n, "output_length": o, "hash_ids": h})
        + "\n" for n, o, h in rows))
    return path


def test_count_requests_are_taken_even_when_the_two_longest_come_after_the_first_count(
        tmp_path: Path) -> None:
    # the two longest fill a count of 2 on their own: no trace-order row is added
    # kills engine/workload.py:130:arith:20 (count + 2 rows of the rest) and 130:var:21
    # (as many rows of the rest as the vocabulary)
    path = _trace(tmp_path, [(9000, 50, [1]), (9100, 50, [2]), (9200, 50, [3]),
                             (120_000, 50, [4]), (110_000, 50, [5])])
    shape = EngineShape(slots=4, max_context=131072)
    got = mooncake_requests(shape, vocab=1000, count=2, path=path)
    assert [len(r.prompt) for r in got] == [120_000, 110_000]
    got = mooncake_requests(shape, vocab=1000, count=4, path=path)
    assert [len(r.prompt) for r in got] == [120_000, 110_000, 9000, 9100]


def test_each_trace_request_is_its_row_made_with_the_callers_vocabulary(
        tmp_path: Path) -> None:
    # as many requests as asked, whatever the vocabulary, each the request make_request
    # builds from its row (tokens below the vocabulary)
    # kills engine/workload.py:123:var:16 (took as many rows as the vocabulary) and
    # 139:var:25 (drew the tokens from a vocabulary of `count`)
    rows = [(100 + 10 * i, 40, [i, 7]) for i in range(5)]
    path = _trace(tmp_path, rows)
    shape = EngineShape(slots=4, max_context=1024, top_k=64)
    got = mooncake_requests(shape, vocab=3, count=5, min_context=2, path=path)
    assert [r.request_id for r in got] == [f"m{i}" for i in range(5)]
    for i, (r, (n, o, h)) in enumerate(zip(got, rows, strict=True)):
        want = make_request(f"m{i}", h, n, o, shape=shape, vocab=3, arrival=i // 4)
        assert np.array_equal(r.prompt, want.prompt) and r.page_keys == want.page_keys
        assert (r.max_new, r.arrival, r.abort_after) == (40, i // 4, None)
        assert int(r.prompt.max()) <= 2


def test_aborting_requests_abort_3_plus_their_index_mod_17_steps_in(tmp_path: Path) -> None:
    # every abort_every-th request aborts 3 + i % 17 decode steps in
    # kills engine/workload.py:137:arith:12 (3 - i % 17) and 137:arith:16 (3 + i // 17)
    path = _trace(tmp_path, [(100, 40, [i]) for i in range(20)])
    shape = EngineShape(slots=4, max_context=1024, top_k=64)
    got = mooncake_requests(shape, vocab=100, count=20, min_context=2, abort_every=1,
                            path=path)
    assert [r.abort_after for r in got] == [3 + i % 17 for i in range(20)]
    assert [r.abort_after for r in got][15:] == [18, 19, 3, 4, 5]
    every3 = mooncake_requests(shape, vocab=100, count=7, min_context=2, abort_every=3,
                               path=path)
    assert [r.abort_after for r in every3] == [None, None, 5, None, None, 8, None]


def test_a_trace_row_of_length_zero_is_read_and_an_empty_output_is_clipped_up(
        tmp_path: Path) -> None:
    # 0 is in 0..2^53: a row with no input is read (and skipped below min_context), one
    # with no output gets the least output length
    # kills engine/workload.py:164:int:1 and 164:cmp:10 (refused 0)
    path = _trace(tmp_path, [(0, 5, []), (9000, 0, [1]), (9001, 7, [2])])
    shape = EngineShape(slots=4, max_context=16384)
    got = mooncake_requests(shape, vocab=100, count=3, path=path)
    assert [(len(r.prompt), r.max_new) for r in got] == [(9000, 32), (9001, 32)]


# --- the HiSparse scheduler (hisparse/engine/schedule.py) ------------------------------


def _scheduler(gpu_blocks: int, slots: int = 4, max_context: int = 2048
               ) -> tuple[HiSparseScheduler, EngineShape]:
    """As tests/test_engine.py's, with the slots and the context free (64 host blocks)."""
    shape = EngineShape(slots=slots, max_context=max_context, top_k=16, block_tokens=64)
    bb = shape.block_tokens * ROW_BYTES * 2
    config = HiSparseConfig(host_pool_gib=(64 * bb + bb // 2) / GIB, block_tokens=64,
                            row_bytes=ROW_BYTES, top_k=16, layers=2, index_leaders=(0, 0))
    return HiSparseScheduler(config, ReferenceExecutor(), gpu_blocks=gpu_blocks,
                             slots=shape.slots, max_pages=shape.max_pages), shape


class SpillLog(list[tuple[str, int]]):
    """An ``on_spill`` hook that records what it is told (falsy while empty)."""

    def __call__(self, request_id: str, page: int) -> None:
        self.append((request_id, page))


def test_reclaim_skips_an_incomplete_page_for_the_next_request_and_tells_every_spill() -> None:
    # page i of r is complete when i * block_tokens <= final[r]: a's pages 1 and 2 (page 2
    # ends exactly at 128), then b's 1..4; a's incomplete pages do not stop the walk
    # kills engine/schedule.py:115:loop:1 (stopped at a's page 3), 114:cmp:8 (page 2 of
    # 128 final positions not complete) and 119:none:5 (an empty log is falsy: not told)
    sched, shape = _scheduler(gpu_blocks=32)
    a = make_request("a", [], 600, 10, shape=shape, vocab=100)  # 10 pages
    b = make_request("b", [], 300, 10, shape=shape, vocab=100)  # 5 pages
    for r in (a, b):
        sched.add(r)
        assert sched.admit(r) is not None
    log = SpillLog()
    sched.on_spill = log
    assert sched.reclaim(32, {"a": 128, "b": 300}) == 6
    assert log == [("a", 1), ("a", 2), ("b", 1), ("b", 2), ("b", 3), ("b", 4)]
    assert sched.send_commands() == 6


def test_reclaiming_the_schedulers_gpu_blocks_spills_every_complete_page() -> None:
    # ``gpu_blocks`` is the GPU pool's size (bench/engine.py reclaims that many to put
    # every complete page on the host)
    # kills engine/schedule.py:72:var:14 (it held the slots)
    sched, shape = _scheduler(gpu_blocks=12)
    assert sched.gpu_blocks == sched.kv.num_free == 12
    a = make_request("a", [], 600, 10, shape=shape, vocab=100)  # 10 pages, 9 complete
    sched.add(a)
    assert sched.admit(a) is not None
    assert sched.reclaim(sched.gpu_blocks, {"a": 599}) == 9


def test_page_tables_have_a_row_per_slot_and_a_column_per_page() -> None:
    # kills engine/schedule.py:71:var:12 (a row per GPU block) and 71:var:13 (a column per
    # GPU block)
    sched, shape = _scheduler(gpu_blocks=12)
    assert sched.tables.gpu.shape == sched.tables.host.shape == (4, 32) \
        == (shape.slots, shape.max_pages)
    assert (sched.tables.gpu == -1).all() and (sched.tables.host == -1).all()


def test_the_batch_holds_slots_requests_even_with_fewer_gpu_blocks() -> None:
    # two GPU blocks, three slots: each one-page request spills its page, so a third
    # runs beside the first two in the third slot
    # kills engine/schedule.py:68:var:11 (the worker had a hot slot per GPU block) and
    # 71:var:12 (page tables of two rows)
    sched, shape = _scheduler(gpu_blocks=2, slots=3, max_context=1024)
    reqs = [make_request(n, [], 2, 1, shape=shape, vocab=100) for n in "abc"]
    slots = []
    for r in reqs:
        sched.add(r)
        got = sched.admit(r)
        assert got is not None
        slots.append(got[0])
        if r is not reqs[-1]:  # its page goes to the host, its block back to the pool
            assert sched.reclaim(1, {r.request_id: 64}) == 1
            sched.send_commands()
            sched.deliver_acks()
            sched.send_commands()  # the replacement: the table points at the host block
    assert slots == [0, 1, 2]
    assert sched.worker.layout.slots == 3
    assert [int(x) for x in sched.tables.host[:2, 0]] != [-1, -1]
    assert int(sched.tables.gpu[2, 0]) >= 0


def _snapshot(sched: HiSparseScheduler) -> tuple[Any, ...]:
    w, c = sched.worker, sched.coordinator
    return (dict(w.tables.slots), {r: list(t) for r, t in w.tables.tables.items()},
            sched.tables.gpu.tolist(), sched.tables.host.tolist(), dict(c.state.req),
            sched.kv.num_free)


def test_an_ended_request_gives_its_slot_to_the_next() -> None:
    # a full batch; one ends; the next request gets its slot
    # kills engine/schedule.py:129:call:3 (the worker kept the ended request's slot)
    sched, shape = _scheduler(gpu_blocks=64)
    reqs = [make_request(f"r{i}", [], 100, 10, shape=shape, vocab=100) for i in range(5)]
    for r in reqs:
        sched.add(r)
    got = [sched.admit(r) for r in reqs[:4]]
    assert [g[0] for g in got if g is not None] == [0, 1, 2, 3]
    sched.end("r1", aborted=False)
    assert "r1" not in sched.worker.tables.slots and "r1" not in sched.worker.tables.tables
    again = sched.admit(reqs[4])
    assert again is not None and again[0] == 1
    assert (sched.tables.gpu[1, :2] >= 0).all()


@pytest.mark.parametrize("aborted", [False, True])
def test_an_end_the_coordinator_refuses_leaves_the_worker_and_tables_unchanged(
        aborted: bool) -> None:
    # the coordinator already finished (and forgot) "a" through its own API: ending it
    # again is refused and the worker keeps its slot and table, the page tables their row
    # kills engine/schedule.py:129:reorder:2 (released the worker before asking)
    sched, shape = _scheduler(gpu_blocks=64)
    a = make_request("a", [], 300, 10, shape=shape, vocab=100)
    sched.add(a)
    assert sched.admit(a) is not None
    sched.coordinator.finish("a")
    before = _snapshot(sched)
    action = "Abort" if aborted else "Finish"
    with pytest.raises(ActionNotEnabled, match=rf"^{action} is not enabled: unknown request 'a'$"):
        sched.end("a", aborted=aborted)
    assert _snapshot(sched) == before
    assert before[0] == {"a": 0}


# --- the indexer offload (hisparse/engine/offload.py) --------------------------------------


def test_delivered_indexer_acks_leave_no_completed_jobs_behind() -> None:
    # the engine has no GPU prefix cache to publish a completed job into: deliver takes
    # them, so the connector does not keep one per completed copy
    # kills engine/offload.py:143:call:9 (they piled up)
    layout = KVLayout(block_tokens=4)
    gpu = np.arange(4 * 8, dtype=np.uint8).reshape(4, 8)
    offload = OffloadingScheduler(layout, 8, 4)
    hs: Any = SimpleNamespace(on_spill=None)  # only its hook is touched here
    ix = IndexerOffload(hs, offload, OffloadingWorker(layout, gpu, 4), max_pages=2)
    req: Any = SimpleNamespace(request_id="a", page_keys=("k0", "k1"))
    ix.add(req)
    offload.save("a", [(ix.hashes["a"][0], 0), (ix.hashes["a"][1], 1)])
    ix.flush()
    ix.deliver()
    assert ix.report()["stores"] == 2 and offload.stores_in_flight("a") == 0
    left = offload.take_completed()
    assert (left.stores, left.restores) == ([], [])
