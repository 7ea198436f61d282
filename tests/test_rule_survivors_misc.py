"""Rules of the sync check, an injected bug's step, the offloading store, the accounting
executor, the indexer run's metrics and the sizing plan that survivors of the whole
mutation run showed (docs/mutation-run7)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hisparse.config import GIB, HiSparseConfig
from hisparse.executor.accounting import AccountingExecutor
from hisparse.executor.errors import BadPlan
from hisparse.executor.layout import PoolLayout
from hisparse.executor.reference import ReferenceExecutor
from hisparse.indexer_sim import IndexerSimulation
from hisparse.metrics import HiSparseMetrics
from hisparse.models import MODELS
from hisparse.simulate import SimulateOptions
from hisparse.sizing.plan import PlanRefused, plan
from hisparse.spec import variants
from hisparse.spec.catalogue import CATALOGUE, disagreements
from hisparse.spec.constants import ProtocolConfig
from hisparse.spec.errors import ActionNotEnabled
from hisparse.spec.machine import ProtocolMachine
from hisparse.spec.messages import HiSparseConnectorMetadata, HiSparseWorkerMeta
from tests.test_rule_offloading_edges import _scheduler, _state
from tests.test_rule_survivors_spec import _unchecked
from tests.test_rule_sync_reports import SPEC, _replace

LAYOUT = PoolLayout(gpu_blocks=2, host_blocks=4, block_tokens=2, row_bytes=16, hot_rows=3,
                    slots=2)


# --- the sync check ------------------------------------------------------------------------


def test_an_action_whose_injected_only_flag_disagrees_with_the_spec_is_its_one_line() -> None:
    """(spec/catalogue.py:648:var:20 put the line among the bug names instead)"""
    finish = next(a for a in CATALOGUE if a.name == "Finish")
    flipped = not finish.injected_only
    found = disagreements(SPEC, ProtocolMachine, _replace("Finish", injected_only=flipped))
    assert found == [f"Finish: injected_only={flipped}, but the spec's guard "
                     f"{'tests' if finish.injected_only else 'does not test'} Bug"]


def test_a_variant_whose_bug_the_spec_action_never_tests_is_named() -> None:
    """A variant moved to an action whose spec definition does not test its Bug is named
    with that action, and is that move's one line. (spec/catalogue.py:668:var:27 put the line among the bug names.)"""
    evict = next(a for a in CATALOGUE if a.name == "EvictHost" and a.variants)
    v = evict.variants[0]
    finish = next(a for a in CATALOGUE if a.name == "Finish")
    moved = {"Finish": (*finish.variants, v), "EvictHost": evict.variants[1:]}
    cat = tuple(dataclasses.replace(a, variants=moved[a.name]) if a.name in moved else a
                for a in CATALOGUE)
    assert v not in finish.variants
    found = disagreements(SPEC, ProtocolMachine, cat)
    assert found == [f"Finish: spec's Finish does not test Bug for {v.bug}"]


# --- an injected bug's step ----------------------------------------------------------------


def test_publish_after_one_rank_done_answers_a_bool_for_every_host_block() -> None:
    """The variant's step answers True exactly for a block whose open transfer, of a
    running request, every rank has enqueued, and False (a bool, as the production step
    it replaces; a compiled caller takes nothing else) for every other block, one with no
    open transfer included. (spec/variants.py:87:none:1 answered None there.)"""
    m = _unchecked("publish_after_one_rank_done", 2)

    def answers() -> list[bool]:
        out = [variants.publish_after_one_rank_done(m, h)
               for h in range(m.state.config.host_blocks)]
        assert all(type(x) is bool for x in out)
        return out

    assert answers() == [False] * 4
    m.Arrive("r0")
    tid = m.StartSpill(("r0", 1), 2)
    assert answers() == [False] * 4  # sent, not enqueued
    for w in (0, 1):
        m.WorkerEnqueue(tid, w)
        m.WorkerReport(w)
        m.ConsumeMeta(w)
    assert answers() == [False, False, True, False]
    m.Abort("r0")
    assert answers() == [False] * 4  # of an aborted request


# --- the offloading store ------------------------------------------------------------------


def test_every_block_a_full_store_refuses_is_counted_and_nothing_else_changes() -> None:
    """A save goes on past a refused block: each block the full store cannot take is one
    refusal, a block already held is skipped, and nothing else changes.
    (hisparse/connectors/offloading.py:135:loop:1 stopped at the first refusal.)"""
    s = _scheduler(capacity=2)
    assert s.save("r", [("a", 0), ("b", 1)]) == ["a", "b"]  # both storing: no slot free
    before = _state(s)
    stats = dict(s.get_stats())
    assert s.save("q", [("c", 2), ("a", 0), ("d", 3), ("e", 4)]) == []
    assert dict(s.get_stats()) == {**stats, "store_refusals": stats["store_refusals"] + 3}
    s.stats.store_refusals -= 3  # the one change: the count, checked above
    assert _state(s) == before


# --- the indexer run's metrics -------------------------------------------------------------


class _Recording(HiSparseMetrics):
    """Metrics that keep the transfer IDs they saw sent and completed."""

    def __init__(self, config: HiSparseConfig) -> None:
        super().__init__(config)
        self.sent: set[int] = set()
        self.completed: set[int] = set()

    def on_connector_meta(self, meta: HiSparseConnectorMetadata, step: int) -> None:
        self.sent |= {t.transfer_id for t in meta.transfers}
        super().on_connector_meta(meta, step)

    def on_worker_meta(self, meta: HiSparseWorkerMeta, step: int) -> None:
        self.completed |= set(meta.completed)
        super().on_worker_meta(meta, step)


def test_the_indexer_runs_metrics_see_every_hisparse_worker_meta() -> None:
    """With the indexer's KV offloaded beside HiSparse, HiSparse's part of each
    MultiConnector worker meta still reaches the metrics: every spill sent is seen
    completed by the end of the drain (the reuse clock of each published page starts
    there). (hisparse/indexer_sim.py:232:call:31 dropped them.)"""
    opts = SimulateOptions(indexer_offload=True, requests=16, steps=200, seed=1)
    sim = IndexerSimulation(opts)
    metrics = sim.metrics = _Recording(sim.config)
    rep = sim.run()
    assert rep.violations == 0 and rep.spills > 0
    assert metrics.sent and metrics.completed == metrics.sent


def test_a_replay_that_leaves_an_encoded_field_unread_is_named() -> None:
    """The replay must read exactly the fields the encoding gives, not a subset: one that
    reads the page twice and the chunk never is named. (spec/catalogue.py:638:collection:3
    only named a replay reading a field the encoding does not give.)"""
    found = disagreements(SPEC, ProtocolMachine,
                          _replace("LandChunk", replay="LandChunk(e.args.page, e.args.page)"))
    assert found == ["LandChunk: replay reads ['page'], encoding gives ['chunk', 'page']"]


# --- the accounting executor -----------------------------------------------------------------


@pytest.mark.parametrize("plan", [
    [[0, 0]],  # a resident row where a hot row goes
    [[LAYOUT.device_rows, 0]],  # past the hot region
    [[LAYOUT.resident_rows, LAYOUT.host_rows]],  # past the host pool
    [[LAYOUT.resident_rows, 0], [LAYOUT.resident_rows, 1]],  # one hot row filled twice
])
def test_a_followers_replay_refuses_the_plans_the_reference_executor_refuses(
        plan: list[list[int]]) -> None:
    """The accounting executor moves no bytes, but a follower's replay still checks the
    leader's plan, refusing what the reference executor refuses, in its words.
    (executor/accounting.py:112:call:4 took any plan.)"""
    arr = np.array(plan, np.int32)
    with pytest.raises(BadPlan) as ref:
        ReferenceExecutor().replay(ReferenceExecutor().allocate(LAYOUT), arr)
    acc = AccountingExecutor()
    with pytest.raises(BadPlan) as got:
        acc.replay(acc.allocate(LAYOUT), arr)
    assert str(got.value) == str(ref.value)
    acc.replay(acc.allocate(LAYOUT), np.array([[LAYOUT.resident_rows, 0]], np.int32))


# --- hisparse plan -------------------------------------------------------------------------


def test_each_plan_row_answers_for_its_own_context_in_any_order() -> None:
    """Contexts come in any order: each row's pages, host bytes and what the host pool
    holds are its own context's, and the plan's longest and minimum host pool are the
    longest context's, not the last row's. (Survivors of hisparse/sizing/plan.py used the
    longest's pages for a row's, the last row's for the minimum, a count for the longest.)"""
    g = MODELS["deepseek-v3.2"]
    contexts = (131072, 8192, 32768)
    p = plan(g, gpu_kv_gib=100, host_gib=400, contexts=contexts, machine_ram=1024 * GIB)
    assert [r.context for r in p.rows] == list(contexts)
    for r in p.rows:
        pages = -(-r.context // g.block_tokens)
        assert (r.pages, r.host_bytes) == (pages, pages * g.block_bytes)
        assert r.host_holds == p.host_blocks // pages
        assert r.running == min(r.hisparse_max, r.host_holds)
    assert p.longest == 131072 and p.min_host_blocks == 131072 // g.block_tokens
    assert p.admission_reserve == p.min_host_blocks * g.block_bytes


def test_a_machine_of_no_ram_holds_no_host_pool() -> None:
    """``machine_ram=0`` is a machine of no RAM, not "this machine": every host pool is
    refused. (hisparse/sizing/plan.py:101:none:0 read this machine's RAM instead.)"""
    with pytest.raises(PlanRefused, match=r"^host pool 1 GiB is above 95% of this "
                                          r"machine's 0\.0 GiB of RAM: lower --host-gib "
                                          r"to at most 0\.0"):
        plan(MODELS["deepseek-v3.2"], gpu_kv_gib=10, host_gib=1, contexts=(8192,),
             machine_ram=0)


def test_a_gpu_budget_an_engine_refuses_is_a_plan_refusal_in_the_engines_words() -> None:
    """A GPU budget that holds no whole block once one request's hot rows are reserved is
    refused as an engine refuses it at startup, as ``PlanRefused`` (the API's one error
    type, one line), however large the host pool. (hisparse/sizing/plan.py's
    ``gpu_kv_gib=host_gib`` survivor sized the GPU by the host pool, and a pydantic
    ValidationError of several lines left ``plan()`` before.)"""
    with pytest.raises(PlanRefused) as info:
        plan(MODELS["deepseek-v3.2"], gpu_kv_gib=0.1, host_gib=400, contexts=(8192,),
             machine_ram=1024 * GIB)
    assert str(info.value) == (
        "gpu_kv_gib=0.1 holds no whole GPU block once 1 requests' hot rows (0.15 GiB each) "
        "are reserved: raise gpu_kv_gib or lower the running requests")


def test_a_host_import_the_pool_cannot_hold_is_refused_by_its_capacity() -> None:
    """An import of more pages than the host pool has room for is refused as such, naming
    the pages and the pool's use, and changes nothing. (spec/machine.py's AdmitImport
    capacity refusal removed, the refusal came from the free-block list instead, naming
    four blocks it did not mean to lease.)"""
    cfg = ProtocolConfig(gpu_blocks=2, host_pool_bytes=9, host_block_bytes=2, chunks=2,
                         staging_slots=2)
    m = ProtocolMachine.create(cfg)
    m.add_import("r1", tuple(f"k{i}" for i in range(5)))
    m.ImportArrive("r1")
    assert m.ChooseTarget("r1") == "host"
    before = m.state.clone()
    with pytest.raises(ActionNotEnabled) as info:
        m.AdmitImport("r1")
    assert str(info.value) == ("AdmitImport is not enabled: host pool cannot hold 5 more "
                               "blocks (0 of 4 in use)")
    assert m.state == before
