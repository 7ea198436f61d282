"""Rules of ``hisparse simulate``, its report, its sizing flags and the accounting executor
that lines no test ran showed: found by the whole mutation run (docs/mutation-run7)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import hisparse.indexer_sim as indexer_sim_module
import hisparse.simulate as simulate_module
from hisparse import cli
from hisparse.config import HiSparseConfig
from hisparse.connectors.gpu_group import PrefixCachedGroup
from hisparse.connectors.hisparse_child import HiSparseSchedulerChild
from hisparse.connectors.offload_store import BlockHash
from hisparse.coordinator import Admission
from hisparse.executor.accounting import AccountingExecutor
from hisparse.executor.errors import PendingHostWrite
from hisparse.executor.layout import PoolLayout
from hisparse.indexer_sim import IndexerSimulation
from hisparse.report import ReportError, load, result_lines
from hisparse.simulate import (
    DEFAULT_MOONCAKE,
    SimulateOptions,
    SimulateReport,
    Simulation,
    build_workload,
    make_simulation,
    report_json,
)
from hisparse.spec.constants import ProtocolConfig
from hisparse.workerport import LocalWorker
from hisparse.workload import Arrival, WorkloadError

TRACE = Path(__file__).parent / "data" / "mooncake_small.jsonl"
ONE = [Arrival(0, "r0", ("k0", "k1", "k2"), 4)]  # one request of three pages


# --- the options a run refuses before it starts ------------------------------------------


def test_an_unknown_workload_is_refused_by_name() -> None:
    # (simulate.py:133:raise:0 returned no arrivals at all)
    with pytest.raises(WorkloadError, match=r"^unknown workload 'poisson'; choose synthetic "
                                            r"or mooncake$"):
        build_workload(SimulateOptions(workload="poisson"))


@pytest.mark.parametrize(("opts", "message"), [
    # (simulate.py:253:raise:3)
    (SimulateOptions(tp=0), r"^tp must be at least 1, got 0$"),
    # (simulate.py:255:raise:4)
    (SimulateOptions(backing="pooled"),
     r"^unknown backing 'pooled'; choose one of private, shared$"),
    # (simulate.py:257:raise:5: a shared pool is only the reference executor's)
    (SimulateOptions(tp=2, backing="shared", executor="accounting"),
     r"^the shared backing runs on the reference executor only$"),
])
def test_a_rank_layout_the_run_cannot_build_is_refused_by_name(opts: SimulateOptions,
                                                               message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Simulation(opts, ONE)


def test_an_indexer_offload_store_of_no_blocks_is_refused() -> None:
    # (indexer_sim.py:58:raise:3)
    with pytest.raises(ValueError, match=r"^offload_blocks must be at least 1, got 0$"):
        make_simulation(SimulateOptions(indexer_offload=True, offload_blocks=0))


def test_a_gpu_block_count_needs_a_gpu_budget() -> None:
    # a config sized in host blocks alone has no GPU budget to convert: a ValueError
    # naming what is missing, not a TypeError (config.py:138:raise:5, config.py:148:raise:6)
    c = HiSparseConfig(host_pool_blocks=8)
    assert c.gpu_kv_gib is None
    with pytest.raises(ValueError, match=r"^gpu_blocks needs gpu_kv_gib \(a budget in GiB\)$"):
        _ = c.gpu_blocks
    with pytest.raises(ValueError, match=r"^gpu_blocks_disabled needs gpu_kv_gib "
                                         r"\(a budget in GiB\)$"):
        _ = c.gpu_blocks_disabled


# --- the ranks --------------------------------------------------------------------------


@pytest.mark.parametrize("backing", ["private", "shared"])
def test_only_the_writer_copies_into_a_shared_host_pool(backing: str) -> None:
    # private pools: every rank copies its own; one shared pool: rank 0 alone
    # (simulate.py:313:cmp:38 swapped them)
    sim = Simulation(SimulateOptions(tp=2, backing=backing), ONE)
    try:
        assert len(sim.ports) == 2
        want = sim.ports if backing == "private" else [sim.ports[0]]
        assert [p.rank for p in sim.copiers] == [p.rank for p in want]
        assert all(a is b for a, b in zip(sim.copiers, want, strict=True))
    finally:
        sim.close()


def test_a_worker_in_another_process_is_not_reached_into() -> None:
    # a worker process's pools are not this process's: asking for its in-process worker
    # is refused by rank (simulate.py:319:raise:7 handed back the process port)
    sim = Simulation(SimulateOptions(worker_processes=True), ONE)
    try:
        assert not isinstance(sim.ports[0], LocalWorker)
        with pytest.raises(RuntimeError, match=r"^rank 0's worker runs in another process$"):
            sim.local(0)
    finally:
        sim.close()


def test_a_reader_still_waiting_after_the_writer_landed_its_copy_fails() -> None:
    # the reader's decode is retried once, after the writer landed every copy up to the
    # one it waits on; still waiting then is an error, never a read of unlanded bytes
    # (simulate.py:632:raise:10 returned the waiting result)
    landed: list[int] = []
    decodes: list[int] = []
    writer = SimpleNamespace(queued=lambda: [3, 5, 8], land=landed.append)

    def decode(topk: dict[str, object], step: int) -> SimpleNamespace:
        decodes.append(step)
        return SimpleNamespace(waits_on={5})

    port = SimpleNamespace(rank=1, decode=decode)
    with pytest.raises(RuntimeError, match=r"^rank 1 still waits on \{5\}$"):
        Simulation._decode(SimpleNamespace(ports=[writer]), port, {}, 7)  # type: ignore[arg-type]
    assert landed == [2] and decodes == [7, 7]  # copies 3 and 5 landed, decoded twice


# --- a violation ends the run, counted once and named ------------------------------------


def test_an_invariant_violation_is_counted_once_and_named_in_the_notes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the injected bug release_source_at_send frees a spill's source block when the
    # command is sent: the run stops at the violation, counts it (simulate.py:788:arith:39
    # counted it down) and names it first in the notes (simulate.py:789:call:93 dropped it).
    # (A config subclass whose protocol names the bug: the machine is built from it.)
    class Injected(HiSparseConfig):
        def protocol(self, gpu_blocks: int) -> ProtocolConfig:
            return super().protocol(gpu_blocks).model_copy(
                update={"bug": "release_source_at_send"})

    monkeypatch.setattr(simulate_module, "HiSparseConfig", Injected)
    sim = Simulation(SimulateOptions(requests=16, steps=120, seed=0, gpu_blocks=24,
                                     host_blocks=40))
    assert sim.coordinator.machine.bug == "release_source_at_send"
    rep = sim.run()
    assert rep.violations == 1
    assert rep.notes[0] == (
        "invariant NoReuseBeforeEnqueued violated: transfer 0 (GPU 0 -> host 0) not yet "
        "enqueued but its source is owned by None, pinned=False, holds 'garbage'")
    assert rep.steps < 120  # it stopped there


def test_a_worker_meta_held_back_past_a_lost_one_takes_the_loss_path_at_the_end() -> None:
    # seed 97 at a rate of 0.2 drops a worker meta and holds the next one back just
    # before the run ends: delivered late, it is refused (one before it was lost) and the
    # worker is restarted, once more than the gaps met while the run stepped; the run
    # then drains clean (simulate.py:762:call:77 swallowed the gap: no restart)
    sim = Simulation(SimulateOptions(requests=10, steps=80, seed=97, message_faults=0.2,
                                     gpu_blocks=20, host_blocks=40))
    rep = sim.run()
    assert rep.violations == 0 and rep.data_mismatches == 0, rep.notes
    assert rep.message_faults["up_dropped"] > 0 and rep.message_faults["up_delayed"] > 0
    assert rep.worker_restarts == rep.message_faults["gaps"] + 1
    c = sim.coordinator  # once its published pages are evicted, nothing is left held
    c.evict_published()
    assert {name: n for name, n in c.table_sizes().items() if n} == {}
    assert c.state.host_used == 0 and sim.kv.num_free == sim.kv.num_blocks


# --- the indexer group's admission: a broken promise is named ----------------------------


def test_an_admission_the_hisparse_child_refuses_after_the_pool_check_is_an_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the GPU blocks were checked free before HiSparse's admit: its refusal then is a
    # broken promise, raised by request (indexer_sim.py:145:raise:5 went on with no table)
    class Refusing(HiSparseSchedulerChild):
        def admit(self, request_id: str) -> Admission | None:
            return None

    monkeypatch.setattr(indexer_sim_module, "HiSparseSchedulerChild", Refusing)
    sim = IndexerSimulation(SimulateOptions(indexer_offload=True), ONE)
    assert isinstance(sim.hs_child, Refusing)
    with pytest.raises(RuntimeError, match=r"^HMA refused r0 after granting 3 blocks$"):
        sim.run()
    # raised before the indexer group hands out a block: every block still free, none
    # cached, none referenced (indexer_sim.py:146:reorder:1 took the blocks first)
    g = sim.group
    assert g.num_free == g.blocks and g.evictions == 0
    assert g._cached == {} and not any(g._refs)
    assert sim.ix_blocks == {} and sim.counts["admissions"] == 0


def test_an_indexer_group_that_refuses_after_can_allocate_is_an_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # (indexer_sim.py:148:raise:6 went on with no blocks)
    class Refusing(PrefixCachedGroup):
        def allocate(self, hashes: Sequence[BlockHash], hits: int) -> list[int] | None:
            return None

    monkeypatch.setattr(indexer_sim_module, "PrefixCachedGroup", Refusing)
    sim = IndexerSimulation(SimulateOptions(indexer_offload=True), ONE)
    assert isinstance(sim.group, Refusing)
    with pytest.raises(RuntimeError, match=r"^the indexer group refused r0 after "
                                           r"can_allocate$"):
        sim.run()


# --- the accounting executor's single spill ----------------------------------------------


def test_one_accounting_spill_queues_its_transfer_into_its_host_block() -> None:
    # enqueue_spill is enqueue_spills of that one copy: its transfer ID queued, its host
    # block unreadable until it lands, other blocks readable (accounting.py:70:call:0
    # queued nothing; :var:42 queued the source block's number, :var:43 checked the
    # transfer ID as the source block, :var:44 wrote into the block of its transfer ID's
    # number)
    layout = PoolLayout(gpu_blocks=6, host_blocks=10, block_tokens=4, row_bytes=16,
                        hot_rows=12, slots=3)
    ex = AccountingExecutor()
    pools = ex.allocate(layout)
    ex.enqueue_spill(pools, 7, src_gpu_block=1, dst_host_block=3)
    assert ex.queued() == [7] and ex.completed() == []
    with pytest.raises(PendingHostWrite) as info:
        ex.read_host_rows(pools, np.array([12, 13], np.int64))  # host block 3's rows
    assert (info.value.host_block, info.value.transfer_id) == (3, 7)
    rows = ex.read_host_rows(pools, np.array([28, 29, 4], np.int64))  # blocks 7 and 1
    assert rows.shape == (3, 0)
    ex.release()
    assert ex.completed() == [7]
    assert ex.read_host_rows(pools, np.array([12, 13], np.int64)).shape == (2, 0)


# --- the report --------------------------------------------------------------------------


def test_the_report_prints_channel_faults_by_kind_and_worker_restarts() -> None:
    # every fault kind but the gaps, then the gaps (report.py:123:cmp:10 listed only the
    # gaps; :124:call:19 dropped the line); the restarts with their losses
    # (report.py:126:call:20 dropped the line)
    faults = {"down_duplicated": 1200, "down_delayed": 4, "down_dropped": 3,
              "up_duplicated": 0, "up_delayed": 2, "up_dropped": 1, "gaps": 9}
    doc = report_json(SimulateReport(message_faults=faults, worker_restarts=1011,
                                     metas_lost=2, open_at_loss=1500))
    out = result_lines(doc)
    assert out[-2:] == [
        "channels     down duplicated 1,200, down delayed 4, down dropped 3, "
        "up duplicated 0, up delayed 2, up dropped 1; 9 gaps took the loss path",
        "faults       1,011 worker restarts recovered (2 with that step's connector "
        "metadata lost; 1,500 transfers open when lost)",
    ]
    plain = result_lines(report_json(SimulateReport()))
    assert not [line for line in plain if line.startswith(("channels", "faults"))]


def test_a_report_of_a_missing_file_is_refused_naming_it(tmp_path: Path) -> None:
    # (report.py:225:raise:3 went on to an UnboundLocalError)
    path = tmp_path / "absent.json"
    with pytest.raises(ReportError, match=rf"^cannot read {re.escape(str(path))}: "
                                          r"No such file or directory$"):
        load(path)
    assert not path.exists()


def test_a_report_of_a_file_that_is_not_json_is_refused_naming_it(tmp_path: Path) -> None:
    # (report.py:227:raise:4 went on to an UnboundLocalError)
    path = tmp_path / "run.json"
    path.write_text("steps: 12\n", encoding="utf-8")
    with pytest.raises(ReportError, match=rf"^{re.escape(str(path))} is not JSON "
                                          r"\(Expecting value\)$"):
        load(path)
    assert path.read_text(encoding="utf-8") == "steps: 12\n"


# --- the sizing flags --------------------------------------------------------------------

MODEL = ["simulate", "--model", "deepseek-v3.2", "--workload", "mooncake",
         "--gpu-kv-gib", "100", "--host-gib", "400"]


def test_a_model_replay_without_a_trace_where_the_default_one_is_not_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # no PATH given: the default trace, relative to where it runs; where there is none,
    # one line naming it (sizing/cli.py:94:raise:5 let the replay meet the missing file)
    monkeypatch.chdir(tmp_path)
    assert not DEFAULT_MOONCAKE.is_file()
    assert cli.main(MODEL) == 2
    captured = capsys.readouterr()
    assert captured.err == f"hisparse: error: no such file: {DEFAULT_MOONCAKE}\n"
    assert captured.out == ""


def test_a_model_replay_on_the_cuda_executor_is_refused_in_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    # the sizing replay runs on the accounting or the reference executor only
    # (sizing/cli.py:121:raise:8 let a cuda replay start)
    assert cli.main([*MODEL, "--executor", "cuda", str(TRACE)]) == 2
    captured = capsys.readouterr()
    assert captured.err == ("hisparse: error: --model replays on the accounting or the "
                            "reference executor\n")
    assert captured.out == ""


# --- channels that lose messages: the loss path at the end and over several ranks --------
# (two bugs the search for the lines above found: a worker meta lost just before the
# drain made the next one a MessageGap that escaped the run, exit 1 with a traceback; and
# with two ranks each restart re-sent to both over the faulty channels, a lost re-send
# restarting again by recursion, until RecursionError, at the CLI's own rates)


def test_a_worker_meta_lost_just_before_the_drain_takes_the_loss_path() -> None:
    # seed 7 at 0.3 drops rank 0's last worker meta of the run: the drain's delivery,
    # with the network calm, meets the gap
    sim = Simulation(SimulateOptions(requests=8, steps=80, seed=7, message_faults=0.3,
                                     gpu_blocks=20, host_blocks=40))
    rep = sim.run()
    assert rep.violations == 0 and rep.data_mismatches == 0, rep.notes
    assert rep.worker_restarts > rep.message_faults["gaps"]  # (the drain's gap is not
    # counted among the channel's: the channel is gone by then)
    sim.coordinator.evict_published()
    assert sim.coordinator.state.host_used == 0 and sim.kv.num_free == sim.kv.num_blocks


@pytest.mark.parametrize("seed", range(6))
def test_two_ranks_at_the_highest_fault_rate_recover_and_drain_clean(seed: int) -> None:
    # a restart's re-send lost in turn restarts that rank after it, in one loop
    sim = Simulation(SimulateOptions(requests=8, steps=80, seed=seed, message_faults=1 / 3,
                                     tp=2, gpu_blocks=20, host_blocks=40))
    rep = sim.run()
    assert rep.violations == 0 and rep.data_mismatches == 0, rep.notes
    assert rep.worker_restarts > 0 and rep.message_faults["gaps"] > 0
    sim.coordinator.evict_published()
    assert sim.coordinator.state.host_used == 0 and sim.kv.num_free == sim.kv.num_blocks


def test_without_message_faults_a_gap_is_a_bug_never_a_restart() -> None:
    # the drain's loss path is for messages the faulty channels lost; with none
    # configured a gap means the system lost one itself: it must surface, not be
    # recovered from in silence
    from hisparse.spec.errors import MessageGap

    sim = Simulation(SimulateOptions(requests=12, steps=60, seed=1))

    def gapped(raw: object) -> None:
        raise MessageGap("worker meta of rank 0: expected message 1, got 2", 0)

    sim.sched.update_connector_output = gapped  # type: ignore[method-assign,assignment]
    with pytest.raises(MessageGap, match="expected message 1, got 2"):
        sim.run()
    assert sim.report.worker_restarts == 0
