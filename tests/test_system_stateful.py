"""The whole system on the reference executor, driven by Hypothesis with faults.

Requests arrive (some sharing prefixes), decode with random top-K, get spilled
under GPU pressure, finish or abort at any point; the stream completes copies
late and in batches; worker metas are delayed, batched, duplicated and delivered
out of order; malformed metadata and bad IDs are thrown at both sides. After
every step all protocol invariants hold (the coordinator checks them on every
action), the coordinator's own tables agree with the protocol state, and every
row the resolver returned holds exactly the bytes written for its position. Ended
requests retire and their IDs come back; a step's metadata is lost and the worker
restarts. Bad input (illegal spills, metas with repeated IDs, a request that can
never fit) gets a typed error and changes nothing. After each run drains, the
protocol state, the coordinator's tables and both pools are empty.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from hisparse.connector import MalformedMetadata
from hisparse.coordinator import HiSparseCoordinator, RequestNeverFits
from hisparse.simulate import SimulateOptions, Simulation
from hisparse.spec.errors import ActionNotEnabled, UnknownTransfer
from hisparse.spec.invariants import INVARIANTS, PROPERTIES
from hisparse.spec.messages import (
    CONNECTOR_METADATA,
    WORKER_META,
    HiSparseConnectorMetadata,
    HiSparseWorkerMeta,
    SparseKVPageTransfer,
)
from hisparse.worker import WorkerError
from tests.protocol_helpers import index_problems

STEPS = {"total": 0}
OPTS = SimulateOptions(
    requests=0, steps=0, top_k=16, block_tokens=8, row_bytes=32, layers=3,
    gpu_blocks=14, host_blocks=12, min_pages=2, max_pages=5, prefixes=2,
    prefix_pages=2, concurrency=4,
)


def coordinator_tables(c: HiSparseCoordinator) -> dict[str, Any]:
    """The coordinator's own tables and counters (outside the protocol state)."""
    return copy.deepcopy({k: v for k, v in vars(c).items() if k not in ("machine", "kv")})


def coordinator_problems(c: HiSparseCoordinator) -> list[str]:
    """The coordinator's indexes, recomputed from the protocol state (a test oracle)."""
    s = c.state
    running = {r for r, st in s.req.items() if st == "running"}
    resident = {
        p for r in running for p in s.pages_of(r)
        if (w := s.loc[p]) is not None and w[0] == "gpu" and not s.src_pin[w[1]]
    }
    unreferenced = {
        h for h, st in enumerate(s.host_state) if st == "valid" and not s.host_refs.get(h)
    }
    free = [h for h, st in enumerate(s.host_state) if st == "free"]
    t = vars(c)
    out = []
    if set(t["_resident"]) != resident:
        out.append(f"spillable pages {set(t['_resident'])} != {resident}")
    if set(t["_lru"]) != unreferenced:
        out.append(f"eviction LRU {set(t['_lru'])} != {unreferenced}")
    if sorted(t["_host_free"]) != free:
        out.append(f"free host heap {sorted(t['_host_free'])} != {free}")
    if set(t["_running"]) != running:
        out.append(f"running {set(t['_running'])} != {running}")
    unsent = set(t["_unsent"])  # not handed over: still held by some rank
    if not unsent <= set().union(*(set(d) for d in s.down)) or len(unsent) != len(t["_unsent"]):
        out.append(f"unsent {t['_unsent']} names commands no rank holds, or twice")
    for rank, sent in enumerate(t["_sent"]):  # per rank: handed over or not, its commands
        if sent | (unsent & set(s.down[rank])) != set(s.down[rank]) or sent & unsent:
            out.append(f"rank {rank}: sent {sent} / unsent {unsent} do not split down")
    retirable = [
        r for r, st in s.req.items()
        if st in ("finished", "aborted") and c.machine.retire_refusal(r) is None
    ]
    if retirable:
        out.append(f"ended requests {retirable} reference nothing but were not retired")
    return out + index_problems(s)


def snapshot(sim: Simulation) -> Any:
    """Everything a refused input must leave alone."""
    w = sim.worker
    pools = [sim.executor.snapshot(h.runtime.pools) for h in w.handles]
    return (
        sim.coordinator.state.clone(),
        coordinator_tables(sim.coordinator),
        copy.deepcopy(sim.kv.__dict__),
        copy.deepcopy(w.tables),
        [p["device"] for p in pools],
        [p["host"] for p in pools],
        sim.executor.queued(),
    )


def same(a: Any, b: Any) -> bool:
    import numpy as np

    return all(
        all(np.array_equal(x, y) for x, y in zip(u, v, strict=True)) if isinstance(u, list)
        and u and hasattr(u[0], "shape") else u == v
        for u, v in zip(a, b, strict=True)
    )


class SystemStateful(RuleBasedStateMachine):
    EXECUTOR = "reference"

    def __init__(self) -> None:
        super().__init__()
        self.sim = Simulation(replace(OPTS, executor=self.EXECUTOR))
        self.n = 0
        self.held: list[HiSparseWorkerMeta] = []
        self.delivered: list[HiSparseWorkerMeta] = []
        self.t = 0

    def _refused_or_done(self, call: Any, errors: tuple[type[Exception], ...]) -> bool:
        """Either accepted, or refused with a typed error and no change at all."""
        before = snapshot(self.sim)
        try:
            call()
        except errors:
            assert same(before, snapshot(self.sim)), "a refused input changed the state"
            return False
        return True

    def _refused(self, call: Any, errors: tuple[type[Exception], ...]) -> None:
        before = snapshot(self.sim)
        try:
            call()
        except errors:
            assert same(before, snapshot(self.sim)), "a refused input changed the state"
        else:
            raise AssertionError("bad input was accepted")

    @rule()
    def new_request(self) -> None:
        if self.n < 40:
            self.sim._new_request(self.n)
            self.n += 1

    @rule(data=st.data())
    def reuse_id(self, data: st.DataObject) -> None:
        """Declare a retired request's ID again (new pages, maybe a new prefix)."""
        s = self.sim.coordinator.state
        gone = [i for i in range(self.n) if f"req{i}" not in s.page_keys]
        if gone:
            self.sim._new_request(data.draw(st.sampled_from(gone)))

    @rule(data=st.data())
    def any_spill(self, data: st.DataObject) -> None:
        """spill() on any page: a page the protocol refuses leaks no host block."""
        s = self.sim.coordinator.state
        if not s.page_keys:
            return
        r = data.draw(st.sampled_from(sorted(s.page_keys)))
        i = data.draw(st.integers(0, len(s.page_keys[r]) + 1))
        self._refused_or_done(lambda: self.sim.coordinator.spill((r, i)), (ActionNotEnabled,))

    @rule(data=st.data())
    def repeated_ids(self, data: st.DataObject) -> None:
        """A meta built with model_construct (no validation) that repeats an ID."""
        c = self.sim.coordinator
        tids = sorted(vars(c)["_sent"][0]) or sorted(c.state.transfer_dst) or [0]
        tid = data.draw(st.sampled_from(tids))
        done = data.draw(st.booleans())
        meta = (HiSparseWorkerMeta.model_construct(enqueued=(), completed=(tid, tid)) if done
                else HiSparseWorkerMeta.model_construct(enqueued=(tid, tid), completed=()))
        self._refused(lambda: self.sim.sched.update_connector_output(meta), (UnknownTransfer,))

    @rule()
    def never_fits(self) -> None:
        """More pages than the GPU pool: admit says so with a typed error, changes nothing."""
        c, name = self.sim.coordinator, f"huge{self.n}"
        c.add_request(name, [f"{name}:{j}" for j in range(OPTS.gpu_blocks + 1)])
        self._refused(lambda: c.admit(name), (RequestNeverFits,))
        c.abort(name)
        assert name not in c.state.req, "an aborted request that holds nothing retires"

    @rule(drop_commands=st.booleans())
    def lose_worker(self, drop_commands: bool) -> None:
        """The worker restarts; held acks are lost, and maybe this step's commands."""
        if drop_commands:
            self.sim.sched.build_connector_meta()  # never reaches the worker
        self.held.clear()
        busy = self.sim.wconn.restart_worker()
        self.sim.sched.on_worker_lost(busy)

    @rule(send=st.booleans(), land=st.integers(0, 2))
    def spill_then_lose(self, send: bool, land: int) -> None:
        """A loss with transfers in flight: sent or not, copying or landed."""
        c = self.sim.coordinator
        for page in c.spillable(2):
            c.spill(page)
        if send:
            self.send_commands()
        self.sim.executor.release(min(land, len(self.sim.executor.queued())))
        self.lose_worker(drop_commands=not send)

    @rule(data=st.data())
    def forged_loss_report(self, data: st.DataObject) -> None:
        """A restart report naming a transfer that is not open is refused whole."""
        tid = data.draw(st.integers(10_000, 20_000))
        self._refused(lambda: self.sim.sched.on_worker_lost((tid,)), (UnknownTransfer,))

    @rule()
    def schedule(self) -> None:
        """Admissions (spilling under GPU pressure), finishes, random aborts."""
        self.sim._schedule()

    @rule(r=st.integers(0, 39))
    def abort(self, r: int) -> None:
        name = f"req{r}"
        if name in self.sim.running:
            self.sim.coordinator.abort(name)
            self.sim.worker.release(name)
            del self.sim.running[name]
        elif name in self.sim.pending:
            self.sim.coordinator.abort(name)
            self.sim.pending.remove(name)

    @rule()
    def send_commands(self) -> None:
        meta = self.sim.sched.build_connector_meta()
        if meta is not None:
            self.sim.wconn.bind_connector_metadata(CONNECTOR_METADATA.dump_json(meta))

    @rule()
    def decode(self) -> None:
        """Decode needs this step's commands applied first (as an engine step does)."""
        self.send_commands()
        topk = {r: self.sim._topk(r) for r in self.sim.running}
        if topk:
            self.t += 1
            leaders = {lead: topk for lead in set(self.sim.config.leaders)}
            before = self.sim.report.data_mismatches
            result = self.sim.worker.decode(leaders, step=self.t)
            self.sim._verify(result, topk)
            assert self.sim.report.data_mismatches == before, "resolver returned wrong bytes"

    @rule(n=st.integers(0, 4))
    def complete_copies(self, n: int) -> None:
        self.sim.executor.release(min(n, len(self.sim.executor.queued())))

    @rule()
    def take_worker_meta(self) -> None:
        meta = self.sim.wconn.get_worker_meta()
        if meta is not None:
            self.held.append(meta)

    @rule(data=st.data())
    def deliver(self, data: st.DataObject) -> None:
        """Deliver a held meta, possibly out of order; an early one may be refused."""
        if not self.held:
            return
        i = data.draw(st.integers(0, len(self.held) - 1))
        before = snapshot(self.sim)
        try:
            self.sim.sched.update_connector_output(WORKER_META.dump_json(self.held[i]))
        except UnknownTransfer:
            assert i > 0, "the oldest meta must always be accepted"
            assert same(before, snapshot(self.sim))
        else:
            self.delivered.append(self.held.pop(i))

    @rule(data=st.data())
    def duplicate(self, data: st.DataObject) -> None:
        if self.delivered:
            meta = data.draw(st.sampled_from(self.delivered))
            self._refused(lambda: self.sim.sched.update_connector_output(meta), (UnknownTransfer,))

    @rule(tid=st.integers(10_000, 20_000), done=st.booleans())
    def unknown_ack(self, tid: int, done: bool) -> None:
        meta = HiSparseWorkerMeta(completed=(tid,)) if done else HiSparseWorkerMeta(enqueued=(tid,))
        self._refused(lambda: self.sim.sched.update_connector_output(meta), (UnknownTransfer,))

    @rule(raw=st.sampled_from([b"{", b'{"enqueued": [1, 1]}', b'{"completed": "x"}',
                                b'{"enqueued": [], "extra": 1}']))
    def malformed_worker_meta(self, raw: bytes) -> None:
        self._refused(lambda: self.sim.sched.update_connector_output(raw), (MalformedMetadata,))

    @rule(raw=st.sampled_from([b"[]", b'{"transfers": [{"transfer_id": -1}]}',
                                b'{"replacements": [{"request_id": ""}]}']))
    def malformed_connector_metadata(self, raw: bytes) -> None:
        self._refused(lambda: self.sim.wconn.bind_connector_metadata(raw), (MalformedMetadata,))

    @rule(src=st.integers(0, 100), dst=st.integers(0, 100))
    def out_of_range_transfer(self, src: int, dst: int) -> None:
        spec = self.sim.worker.layout
        if src < spec.gpu_blocks and dst < spec.host_blocks:
            return
        meta = HiSparseConnectorMetadata(
            transfers=(SparseKVPageTransfer(transfer_id=99_999, src_gpu_block=src, dst_host_block=dst),)
        )
        self._refused(lambda: self.sim.wconn.bind_connector_metadata(meta), (WorkerError,))

    @invariant()
    def protocol_invariants(self) -> None:
        STEPS["total"] += 1
        for name, check in INVARIANTS.items():
            assert check(self.sim.coordinator.state) == [], name
        pool, s = self.sim.kv, self.sim.coordinator.state
        assert coordinator_problems(self.sim.coordinator) == []
        for g, owner in enumerate(s.gpu_owner):  # HMA and the coordinator agree
            assert pool.is_free(g) == (owner is None), g
            assert pool.is_pinned(g) == s.src_pin[g], g

    def teardown(self) -> None:
        sim = self.sim
        for meta in self.held:  # deliver what was held back, oldest first
            sim.sched.update_connector_output(meta)
        sim.drain()
        for name, check in PROPERTIES.items():
            assert check(sim.coordinator.state) == [], name
        c, s = sim.coordinator, sim.coordinator.state
        c.evict_published()
        assert coordinator_problems(c) == []
        assert {k: n for k, n in c.table_sizes().items() if n} == {}, "tables not drained"
        assert s.req == {} and s.loc == {} and not any(s.spill), "protocol state not empty"
        assert s.host_used == 0 and s.prefix == {}, "host pool not empty"
        assert sim.kv.num_free == sim.kv.num_blocks and not any(s.src_pin), "GPU pool not empty"


def run_system(machine: type[SystemStateful], examples: int) -> int:
    """Run the machine for ``examples`` runs of 100 steps; the invariant-checked steps."""
    STEPS["total"] = 0
    run_state_machine_as_test(
        machine, settings=settings(max_examples=examples, stateful_step_count=100, deadline=None)
    )
    print(f"{machine.EXECUTOR} system steps: {STEPS['total']}")
    return STEPS["total"]


def test_system_with_faults() -> None:
    assert run_system(SystemStateful, 300) >= 20_000


class SystemStatefulCuda(SystemStateful):
    """The same machine over the CUDA executor: real copies, real events, real kernels."""

    EXECUTOR = "cuda"


@pytest.mark.gpu
def test_system_with_faults_on_cuda() -> None:
    assert run_system(SystemStatefulCuda, 60) >= 4_000
