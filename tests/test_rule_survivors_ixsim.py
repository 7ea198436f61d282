"""Rules of the indexer-offload run (the indexer's KV offloaded beside HiSparse under one
MultiConnector) and of the MultiConnector itself that survivors of the whole mutation run
showed (docs/mutation-run7)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hisparse.connectors.multi import MultiConnectorScheduler
from hisparse.connectors.offloading import Completed
from hisparse.connectors.wire import MULTI_MESSAGE, ChildBytes
from hisparse.coordinator import Loc
from hisparse.indexer_sim import IndexerSimulation, indexer_lines
from hisparse.simulate import SimulateOptions, SimulateReport
from hisparse.spec.suffix import SuffixPlan
from hisparse.workerport import WorkerPort
from hisparse.workload import Arrival
from tests.test_rule_survivors_misc import _Recording
from tests.test_rule_survivors_sys2 import Answering

# synthetic, seed 0: prefix sharing makes restores, fallbacks and GPU indexer hits happen
OPTS = SimulateOptions(indexer_offload=True, offload_blocks=96)


# --- the options: the indexer group may be exactly as large as the GPU pool ---------------


def test_an_indexer_group_as_large_as_the_gpu_pool_is_accepted_and_a_smaller_one_refused(
) -> None:
    # every admitted page needs a block in both, so equal sizes are enough
    # (kills indexer_sim.py:59:cmp:4, which refused equal sizes)
    sim = IndexerSimulation(replace(OPTS, gpu_blocks=16, indexer_gpu_blocks=16))
    assert sim.group.blocks == 16 and sim.report.sizes["indexer_gpu_blocks"] == 16
    with pytest.raises(ValueError, match=r"^indexer_gpu_blocks \(15\) must be at least "
                                         r"gpu_blocks \(16\): every admitted page needs "
                                         r"both$"):
        IndexerSimulation(replace(OPTS, gpu_blocks=16, indexer_gpu_blocks=15))


# --- admission: concurrency, GPU indexer hits, every computed block cached ----------------


class NoPrefillY(IndexerSimulation):
    """Request "y"'s GPU-resident MLA rows are never prefilled: it reads wrong bytes."""

    def _prefill(self, r: str, table: list[Loc]) -> None:
        if r != "y":
            super()._prefill(r, table)


NO_PREFILL_ARRIVALS = [Arrival(0, "x", ("p0", "p1"), 2),
                       Arrival(6, "y", ("p0", "p1", "y2"), 2)]
NO_PREFILL_OPTS = SimulateOptions(indexer_offload=True, gpu_blocks=8, steps=20,
                                  abort_rate=0.0)


class Watched(IndexerSimulation):
    """An indexer run that notes, per admission and per step, what the rules below need."""

    def __init__(self, opts: SimulateOptions) -> None:
        super().__init__(opts)
        self.reused = 0  # sum over admissions of the plan's cached indexer prefix
        self.all_cached = 0  # admissions without restores whose every page hits at once
        self.busiest = 0  # most running + restoring after a step's admissions
        self.bound_by_restoring = 0  # steps the bound held a request back only thanks to them
        self.admitted_at: dict[str, int] = {}  # restoring request -> its admission step
        self.waited = 0  # steps spent restoring, from admission and end steps
        self.lagging = 0  # deliveries after which a landed copy was still unacknowledged
        self.landed = 0  # copies the offload worker landed

    def _admit(self, r: str) -> bool:
        p: SuffixPlan = self.plan(r)
        ok = super()._admit(r)
        if ok:
            self.reused += min(p.gpu_hit, p.admit_indexer)
            if r in self.restoring:
                self.admitted_at[r] = self._t
            else:
                assert self.group.hit(self.hashes[r]) == len(self.hashes[r]), (r, p)
                self.all_cached += 1
        return ok

    def _schedule(self) -> None:
        super()._schedule()
        busy = len(self.running) + len(self.restoring)
        self.busiest = max(self.busiest, busy)
        if self.pending and self.restoring and len(self.running) < self.o.concurrency <= busy:
            self.bound_by_restoring += 1

    def _completed(self, done: Completed) -> None:
        before = set(self.restoring)
        super()._completed(done)
        for r in before - set(self.restoring):
            self.waited += self._t - self.admitted_at.pop(r)

    def _deliver(self, port: WorkerPort, t: int) -> None:
        q = self.offload_worker.queued()
        super()._deliver(port, t)
        self.landed += q - self.offload_worker.queued()
        self.lagging += self.offload.get_stats()["open_jobs"] != self.offload_worker.queued()

    def drain(self) -> None:
        # requests still restoring now waited from their admission to this last step
        self.waited += sum(self._t - t for t in self.admitted_at.values())
        self.admitted_at.clear()
        super().drain()


def test_requests_waiting_for_restores_take_a_concurrency_slot() -> None:
    # the bound counts running and restoring requests: it is never exceeded, and it held
    # back a waiting request while some of the slots were restoring ones (seed 2 with a
    # roomy indexer group, so the bound is what binds)
    # (kills indexer_sim.py:124:arith:21, which freed a slot per restoring request: it
    # admitted a seventh request, for which the worker had no hot-state slot)
    sim = Watched(replace(OPTS, seed=2, concurrency=6, indexer_gpu_blocks=128))
    rep = sim.run()
    assert rep.violations == 0 and rep.data_mismatches == 0, rep.notes
    assert sim.busiest == 6
    assert sim.bound_by_restoring > 0  # (not vacuous)


@pytest.fixture(scope="module")
def seed0() -> tuple[Watched, SimulateReport]:
    """The synthetic seed-0 run, watched (one run for the rules that read it)."""
    sim = Watched(OPTS)
    rep = sim.run()
    assert rep.violations == 0 and rep.data_mismatches == 0, rep.notes
    return sim, rep


def test_gpu_indexer_hits_count_the_cached_prefix_each_admission_takes(
        seed0: tuple[Watched, SimulateReport]) -> None:
    # "GPU indexer hits" are the admitted pages whose indexer block was already on the
    # GPU (the plan's GPU hit within its admitted prefix), added up over the run
    # (kills indexer_sim.py:175:arith:6, which counted them down)
    sim, rep = seed0
    assert sim.reused > 0
    assert rep.indexer["indexer_gpu_hit_pages"] == sim.reused
    assert f"GPU indexer hits {sim.reused:,} pages" in indexer_lines(rep.indexer)[1]


def test_every_indexer_block_prefill_computes_is_cached_at_once(
        seed0: tuple[Watched, SimulateReport]) -> None:
    # the indexer blocks computed at admission are published under their pages' hashes:
    # a request admitted without restores finds all its pages cached right away
    # (kills indexer_sim.py:156:call:19, which never published them: later requests
    # lost those GPU hits)
    sim, rep = seed0
    assert sim.all_cached == rep.indexer["admissions"] - rep.indexer["suffix_restores"] > 0
    assert rep.indexer["indexer_gpu_hit_pages"] == 40  # seed 0's cached prefixes, reused


def test_restore_waits_count_every_step_a_request_spends_waiting_for_restores(
        seed0: tuple[Watched, SimulateReport]) -> None:
    # a request admitted at step a whose last restore lands at step b waited b - a steps
    # (the steps a + 1 .. b began with it waiting); one cut off by the end waited until
    # the last step. restore_waits adds these up, and only these (not steps with stores
    # in flight) (kills indexer_sim.py:257:var:4, which counted requests with any job
    # open, and indexer_sim.py:257:arith:9, which counted down)
    seed2 = Watched(replace(OPTS, seed=2, requests=8, steps=31))  # one cut off at the end
    rep2 = seed2.run()
    assert rep2.violations == 0 and rep2.data_mismatches == 0, rep2.notes
    for sim, rep in (seed0, (seed2, rep2)):
        assert sim.waited > 0  # (not vacuous)
        assert rep.indexer["restore_waits"] == sim.waited


def test_every_copy_the_offload_worker_lands_is_acknowledged_in_the_same_delivery() -> None:
    # the worker meta is taken after the step's copies land: once a delivery is done,
    # the only jobs still open are those still queued on the worker
    # (kills indexer_sim.py:228:reorder:6, which took it first: landed copies waited a
    # delivery for their ack)
    for seed in (0, 1):
        sim = Watched(replace(OPTS, seed=seed, requests=12, steps=60))
        rep = sim.run()
        assert rep.violations == 0 and rep.data_mismatches == 0, rep.notes
        assert sim.landed > 0  # (not vacuous)
        assert sim.lagging == 0


# --- the end of the run: only restoring requests are cut off by the indexer run -----------


class DrainSeen(IndexerSimulation):
    """An indexer run that notes, as it drains, what waits for restores or holds jobs."""

    restoring_at_drain: list[str]
    holding_at_drain: list[str]
    running_at_drain: int

    def drain(self) -> None:
        self.restoring_at_drain = sorted(self.restoring)
        self.holding_at_drain = sorted(set(self.held_jobs) - set(self.restoring))
        self.running_at_drain = len(self.running)
        super().drain()


def test_a_request_with_only_stores_in_flight_at_the_end_drains_like_any_other() -> None:
    # seed 0, 8 requests, 31 steps: the run ends with stores of three requests in flight
    # and no restore pending. Those requests are not cut off as restoring ones: the run
    # drains cleanly, still_running counts the running ones, and every indexer block and
    # offload job comes back (kills indexer_sim.py:262:var:5, which ended every request
    # with a job open as if it were restoring)
    sim = DrainSeen(replace(OPTS, requests=8, steps=31))
    rep = sim.run()
    assert rep.violations == 0 and rep.data_mismatches == 0, rep.notes
    assert sim.restoring_at_drain == []
    assert sim.holding_at_drain == ["req3", "req4", "req5"]  # (not vacuous)
    assert rep.still_running == sim.running_at_drain
    assert sim.held_jobs == {} and sim.to_free == {} and sim.ix_blocks == {}
    assert sim.group.num_free == sim.group.blocks
    assert rep.indexer["open_jobs"] == 0


# --- the row check: the MLA rows are still compared ---------------------------------------


def test_the_indexer_run_still_counts_wrong_mla_rows_as_data_mismatches() -> None:
    # a request whose GPU-resident MLA rows are never prefilled reads wrong bytes: the
    # indexer run counts those rows in data_mismatches though every indexer row is right
    # (kills indexer_sim.py:239:call:15, which compared only the indexer rows)
    rep = NoPrefillY(NO_PREFILL_OPTS, NO_PREFILL_ARRIVALS).run()
    assert rep.finished == 2 and rep.violations == 0
    assert rep.indexer["mismatches"] == 0 and rep.indexer["rows_checked"] == 640
    assert rep.data_mismatches > 0
    clean = IndexerSimulation(NO_PREFILL_OPTS, NO_PREFILL_ARRIVALS).run()
    assert clean.data_mismatches == 0 and clean.indexer["rows_checked"] == 640


# --- the metrics: fed whenever they are given ---------------------------------------------


class _Sized(_Recording):
    """Recording metrics that are also a sized collection: the acks seen (empty at first,
    so falsy until the first one)."""

    def __len__(self) -> int:
        return len(self.completed)


def test_metrics_are_fed_hisparses_worker_meta_whenever_given_even_when_empty_sized() -> None:
    # metrics are used because they were given (not None), whatever their truthiness:
    # every spill sent is seen completed by the end of the drain
    # (kills indexer_sim.py:229:none:9, which skipped falsy metrics)
    sim = IndexerSimulation(SimulateOptions(indexer_offload=True, requests=16, steps=200,
                                            seed=1))
    metrics = sim.metrics = _Sized(sim.config)
    assert len(metrics) == 0 and not metrics
    rep = sim.run()
    assert rep.violations == 0 and rep.spills > 0
    assert metrics.sent and metrics.completed == metrics.sent


# --- the MultiConnector -----------------------------------------------------------------


def test_a_finished_request_is_forgotten_as_loaded_by_any_child() -> None:
    # a request a child matched (and so loads) is forgotten when it finishes: no loader
    # is named for it after, and no child delays the free
    # (kills connectors/multi.py:178:call:4, which kept the loader of a finished request)
    a, b = Answering("a", 8), Answering("b", 0)
    m = MultiConnectorScheduler([a, b])
    assert m.get_num_new_matched_tokens("r", 0) == 8 and m.loader("r") == "a"
    assert m.request_finished("r", [3, 4]) is False
    assert m.loader("r") is None and m._loader == {}


class Sending(Answering):
    """A scheduler child whose step's metadata the test sets (empty bytes included)."""

    def __init__(self, name: str, meta: bytes | None) -> None:
        super().__init__(name, 0)
        self.meta = meta

    def build_connector_meta(self) -> bytes | None:
        return self.meta


@pytest.mark.parametrize("other", [None, b"{}"])
def test_a_childs_empty_metadata_is_a_part_of_the_message_not_a_missing_one(
        other: bytes | None) -> None:
    # a child that sends empty bytes sends a message: its part is in the joined message
    # (with empty data); only a child that sends None has no part
    # (kills connectors/multi.py:107:none:4, which dropped empty parts: with no other
    # part the whole message was None)
    m = MultiConnectorScheduler([Sending("a", b""), Sending("b", other)])
    raw = m.build_connector_meta()
    assert raw is not None
    want = [ChildBytes(child="a", data=b"")]
    if other is not None:
        want.append(ChildBytes(child="b", data=other))
    assert list(MULTI_MESSAGE.validate_json(raw).parts) == want
