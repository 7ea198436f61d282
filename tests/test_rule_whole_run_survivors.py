"""Rules that the first survivors of the whole mutation run (docs/mutation-run7) showed
no test stated: each test names the mutant it kills."""

from __future__ import annotations

import argparse
import itertools
import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from hisparse.bench.allocsearch import largest_fit
from hisparse.executor.accounting import AccountingExecutor
from hisparse.executor.base import ResolveBatch
from hisparse.executor.errors import BadBatch, BadPlan
from hisparse.executor.layout import PoolLayout
from hisparse.jsonlines import read_json_lines
from hisparse.msgshape import connector_metadata_problem
from hisparse.simulate import SimulateOptions, make_simulation
from hisparse.sizing import baseline
from hisparse.sizing.replay import SizingSimulation
from hisparse.workerwire import FrameError, pack, unpack
from hisparse.workload import Arrival


def test_a_search_up_to_one_batch_answers_one() -> None:
    # limit 1 is a limit "at least 1" (allocsearch.py:33:cmp:0 refused it)
    assert largest_fit(lambda b: True, guess=1, limit=1).batch == 1
    assert largest_fit(lambda b: False, guess=1, limit=1).batch == 0


def test_one_offload_block_is_an_indexer_offload() -> None:
    # "at least 1" takes 1 (indexer_sim.py:57:cmp:0 refused it)
    sim = make_simulation(SimulateOptions(indexer_offload=True, offload_blocks=1))
    assert sim.report.sizes["offload_blocks"] == 1


def test_a_blank_line_is_skipped_and_the_lines_after_it_are_read(tmp_path: Path) -> None:
    # jsonlines.py:46:loop:0 stopped at the first blank line
    path = tmp_path / "w.jsonl"
    path.write_text('{"a": 1}\n\n   \n{"a": 2}\n')
    assert list(read_json_lines(path, ValueError)) == [(1, {"a": 1}), (4, {"a": 2})]


def test_a_line_of_exactly_the_bound_is_read_and_one_byte_more_is_refused(
        tmp_path: Path) -> None:
    # the bound counts the newline (jsonlines.py:39:cmp:0 refused the exact fit)
    path = tmp_path / "w.jsonl"
    line = b'{"a": 1}\n'
    path.write_bytes(line)
    assert list(read_json_lines(path, ValueError, max_line_bytes=len(line))) == [(1, {"a": 1})]
    with pytest.raises(ValueError, match=rf"w.jsonl:1: line longer than {len(line) - 1} bytes"):
        list(read_json_lines(path, ValueError, max_line_bytes=len(line) - 1))


def test_a_value_of_exactly_the_quoted_length_is_quoted_whole() -> None:
    # 40 characters of repr are shown whole; 41 are cut (msgshape.py:34:cmp:0 cut 40)
    exact, longer = "x" * 38, "x" * 39  # repr adds the two quotes
    assert connector_metadata_problem(exact) == \
        f"not a HiSparseConnectorMetadata: {exact!r} (str)"
    assert connector_metadata_problem(longer) == \
        f"not a HiSparseConnectorMetadata: {longer!r:.40}... (str)"


def test_the_disabled_replay_runs_at_most_max_running_at_once() -> None:
    # baseline.py:66:cmp:0 admitted one request more than max_running
    arrivals = [Arrival(0, f"r{i}", (f"k{i}",), 3) for i in range(5)]
    rep = baseline.DisabledRun(arrivals, gpu_blocks=10, max_running=2).run(100)
    assert max(rep.running) == 2 and rep.finished == 5
    assert rep.waits == [0, 0, 3, 3, 6]


def test_a_frame_of_its_length_prefix_alone_has_a_bad_header_not_a_short_prefix() -> None:
    # four bytes hold the prefix (workerwire.py:54:cmp:0 called them too short)
    raw = pack("ping")
    n = len(raw) - len(json.dumps({"op": "ping", "head": {}, "arrays": []}).encode())
    with pytest.raises(FrameError, match=r"^bad frame header: "):
        unpack(raw[:n])
    with pytest.raises(FrameError, match=r"^frame shorter than its length prefix$"):
        unpack(raw[:n - 1])


def test_a_header_with_one_field_of_the_wrong_type_is_refused() -> None:
    # each field alone (workerwire.py:63:bool:0 refused only all three wrong)
    raw = pack("x")
    for good, bad in ((b'"op": "x"', b'"op": 111'), (b'"head": {}', b'"head": 1 '),
                      (b'"arrays": []', b'"arrays": 1 ')):
        assert good in raw and len(good) == len(bad)
        with pytest.raises(FrameError, match="op, head or arrays of the wrong type"):
            unpack(raw.replace(good, bad))


def test_the_accounting_executor_takes_rows_in_range_and_refuses_the_rest() -> None:
    # executor/accounting.py:119:bool:0 refused every non-empty write
    layout = PoolLayout(gpu_blocks=2, host_blocks=2, block_tokens=4, row_bytes=16,
                        hot_rows=4, slots=1)
    acc = AccountingExecutor()
    pools = acc.allocate(layout)
    data = np.zeros((2, 0), np.uint8)
    acc.write_device_rows(pools, np.array([0, layout.device_rows - 1]), data)
    acc.write_device_rows(pools, np.array([], np.int64), data[:0])
    for rows in ([-1], [layout.device_rows]):
        with pytest.raises(BadPlan, match="device rows outside"):
            acc.write_device_rows(pools, np.array(rows), data[:1])


def test_metrics_may_be_read_every_step() -> None:
    # "at least 1" takes 1 (metrics.py:71:cmp:0 refused it)
    from hisparse.config import HiSparseConfig
    from hisparse.metrics import HiSparseMetrics

    config = HiSparseConfig(host_pool_gib=0.001, block_tokens=8, row_bytes=16, top_k=4)
    assert HiSparseMetrics(config, read_every=1).read_every == 1
    with pytest.raises(ValueError, match="read_every=0 must be at least 1"):
        HiSparseMetrics(config, read_every=0)


# -- batch two: transfer 0, step 0, empty values that are not missing ones ------------

LAYOUT = PoolLayout(gpu_blocks=4, host_blocks=4, block_tokens=4, row_bytes=16,
                    hot_rows=8, slots=2)


def _resolve_batch(step: int, slots: list[int] | None = None) -> ResolveBatch:
    s = np.array([0] if slots is None else slots, np.int32)
    empty = np.full((len(s), 2), -1, np.int32)
    return ResolveBatch(slots=s, topk=empty, resident_row=empty, host_row=empty, step=step)


def test_step_zero_once_resolved_is_not_resolved_again() -> None:
    # the previous step 0 is a step (validate.py:46:none:0 read it as none before)
    from hisparse.executor.validate import check_batch

    check_batch(LAYOUT, _resolve_batch(0), None)
    with pytest.raises(BadBatch, match=r"^step 0 must exceed the previous resolve's step 0"):
        check_batch(LAYOUT, _resolve_batch(0), 0)


def test_a_repeated_step_is_named_before_the_arrays_are_looked_at() -> None:
    # the step is checked first (validate.py:49:reorder:0 named a bad slot array instead)
    from hisparse.executor.validate import check_batch

    bad = replace(_resolve_batch(3), slots=np.zeros((1, 1), np.int64))
    with pytest.raises(BadBatch, match=r"^slots must be a 1-d int32 array"):
        check_batch(LAYOUT, bad, None)
    with pytest.raises(BadBatch, match=r"^step 3 must exceed"):
        check_batch(LAYOUT, bad, 5)


def test_the_accounting_executor_refuses_a_bad_batch_before_deciding_on_it() -> None:
    # executor/accounting.py:103:reorder:0 decided first: an IndexError, not BadBatch
    acc = AccountingExecutor()
    pools = acc.allocate(LAYOUT)
    before = acc.snapshot(pools)
    with pytest.raises(BadBatch, match="slot"):
        acc.resolve(pools, _resolve_batch(0, [LAYOUT.slots + 5]))
    assert all(np.array_equal(before[k], acc.snapshot(pools)[k]) for k in before)


def test_a_copy_of_transfer_0_still_queued_holds_its_host_block() -> None:
    # transfer IDs start at 0 (reference.py:154:none:0 and stream.py:61:none:0 read
    # transfer 0 as no transfer: a staged page, or a second copy, went over the queued one)
    from hisparse.executor.errors import BadTransfer, PendingHostWrite
    from hisparse.executor.reference import ReferenceExecutor

    ex = ReferenceExecutor()
    pools = ex.allocate(LAYOUT)
    ex.enqueue_spills(pools, [(0, 1, 2)])
    page = np.zeros((LAYOUT.block_tokens, LAYOUT.row_bytes), np.uint8)
    with pytest.raises(PendingHostWrite):
        ex.write_host_block(pools, 2, page)
    with pytest.raises(BadTransfer, match="still has copy 0 queued"):
        ex.enqueue_spills(pools, [(1, 0, 2)])
    assert ex.queued() == [0]


def test_an_empty_tuple_of_index_leaders_is_refused_like_any_wrong_length() -> None:
    # () is not None (config.py:88:none:0 took it as "not given")
    from hisparse.config import HiSparseConfig

    with pytest.raises(ValueError, match="index_leaders"):
        HiSparseConfig(host_pool_gib=0.001, block_tokens=8, row_bytes=16, top_k=4,
                       layers=2, index_leaders=())


def test_an_indexer_pool_of_zero_blocks_is_refused() -> None:
    # 0 is not None (indexer_sim.py:59:none:0 took it as "the MLA pool's size")
    with pytest.raises(ValueError, match=r"indexer_gpu_blocks \(0\) must be at least"):
        make_simulation(SimulateOptions(indexer_offload=True, offload_blocks=8,
                                        indexer_gpu_blocks=0))


def test_a_plan_for_a_machine_of_no_ram_is_refused() -> None:
    # 0 bytes is a size given (sizing/plan.py:101:none:0 read this machine's instead)
    from hisparse.models import MODELS
    from hisparse.sizing.plan import PlanRefused, plan

    g = MODELS["deepseek-v3.2"]
    with pytest.raises(PlanRefused, match=r"above 95% of this machine's 0\.0 GiB of RAM"):
        plan(g, gpu_kv_gib=10, host_gib=1, contexts=(1024,), machine_ram=0)


def test_a_run_that_recorded_no_protocol_step_says_so() -> None:
    # 0 steps is a trace (report.py:133:none:0 left the line out); none: no line
    from hisparse.report import result_lines
    from hisparse.simulate import SimulateOptions, report_json, simulate

    doc = report_json(simulate(SimulateOptions(requests=2, steps=20)))
    line = "trace        0 protocol steps recorded"
    assert doc["trace_steps"] is None and line not in result_lines(doc)
    assert line in result_lines({**doc, "trace_steps": 0})


def test_page_tables_are_slots_by_pages() -> None:
    # engine/schedule.py:40:var:0 made the GPU table pages by pages
    from hisparse.engine.schedule import PageTables

    t = PageTables(slots=2, max_pages=5)
    assert t.gpu.shape == t.host.shape == (2, 5)


def test_a_row_header_is_its_key_layer_and_offset() -> None:
    # rows.py:20:var:1 wrote the offset where the key goes (the pattern still differed)
    from hisparse.rows import rows_of

    keys, offsets = np.array([7, 9], np.int64), np.array([1, 3], np.int64)
    head = rows_of(keys, 5, offsets, 32)[:, :12].copy().view(np.uint32)
    assert head.tolist() == [[7, 5, 1], [9, 5, 3]]


def test_the_toy_host_pool_is_four_gpu_pools() -> None:
    # sizing/toy.py:20:var:2 made it four of the longest request instead
    from hisparse.sizing.toy import MIN_GPU_BLOCKS, admitting_pools

    short = [Arrival(0, "a", ("k",) * 3, 1)]
    assert admitting_pools(short) == (MIN_GPU_BLOCKS, 4 * MIN_GPU_BLOCKS)
    long = [Arrival(0, "a", ("k",) * 100, 1)]
    assert admitting_pools(long) == (200, 800)


def test_a_fault_rate_past_a_third_is_refused() -> None:
    # msgfaults.py:32:raise:0 let it through (three kinds share the draw)
    from hisparse.msgfaults import MessageFaults

    with pytest.raises(ValueError, match=r"rate 0.5 is not in \[0, 1/3\]"):
        MessageFaults(rate=0.5, seed=0, ranks=1)


def test_a_metadata_whose_attributes_raise_is_named_by_its_type_first() -> None:
    # the type is checked before any attribute is read (msgshape.py:99:reorder:0 read one)
    class Hostile:
        def __getattr__(self, name: str) -> object:
            raise RuntimeError(name)

        def __repr__(self) -> str:
            return "Hostile()"

    assert connector_metadata_problem(Hostile()) == \
        "not a HiSparseConnectorMetadata: Hostile() (Hostile)"


def test_a_refused_importer_is_not_attached() -> None:
    # a refusal changes nothing (worker.py:154:reorder:0 attached it, then refused)
    from hisparse.config import HiSparseConfig
    from hisparse.executor.reference import ReferenceExecutor
    from hisparse.pdimport import ImportRunner
    from hisparse.transport import LoopbackPrefiller, LoopbackTransport, StagingPool
    from hisparse.worker import HiSparseWorker, WorkerError

    cfg = HiSparseConfig(host_pool_blocks=8, block_tokens=4, row_bytes=16, top_k=4, layers=2)
    ex = ReferenceExecutor()
    mine, other = (HiSparseWorker(cfg, ex, gpu_blocks=8, slots=2) for _ in range(2))
    page = 2 * 4 * 16
    tr = LoopbackTransport(StagingPool(2 * page, 2, page))
    peer = LoopbackPrefiller("pf", np.zeros((8, page), np.uint8))
    tr.connect(peer)
    runner = ImportRunner(tr, ex, other.import_pools(), other.layout, peer, "pf")
    with pytest.raises(WorkerError, match="must land in this worker's caches"):
        mine.attach_importer(runner)
    assert mine.importer is None


def test_help_never_shows_a_default_of_none(capsys: pytest.CaptureFixture[str]) -> None:
    # an option left unset says nothing (cli.py:79:drop:0 printed "(default: None)")
    from hisparse import cli

    with pytest.raises(SystemExit) as done:
        cli.main(["simulate", "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert "(default: None)" not in text and "(default: " in text


def test_a_kernel_tiling_with_any_bad_field_is_refused() -> None:
    # each fault alone (bench/cli.py:208:bool:0 refused only all of them at once)
    from hisparse.bench.cli import _tiling

    assert _tiling("16,32,4,2").heads == 16
    for bad in ("16,32,4", "24,32,4,2", "16,48,4,2", "8,32,4,2", "16,8,4,2"):
        with pytest.raises(argparse.ArgumentTypeError, match="HEADS,ROWS,WARPS,STAGES"):
            _tiling(bad)


def _sizing_sim(top_k: int = 8) -> SizingSimulation:
    opts = SimulateOptions(requests=2, steps=60, concurrency=1, top_k=top_k, block_tokens=4,
                           layers=1, row_bytes=16, gpu_blocks=8, host_blocks=8,
                           abort_rate=0.0, executor="accounting")
    arrivals = [Arrival(3, "a", ("a0", "a1"), 4), Arrival(5, "b", ("b0", "b1"), 4)]
    return SizingSimulation(opts, arrivals, drift=0.5)


def test_a_sizing_wait_counts_the_steps_from_arrival_to_admission() -> None:
    # sizing/replay.py:114:arith:1 added the arrival step instead of taking it away
    sim = _sizing_sim()
    sim.run()
    assert sim.waits[0] == 0 and 0 < sim.waits[1] < 10


def test_a_context_of_exactly_top_k_tokens_reads_every_token() -> None:
    # sizing/replay.py:121:cmp:0 drew k random positions for it instead
    sim = _sizing_sim(top_k=8)
    sim.pages["a"] = np.array([0, 1], np.int64)  # 2 pages of 4 tokens: k
    assert sim._topk_one("a").tolist() == list(range(8))


def test_a_page_is_shared_only_inside_both_its_trace_block_and_the_prompt_but_one() -> None:
    # engine/workload.py:103:bool:0 shared a page when either held: the page of the last
    # prompt token (written again at the first decode step), or a page of a trace block
    # the prompt does not fill
    from hisparse.engine.workload import EngineShape, make_request

    shape = EngineShape(slots=4, max_context=2048, top_k=16, block_tokens=64)
    ends_on_a_block = make_request("a", [5, 6], 512, 10, shape=shape, vocab=100)
    assert ends_on_a_block.page_keys[6].startswith("h") and \
        ends_on_a_block.page_keys[7] == "a:7"
    short_block = make_request("b", [5, 6], 600, 10, shape=shape, vocab=100)
    assert [k.startswith("h") for k in short_block.page_keys[:9]] == [True] * 8 + [False]
    assert short_block.page_keys[:7] == ends_on_a_block.page_keys[:7]


def test_a_rate_over_nothing_is_zero_whatever_was_counted() -> None:
    # a document from outside may hold bytes and no token (report.py:22:var:0 divided by
    # zero when the count was not zero too)
    from hisparse.report import rates
    from hisparse.simulate import report_json, simulate

    doc = report_json(simulate(SimulateOptions(requests=2, steps=20)))
    got = rates({**doc, "h2d_bytes": 4096, "spills": 3, "decoded_tokens": 0, "steps": 0})
    assert got["h2d_bytes_per_token"] == got["spills_per_step"] == 0.0


# -- the benches: what they time and what they refuse ----------------------------------


def test_the_coordinator_bench_figures_from_a_stand_in_clock(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # one tick per reading: a spill lifecycle is the ticks over the lifecycles run, an idle
    # step the ticks over 2,000 steps checks off and 50 on (bench/coordinator.py:43:arith:1
    # added the start; 44:not:0 swapped the step counts; 26:var:1 sized the pool for the
    # lifecycles, not the running requests: its admissions failed)
    from hisparse.bench import coordinator as bench

    ticks = itertools.count()
    monkeypatch.setattr(bench, "time", SimpleNamespace(perf_counter=lambda: float(next(ticks))))
    doc = bench.run(running=3, lifecycles=2)
    assert doc["check_off"] == {"spill_lifecycle_us": 5e5, "idle_step_us": 1e6 / 2000}
    assert doc["check_on"] == {"spill_lifecycle_us": 5e5, "idle_step_us": 1e6 / 50}


def test_the_protocol_bench_runs_fewer_lifecycles_than_background_requests() -> None:
    # the pool holds the background and one lifecycle (bench/protocol.py:28:var:0 sized
    # it by the lifecycles: too small for the background)
    from hisparse.bench.protocol import ACTIONS, _lifecycles

    assert set(_lifecycles(1, check=True, requests=3)) == set(ACTIONS)


def test_the_protocol_bench_refuses_figures_of_lifecycles_that_did_not_end(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # (bench/protocol.py:57:raise:0: no test left a lifecycle unfinished)
    from hisparse.bench import protocol

    class Unevicted(protocol.ProtocolMachine):  # (the compiled class takes no patch)
        def EvictHost(self, h: int) -> None:
            pass

    monkeypatch.setattr(protocol, "ProtocolMachine", SimpleNamespace(
        create=lambda cfg, check: Unevicted(cfg, check=check)))
    with pytest.raises(RuntimeError, match="lifecycles did not run to their end"):
        protocol._lifecycles(1, check=False, requests=0)


def test_the_nixl_bench_refuses_a_staged_import_not_acked_done(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # landed bytes are not enough: the import's own ack must say done
    # (bench/nixl.py:126:bool:0 refused only an ack that failed and was not done)
    from hisparse.bench.cli import BenchFailed
    from hisparse.bench.nixl import run
    from hisparse.pdimport.runner import ImportRunner

    real = ImportRunner.take_acks

    def no_done(self: ImportRunner) -> tuple[object, ...]:
        started, _, failed = real(self)
        return started, (), failed

    monkeypatch.setattr(ImportRunner, "take_acks", no_done)
    with pytest.raises(BenchFailed, match=r"^the staged import failed: \(\)$"):
        run(total_mib=1, page_kib=64, chunk_pages=2, reps=1, staging_slots=4)


def test_a_refused_indexer_offload_builds_no_worker_side(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # a refusal changes nothing outside either (indexer_sim.py:74:reorder:0 built the
    # simulation, here its shared pool, then refused)
    import hisparse.simulate as simulate

    built: list[object] = []
    monkeypatch.setattr(simulate, "SharedHostPool", lambda *a: built.append(a))
    with pytest.raises(ValueError, match="one private rank"):
        make_simulation(SimulateOptions(indexer_offload=True, offload_blocks=8, tp=2,
                                        backing="shared"))
    assert built == []


@pytest.mark.parametrize(("draw", "kind"), [(0.0, "duplicated"), (0.25, "delayed"),
                                            (0.5, "dropped"), (0.75, None)])
def test_each_fault_kind_holds_the_draws_from_its_share_up_to_the_next(
        draw: float, kind: str | None) -> None:
    # the shares are half-open, [k*rate, (k+1)*rate) (msgfaults.py:42:cmp:0 gave the
    # boundary to the kind below it)
    from hisparse.msgfaults import MessageFaults

    f = MessageFaults(rate=0.25, seed=0, ranks=1)
    f._rng = SimpleNamespace(random=lambda: draw)  # type: ignore[assignment]
    out = f.route("down", 0, b"m")
    counted = [k for k, n in f.counts.items() if n]
    assert counted == ([] if kind is None else [f"down_{kind}"])
    assert out == {"duplicated": [b"m", b"m"], "delayed": [], "dropped": [],
                   None: [b"m"]}[kind]


def test_an_admission_that_can_never_fit_takes_no_block_from_a_larger_manager() -> None:
    # the engine's block manager may hold more blocks than the protocol's GPU pool: the
    # refusal comes before any allocation (coordinator.py:202:reorder:0 allocated first
    # and kept the blocks it refused with)
    from hisparse.blockpool import BlockPool
    from hisparse.config import HiSparseConfig
    from hisparse.coordinator import HiSparseCoordinator, RequestNeverFits

    cfg = HiSparseConfig(host_pool_blocks=4, block_tokens=4, row_bytes=16, top_k=4)
    kv = BlockPool(10)
    c = HiSparseCoordinator(cfg, kv, gpu_blocks=5)
    c.add_request("big", [f"k{i}" for i in range(7)])
    with pytest.raises(RequestNeverFits):
        c.admit("big")
    assert kv.num_free == 10
