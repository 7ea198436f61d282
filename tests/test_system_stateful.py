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
import numpy as np
import pytest
from hypothesis import Phase, settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from hisparse.connector import MalformedMetadata
from hisparse.coordinator import HiSparseCoordinator, RequestNeverFits
from hisparse.sharedpool import SharedHostExecutor
from hisparse.simulate import WRITER, SimulateOptions, Simulation
from hisparse.spec.errors import ActionNotEnabled, MessageGap, UnknownRank, UnknownTransfer
from hisparse.spec.invariants import INVARIANTS, PROPERTIES
from hisparse.spec.messages import (
    CONNECTOR_METADATA,
    HiSparseConnectorMetadata,
    HiSparseWorkerMeta,
    SparseKVPageTransfer,
)
from hisparse.worker import WorkerError
from tests.protocol_helpers import attributes, index_problems

STEPS = {"total": 0, "reader_waits": 0, "slow_rank_steps": 0}
OPTS = SimulateOptions(
    requests=0, steps=0, top_k=16, block_tokens=8, row_bytes=32, layers=3,
    gpu_blocks=14, host_blocks=12, min_pages=2, max_pages=5, prefixes=2,
    prefix_pages=2, concurrency=4,
)


def coordinator_tables(c: HiSparseCoordinator) -> dict[str, Any]:
    """The coordinator's own tables and counters (outside the protocol state)."""
    return copy.deepcopy({k: v for k, v in attributes(c).items() if k not in ("machine", "kv")})


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
    t = attributes(c)
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
    """Everything a refused input must leave alone (every rank's worker and pools)."""
    ranks = [sim.local(r) for r in range(len(sim.ports))]
    pools = [w.executor.snapshot(h.runtime.pools) for w in ranks for h in w.worker.handles]
    return (
        sim.coordinator.state.clone(),
        coordinator_tables(sim.coordinator),
        copy.deepcopy(sim.kv.__dict__),
        [copy.deepcopy(w.worker.tables) for w in ranks],
        [p["device"] for p in pools],
        [p["host"] for p in pools],
        [w.queued() for w in ranks],
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
    TP, BACKING = 1, "private"

    def __init__(self) -> None:
        super().__init__()
        self.sim = Simulation(replace(OPTS, executor=self.EXECUTOR, tp=self.TP,
                                      backing=self.BACKING))
        self.n = 0
        # per rank: worker metas taken but not yet delivered, and those delivered
        self.held: list[list[bytes]] = [[] for _ in range(self.TP)]
        self.delivered: list[list[bytes]] = [[] for _ in range(self.TP)]
        self.sent_metadata: list[bytes] = []  # connector metadata every rank took
        self.t = 0

    def _rank(self, data: st.DataObject) -> int:
        return data.draw(st.integers(0, self.TP - 1), label="rank") if self.TP > 1 else 0

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
        c, rank = self.sim.coordinator, self._rank(data)
        tids = sorted(attributes(c)["_sent"][rank]) or sorted(c.state.transfer_dst) or [0]
        tid = data.draw(st.sampled_from(tids))
        done = data.draw(st.booleans())
        meta = (HiSparseWorkerMeta.model_construct(enqueued=(), completed=(tid, tid), rank=rank)
                if done else
                HiSparseWorkerMeta.model_construct(enqueued=(tid, tid), completed=(), rank=rank))
        self._refused(lambda: self.sim.sched.update_connector_output(meta), (UnknownTransfer,))

    @rule()
    def never_fits(self) -> None:
        """More pages than the GPU pool: admit says so with a typed error, changes nothing."""
        c, name = self.sim.coordinator, f"huge{self.n}"
        c.add_request(name, [f"{name}:{j}" for j in range(OPTS.gpu_blocks + 1)])
        self._refused(lambda: c.admit(name), (RequestNeverFits,))
        c.abort(name)
        assert name not in c.state.req, "an aborted request that holds nothing retires"

    @rule(drop_commands=st.booleans(), data=st.data())
    def lose_worker(self, drop_commands: bool, data: st.DataObject) -> None:
        """A rank's worker restarts; its held acks are lost, and maybe this step's
        commands (to every rank: the engine step is lost)."""
        self._lose(self._rank(data), drop_commands)

    def _lose(self, rank: int, drop_commands: bool) -> None:
        if drop_commands:  # this step's commands never reach the lost rank
            meta = self.sim.sched.build_connector_meta()
            if meta is not None:
                raw = CONNECTOR_METADATA.dump_json(meta)
                for port in self.sim.ports:
                    if port.rank != rank:
                        port.bind(raw)
        self.held[rank].clear()
        busy = self.sim.ports[rank].restart()
        self.sim._worker_lost(rank, busy)

    @rule(send=st.booleans(), land=st.integers(0, 2), data=st.data())
    def spill_then_lose(self, send: bool, land: int, data: st.DataObject) -> None:
        """A loss with transfers in flight: sent or not, copying or landed."""
        c = self.sim.coordinator
        for page in c.spillable(2):
            c.spill(page)
        if send:
            self.send_commands()
        rank = self._rank(data)
        port = self.sim.ports[rank]
        port.land(min(land, len(port.queued())))
        self._lose(rank, drop_commands=not send)

    @rule(data=st.data())
    def forged_loss_report(self, data: st.DataObject) -> None:
        """A restart report naming a transfer that is not open is refused whole."""
        tid, rank = data.draw(st.integers(10_000, 20_000)), self._rank(data)
        self._refused(lambda: self.sim.sched.on_worker_lost((tid,), rank), (UnknownTransfer,))

    @rule(data=st.data())
    def unknown_rank(self, data: st.DataObject) -> None:
        """A meta or a loss report from a rank the coordinator does not have."""
        rank = data.draw(st.integers(self.TP, self.TP + 3))
        meta = HiSparseWorkerMeta(enqueued=(0,), rank=rank)
        self._refused(lambda: self.sim.sched.update_connector_output(meta), (UnknownRank,))
        self._refused(lambda: self.sim.sched.on_worker_lost((), rank), (UnknownRank,))

    @rule()
    def schedule(self) -> None:
        """Admissions (spilling under GPU pressure), finishes, random aborts."""
        self.sim._schedule()

    @rule(r=st.integers(0, 39))
    def abort(self, r: int) -> None:
        name = f"req{r}"
        if name in self.sim.running:
            self.sim.coordinator.abort(name)
            self.sim._release_workers(name)
            del self.sim.running[name]
        elif name in self.sim.pending:
            self.sim.coordinator.abort(name)
            self.sim.pending.remove(name)

    @rule()
    def send_commands(self) -> None:
        """This step's commands, as bytes, to every rank (the writer first)."""
        meta = self.sim.sched.build_connector_meta()
        if meta is not None:
            raw = CONNECTOR_METADATA.dump_json(meta)
            for port in self.sim.ports:
                port.bind(raw)
            self.sent_metadata = [*self.sent_metadata[-7:], raw]

    @rule()
    def decode(self) -> None:
        """Decode needs this step's commands applied first (as an engine step does);
        every rank resolves the same top-K and every rank's rows are checked."""
        self.send_commands()
        topk = {r: self.sim._topk(r) for r in self.sim.running}
        if topk:
            self.t += 1
            before = self.sim.report.data_mismatches
            for port in self.sim.ports:
                if self.sim.local(port.rank).writer_waits(topk, self.t):
                    STEPS["reader_waits"] += 1
                self.sim._verify(self.sim._decode(port, topk, self.t), topk)
                assert self.sim.report.data_mismatches == before, (
                    f"rank {port.rank}'s resolver returned wrong bytes")

    @rule(n=st.integers(0, 4), data=st.data())
    def complete_copies(self, n: int, data: st.DataObject) -> None:
        port = self.sim.ports[self._rank(data)]
        port.land(min(n, len(port.queued())))

    @rule(data=st.data())
    def take_worker_meta(self, data: st.DataObject) -> None:
        self._take(self._rank(data))

    def _take(self, rank: int) -> None:
        meta = self.sim.ports[rank].take_meta()
        if meta is not None:
            self.held[rank].append(meta)

    def _deliver_oldest(self, rank: int) -> None:
        """Every held meta of ``rank``, oldest first: each must be accepted."""
        held = self.held[rank]
        while held:
            self.sim.sched.update_connector_output(held[0])
            self.delivered[rank].append(held.pop(0))

    @rule(data=st.data())
    def deliver(self, data: st.DataObject) -> None:
        """Deliver a rank's held meta, possibly out of order; an early one may be refused.
        With a shared pool the writer's acks go first (the coordinator's merge rule)."""
        rank = self._rank(data)
        held = self.held[rank]
        if not held:
            return
        if self.BACKING == "shared" and rank != WRITER:
            self._take(WRITER)
            self._deliver_oldest(WRITER)
        i = data.draw(st.integers(0, len(held) - 1))
        before = snapshot(self.sim)
        try:
            self.sim.sched.update_connector_output(held[i])
        except MessageGap:  # numbered past the next one: refused whole
            assert i > 0, "the oldest meta must always be accepted"
            assert same(before, snapshot(self.sim))
        else:
            self.delivered[rank].append(held.pop(i))

    @precondition(lambda self: self.BACKING == "shared")
    @rule()
    def read_while_the_writer_copies(self) -> None:
        """A running request's page is spilled, every rank's enqueued ack is in (its table
        entry moves to the host), and every rank decodes that page while the writer's
        copy is still in flight: a reader's stream waits on the writer's event, and its
        rows are the writer's bytes."""
        c, sim = self.sim.coordinator, self.sim
        pages = [p for p in c.spillable(4) if p[0] in sim.running]
        if not pages:
            return
        r, i = pages[0]
        c.spill((r, i))
        self.send_commands()
        for rank in range(self.TP):  # the writer's acks first
            self._take(rank)
            self._deliver_oldest(rank)
        self.send_commands()  # the replacement reaches every rank
        b, k = OPTS.block_tokens, OPTS.top_k
        topk = np.full(k, -1, np.int32)
        topk[:b] = np.arange((i - 1) * b, i * b, dtype=np.int32)
        self.t += 1
        before = sim.report.data_mismatches
        for port in sim.ports:
            if sim.local(port.rank).writer_waits({r: topk}, self.t):
                STEPS["reader_waits"] += 1
            sim._verify(sim._decode(port, {r: topk}, self.t), {r: topk})
            assert sim.report.data_mismatches == before, f"rank {port.rank} read wrong bytes"

    @precondition(lambda self: self.TP > 1)
    @rule(data=st.data(), steps=st.integers(1, 3))
    def one_rank_slow(self, data: st.DataObject, steps: int) -> None:
        """One rank runs ahead for a few engine steps, its copies landing and its acks
        arriving at once, while the other ranks' streams and acks lag behind (they land
        and report in later rules, steps later). Nothing is published or freed until
        the slow ranks catch up (the invariants hold throughout)."""
        fast = self._rank(data)
        if self.BACKING == "shared" and fast != WRITER:
            fast = WRITER  # a reader's acks need the writer's first: the writer runs ahead
        port = self.sim.ports[fast]
        for _ in range(steps):
            STEPS["slow_rank_steps"] += 1
            self.schedule()
            self.decode()
            port.land(None)
            self._take(fast)
            self._deliver_oldest(fast)

    @rule(data=st.data())
    def duplicate(self, data: st.DataObject) -> None:
        """A rank's meta delivered again: numbered below the next one, it is ignored and
        nothing changes."""
        delivered = self.delivered[self._rank(data)]
        if delivered:
            meta = data.draw(st.sampled_from(delivered))
            before = snapshot(self.sim)
            ignored = self.sim.coordinator.metas_ignored
            self.sim.sched.update_connector_output(meta)
            assert same(before, snapshot(self.sim)), "a replayed meta changed the state"
            assert self.sim.coordinator.metas_ignored == ignored + 1

    @rule(data=st.data())
    def replay_metadata(self, data: st.DataObject) -> None:
        """A connector metadata the rank already took, delivered again: ignored before
        any copy is enqueued."""
        rank = self._rank(data)
        sent = self.sent_metadata
        if sent:
            raw = data.draw(st.sampled_from(sent))
            port = self.sim.ports[rank]
            before, queued = snapshot(self.sim), port.queued()
            port.bind(raw)
            assert port.queued() == queued and same(before, snapshot(self.sim))

    @rule(tid=st.integers(10_000, 20_000), done=st.booleans())
    def unknown_ack(self, tid: int, done: bool) -> None:
        meta = HiSparseWorkerMeta(completed=(tid,)) if done else HiSparseWorkerMeta(enqueued=(tid,))
        self._refused(lambda: self.sim.sched.update_connector_output(meta), (UnknownTransfer,))

    @rule(raw=st.sampled_from([b"{", b'{"enqueued": [1, 1]}', b'{"completed": "x"}',
                                b'{"enqueued": [], "extra": 1}']))
    def malformed_worker_meta(self, raw: bytes) -> None:
        self._refused(lambda: self.sim.sched.update_connector_output(raw), (MalformedMetadata,))

    @rule(raw=st.sampled_from([b"[]", b'{"transfers": [{"transfer_id": -1}]}',
                                b'{"replacements": [{"request_id": ""}]}']), data=st.data())
    def malformed_connector_metadata(self, raw: bytes, data: st.DataObject) -> None:
        port = self.sim.ports[self._rank(data)]
        self._refused(lambda: port.bind(raw), (MalformedMetadata,))

    @rule(src=st.integers(0, 100), dst=st.integers(0, 100), data=st.data())
    def out_of_range_transfer(self, src: int, dst: int, data: st.DataObject) -> None:
        spec = self.sim.worker.layout
        if src < spec.gpu_blocks and dst < spec.host_blocks:
            return
        meta = HiSparseConnectorMetadata(
            transfers=(SparseKVPageTransfer(transfer_id=99_999, src_gpu_block=src, dst_host_block=dst),)
        )
        port = self.sim.ports[self._rank(data)]
        self._refused(lambda: port.bind(CONNECTOR_METADATA.dump_json(meta)), (WorkerError,))

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
        try:
            self._drained()
        finally:
            self.sim.close()

    def _drained(self) -> None:
        sim = self.sim
        if self.BACKING == "shared":  # a reader's held enqueued acks need the writer's
            self._take(WRITER)
        for rank in range(self.TP):  # deliver what was held back, oldest first (writer first)
            self._deliver_oldest(rank)
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
    STEPS.update(total=0, reader_waits=0, slow_rank_steps=0)
    run_state_machine_as_test(
        machine, settings=settings(max_examples=examples, stateful_step_count=100, deadline=None)
    )
    print(f"{machine.EXECUTOR} system steps ({machine.TP} rank(s), {machine.BACKING}): "
          f"{STEPS['total']}; slow-rank steps {STEPS['slow_rank_steps']}, reader waits on the "
          f"writer {STEPS['reader_waits']}")
    return STEPS["total"]


def test_system_with_faults() -> None:
    assert run_system(SystemStateful, 300) >= 20_000


class SystemStatefulTP(SystemStateful):
    """Two ranks with private host pools, each with its own faults: its stream slow, its
    metas delayed, out of order or duplicated, its worker restarted, its commands lost."""

    TP = 2


class SystemStatefulTPShared(SystemStatefulTP):
    """Two ranks over one shared host allocation: rank 0 copies, rank 1 reads it after
    the writer's events."""

    BACKING = "shared"


def test_system_two_ranks_with_faults() -> None:
    assert run_system(SystemStatefulTP, 100) >= 6_000
    assert STEPS["slow_rank_steps"] > 0


def test_system_two_ranks_shared_pool_with_faults() -> None:
    assert run_system(SystemStatefulTPShared, 100) >= 6_000
    assert STEPS["slow_rank_steps"] > 0 and STEPS["reader_waits"] > 0


class SystemStatefulCuda(SystemStateful):
    """The same machine over the CUDA executor: real copies, real events, real kernels."""

    EXECUTOR = "cuda"


@pytest.mark.gpu
def test_system_with_faults_on_cuda() -> None:
    assert run_system(SystemStatefulCuda, 60) >= 4_000


class SkipsWriterEvent(SystemStatefulTPShared):
    """The injected bug reader_skips_writer_event: rank 1 does not wait on the writer."""

    def __init__(self) -> None:
        super().__init__()
        reader = self.sim.local(1).executor
        assert isinstance(reader, SharedHostExecutor) and not reader.writer
        reader.skip_writer_wait = True


def test_a_reader_that_skips_the_writer_event_is_caught() -> None:
    """The same machine with the reader not waiting: its rows are caught as wrong."""
    with pytest.raises(AssertionError, match=r"rank 1('s resolver returned| read) wrong bytes"):
        run_state_machine_as_test(SkipsWriterEvent, settings=settings(
            max_examples=100, stateful_step_count=100, deadline=None, database=None,
            phases=[Phase.generate]))
