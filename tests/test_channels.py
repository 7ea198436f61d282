"""Messages that arrive twice, late or never (issue 22), through the public API with the
reference executor: a replayed command never overwrites a published page, a restart
after a replay recovers, a gap goes through the worker-loss path."""

from __future__ import annotations

import numpy as np
import pytest

from hisparse.blockpool import BlockPool
from hisparse.channel import Receiver
from hisparse.config import HiSparseConfig
from hisparse.connector import HiSparseConnector, KVConnectorRole
from hisparse.coordinator import HiSparseCoordinator
from hisparse.executor.reference import ReferenceExecutor
from hisparse.spec.errors import BadSequence, MessageGap
from hisparse.spec.messages import CONNECTOR_METADATA, HiSparseWorkerMeta
from hisparse.workerport import LocalWorker

CFG = HiSparseConfig(host_pool_blocks=4, block_tokens=16, row_bytes=64, top_k=16)
B = CFG.block_tokens


class Pair:
    """A scheduler-role connector over a coordinator and one local worker (rank 0)."""

    def __init__(self, gpu_blocks: int = 1) -> None:
        self.kv = BlockPool(gpu_blocks)
        self.c = HiSparseCoordinator(CFG, self.kv, gpu_blocks=gpu_blocks, check=True)
        self.sched = HiSparseConnector(KVConnectorRole.SCHEDULER, coordinator=self.c)
        self.port = LocalWorker(0, CFG, ReferenceExecutor(), gpu_blocks=gpu_blocks, slots=2)

    def admit(self, r: str, keys: list[str], fill: int | None = None) -> None:
        self.c.add_request(r, keys)
        adm = self.c.admit(r)
        assert adm is not None
        self.port.admit(r, adm.table)
        if fill is not None:  # prefill writes every GPU page of r with byte ``fill``
            for where in adm.table:
                if where[0] == "gpu":
                    rows = np.arange(where[1] * B, (where[1] + 1) * B, dtype=np.int64)
                    data = np.full((len(self.port.worker.handles), B, CFG.row_bytes), fill,
                                   np.uint8)
                    self.port.write_rows(rows, data)

    def finish(self, r: str) -> None:
        self.c.finish(r)
        self.port.release(r)

    def send(self) -> bytes | None:
        """This step's connector metadata as wire bytes, bound on the worker."""
        meta = self.sched.build_connector_meta()
        if meta is None:
            return None
        raw = CONNECTOR_METADATA.dump_json(meta)
        self.port.bind(raw)
        return raw

    def reply(self, land: bool = True) -> None:
        if land:
            self.port.land(None)
        raw = self.port.take_meta()
        if raw is not None:
            self.sched.update_connector_output(raw)

    def host_bytes(self, h: int) -> set[int]:
        """The distinct byte values of host block h, in every layer."""
        ex, out = self.port.executor, set()
        for handle in self.port.worker.handles:
            rows = np.arange(h * B, (h + 1) * B, dtype=np.int64)
            out |= set(np.unique(ex.read_host_rows(handle.runtime.pools, rows)).tolist())
        return out


def test_replayed_first_spill_leaves_the_published_page_unchanged() -> None:
    p = Pair(gpu_blocks=1)
    p.admit("A", ["kA1"], fill=0xAA)
    tid = p.c.spill(("A", 1))
    first = p.send()
    assert tid is not None and first is not None
    p.reply()  # enqueued and completed together: published
    assert p.c.state.host_state[0] == "valid" and p.c.state.prefix["kA1"] == {0}
    assert p.host_bytes(0) == {0xAA}
    p.finish("A")
    p.admit("B", ["kB1"], fill=0xBB)  # reuses GPU block 0
    assert p.c.state.loc[("B", 1)] == ("gpu", 0)
    p.port.bind(first)  # the first spill's metadata bytes, again
    assert p.port.queued() == ()  # ignored before any copy was enqueued
    assert p.port.worker.replays_ignored == 1
    p.reply()
    assert p.host_bytes(0) == {0xAA}
    p.admit("C", ["kA1"])  # a prefix hit on the published page
    assert p.c.state.loc[("C", 1)] == ("host", 0)
    topk = {"C": np.arange(CFG.top_k, dtype=np.int32)}
    rows = p.port.decode(topk, step=1)
    assert rows.misses == CFG.top_k
    assert all(set(np.unique(seen).tolist()) == {0xAA} for seen in rows.seen.values())


def test_restart_after_a_replay_recovers_and_pins_nothing() -> None:
    p = Pair(gpu_blocks=2)
    p.admit("A", ["kA1", "kA2"], fill=0xAA)
    p.c.spill(("A", 1))
    first = p.send()
    assert first is not None
    p.reply()  # transfer 1 completed and published
    p.c.spill(("A", 2))
    assert p.send() is not None  # transfer 2: its copy is queued, not landed
    p.port.bind(first)  # a completed transfer's metadata replayed
    busy = p.port.restart()  # the worker restarts while it copies
    assert busy == (1,)  # only transfer 2 (IDs from 0): the replay enqueued nothing
    p.sched.on_worker_lost(busy)  # recovers (before: UnknownTransfer, a block pinned)
    for _ in range(4):  # run steps until nothing is open
        p.send()
        p.reply()
    assert not p.c.state.open_spills and not any(p.c.state.src_pin)
    assert not p.kv._pinned
    assert p.c.table_sizes()["sent"] == 0 and p.port.queued() == ()


def test_a_lost_metadata_is_a_gap_that_takes_the_loss_path() -> None:
    p = Pair(gpu_blocks=2)
    p.admit("A", ["kA1", "kA2"], fill=0xAA)
    p.c.spill(("A", 1))
    lost = p.sched.build_connector_meta()  # never arrives
    assert lost is not None and lost.transfers
    with pytest.raises(MessageGap, match="expected message 0, got 1"):
        p.send()  # the next step's metadata (a heartbeat: the transfer is open)
    assert p.port.queued() == ()  # refused whole
    busy = p.port.restart()
    p.sched.on_worker_lost(busy, 0)
    p.port.bind(CONNECTOR_METADATA.dump_json(lost))  # arrives late: ignored
    assert p.port.queued() == ()
    p.send()  # the first metadata of the new epoch is taken
    p.reply()
    assert not p.c.state.open_spills and not any(p.c.state.src_pin)


def test_a_lost_metadata_is_a_gap_that_names_the_workers_own_rank() -> None:
    """The engine runs the loss path of the rank the gap names: a worker's receiver is
    its own rank's (hisparse/worker.py:145:var:4 named it by its GPU block count)."""
    p = Pair(gpu_blocks=2)
    p.admit("A", ["kA1", "kA2"], fill=0xAA)
    p.c.spill(("A", 1))
    assert p.sched.build_connector_meta() is not None  # never arrives
    nxt = p.sched.build_connector_meta()  # a heartbeat: the transfer is open
    assert nxt is not None and nxt.since is not None and nxt.epoch is not None
    # the same step's metadata for two ranks (the numbers of rank 1 as rank 0's)
    two = nxt.model_copy(update={"since": nxt.since * 2, "epoch": nxt.epoch * 2})
    rank1 = LocalWorker(1, CFG, ReferenceExecutor(), gpu_blocks=2, slots=2)
    with pytest.raises(MessageGap, match="connector metadata of rank 1") as gap:
        rank1.bind(CONNECTOR_METADATA.dump_json(two))
    assert gap.value.rank == 1 and rank1.queued() == ()


def test_a_lost_worker_meta_is_a_gap_and_a_replayed_one_is_ignored() -> None:
    p = Pair(gpu_blocks=2)
    p.admit("A", ["kA1", "kA2"], fill=0xAA)
    p.c.spill(("A", 1))
    p.send()
    p.port.land(None)
    lost = p.port.take_meta()  # never arrives
    assert lost is not None
    p.send()  # a heartbeat: the transfer is still open
    nxt = p.port.take_meta()
    assert nxt is not None
    before = p.c.state.clone()
    with pytest.raises(MessageGap, match="worker meta of rank 0"):
        p.sched.update_connector_output(nxt)
    assert p.c.state == before  # refused whole
    # its enqueued ack never arrived: abandoned (the page stays resident, nothing published)
    p.sched.on_worker_lost(p.port.restart())
    assert p.c.state.host_state[0] == "free" and p.c.state.loc[("A", 1)] == ("gpu", 0)
    after = p.c.state.clone()
    p.sched.update_connector_output(lost)  # late, from before the loss: ignored
    assert p.c.metas_ignored == 1 and p.c.state == after
    p.send()
    p.reply()
    assert not p.c.state.open_spills


def test_malformed_numbers_are_refused_and_change_nothing() -> None:
    p = Pair()
    before = p.c.state.clone()
    for seq, since, epoch in ((3, 5, 0), ("3", 0, 0), (3, 0, -1), (3, [0], 0)):
        bad = HiSparseWorkerMeta.model_construct(
            enqueued=(), completed=(), rank=0, seq=seq, since=since, epoch=epoch
        )
        with pytest.raises(BadSequence):
            p.c.on_worker_meta(bad)
        assert p.c.state == before
    with pytest.raises(ValueError, match="seq, since and epoch"):
        HiSparseWorkerMeta(seq=1)


def test_receiver_rules() -> None:
    rx = Receiver("test", 0)
    assert rx.classify(0, 0, 0) == "apply"
    rx.accept(0)
    assert rx.classify(0, 0, 0) == "ignore"  # a duplicate
    with pytest.raises(MessageGap):
        rx.classify(0, 0, 2)  # 1 was lost
    with pytest.raises(MessageGap):
        rx.classify(1, 3, 3)  # an epoch this side's loss path never started
    rx.lost()
    assert rx.classify(0, 0, 1) == "ignore"  # sent before the loss
    with pytest.raises(MessageGap):
        rx.classify(1, 4, 5)  # the new epoch's first message (4) was lost
    assert rx.classify(1, 4, 4) == "apply"
    rx.accept(4)
    assert rx.classify(1, 4, 5) == "apply" and rx.ignored == 2


def test_a_restart_before_any_message_still_takes_the_next_epoch() -> None:
    """A loss before anything was sent: the new epoch starts at the same number."""
    p = Pair(gpu_blocks=2)
    p.sched.on_worker_lost(p.port.restart())
    p.admit("A", ["kA1"], fill=0xAA)
    p.c.spill(("A", 1))
    p.send()
    assert p.port.queued() != ()  # applied, not ignored as pre-loss
    p.reply()
    assert p.c.state.host_state[0] == "valid"
