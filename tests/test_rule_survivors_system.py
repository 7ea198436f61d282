"""Rules of the executors, the worker process and the P/D simulation that survivors of
the whole mutation run showed (lines the suite ran without asserting their effect;
docs/mutation-run7)."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pytest

from hisparse import workerwire
from hisparse.config import GIB, HiSparseConfig
from hisparse.executor import PoolLayout, ReferenceExecutor
from hisparse.executor.errors import PendingHostWrite
from hisparse.msgfaults import MessageFaults
from hisparse.simulate import SimulateOptions, Simulation
from hisparse.spec.errors import MessageGap
from hisparse.workerport import LocalWorker
from hisparse.workerproc import ProcessWorker
from hisparse.workerwire import FrameError, unpack
from hisparse.workload import Arrival

LAYOUT = PoolLayout(gpu_blocks=2, host_blocks=4, block_tokens=2, row_bytes=16, hot_rows=3,
                    slots=2)


def test_a_host_read_is_refused_while_transfer_zero_is_queued_into_its_block() -> None:
    """Transfer ID 0 is an ID like any other: a copy it names still holds its block (an
    empty-is-missing test would read the block while the copy is in flight).
    Kills executor/stream.py:80:none:2."""
    ex = ReferenceExecutor()
    pools = ex.allocate(LAYOUT)
    src = LAYOUT.resident_row(1, 0)
    pools.device[src:src + 2] = np.arange(32, dtype=np.uint8).reshape(2, 16)
    ex.enqueue_spill(pools, 0, src_gpu_block=1, dst_host_block=2)
    before = pools.host.copy()
    with pytest.raises(PendingHostWrite) as info:
        ex.read_host_rows(pools, np.array([4], np.int64))  # host block 2's first row
    assert (info.value.host_block, info.value.transfer_id) == (2, 0)
    assert str(info.value).startswith("host block 2 still has copy 0 queued into it")
    assert (pools.host == before).all() and ex.queued() == [0]
    ex.release()
    assert ex.completed() == [0]
    assert (ex.read_host_rows(pools, np.array([4, 5], np.int64))
            == np.arange(32, dtype=np.uint8).reshape(2, 16)).all()


def test_rows_a_frame_cannot_carry_are_refused_and_the_worker_answers_on() -> None:
    """A refusal changes nothing: data of a dtype no frame carries is the caller's error,
    refused before anything is sent, not a broken worker (it stopped the child before)."""
    config = HiSparseConfig(host_pool_blocks=4, block_tokens=4, row_bytes=16, top_k=4,
                            layers=1)
    w = ProcessWorker(0, config, gpu_blocks=4, slots=2, executor="reference",
                      max_positions=16)
    try:
        with pytest.raises(FrameError, match=r"^a frame carries .*, not <f4$"):
            w.write_rows(np.zeros(1, np.int64),
                         np.zeros((1, 16), np.float32))
        assert w.queued() == () and w.d2h_bytes() == 0  # the same worker, still answering
    finally:
        w.close()


@pytest.mark.parametrize("back_at", [2, 3, 4, 10])
def test_an_aborted_import_counts_once_whenever_its_id_comes_back(back_at: int) -> None:
    """The simulator aborts the first import of "r" mid-import; "r" arrives again at
    ``back_at``. The abort counts once in the report, as the import figures count it,
    whether the run saw the import end at its next step or only when the ID came back
    (at step 2 it was not counted)."""
    keys = ("k0", "k1", "k2", "k3")
    opts = SimulateOptions(pd_share=1.0, gpu_blocks=16, host_blocks=16, steps=30,
                           abort_rate=1.0)
    rep = Simulation(opts, [Arrival(0, "r", keys, 3), Arrival(back_at, "r", keys, 3)]).run()
    assert rep.violations == 0
    assert rep.imports["failed_by_reason"] == {"aborted": 1}
    assert rep.aborted == 1


@dataclass
class _RoutedFaults(MessageFaults):
    """The run's own channel faults, keeping each connector metadata routed down and the
    ranks it was routed to."""

    down: dict[bytes, list[int]] = field(default_factory=dict)

    def route(self, direction: str, rank: int, raw: bytes) -> list[bytes]:
        if direction == "down":
            self.down.setdefault(raw, []).append(rank)
        return super().route(direction, rank, raw)


@pytest.mark.parametrize("seed", range(4))
def test_a_gap_at_one_rank_leaves_every_other_rank_its_steps_metadata(seed: int) -> None:
    """Each connector metadata goes to every rank, whatever befalls one of them: a rank
    that meets a gap takes the loss path and the ranks after it still get the message.
    (hisparse/simulate.py:691:loop:7 stopped at the gap: the ranks after it missed the
    step's commands.)"""
    opts = SimulateOptions(requests=8, steps=80, seed=seed, message_faults=1 / 3, tp=2,
                           gpu_blocks=20, host_blocks=40)
    sim = Simulation(opts)
    faults = sim.faults = _RoutedFaults(opts.message_faults, opts.seed, opts.tp)
    rep = sim.run()
    assert rep.violations == 0 and rep.message_faults["gaps"] > 0
    assert faults.down and all(sorted(set(r)) == [0, 1] for r in faults.down.values())


class _GapsTaken(Simulation):
    """A simulation that keeps, in order, each rank whose receiver refused connector
    metadata past a lost one and each rank that took the loss path."""

    def __init__(self, opts: SimulateOptions) -> None:
        super().__init__(opts)
        self.events: list[tuple[str, int]] = []
        for port in self.ports:
            assert isinstance(port, LocalWorker)
            inner = port.bind

            def bind(raw: bytes, inner: Callable[[bytes], None] = inner,
                     rank: int = port.rank) -> None:
                try:
                    inner(raw)
                except MessageGap:
                    self.events.append(("refused", rank))
                    raise

            port.bind = bind  # type: ignore[method-assign]

    def _gap(self, rank: int, t: int) -> None:
        self.events.append(("loss path", rank))
        super()._gap(rank, t)


@pytest.mark.parametrize("seed", range(4))
def test_a_rank_that_refuses_metadata_past_a_lost_one_takes_the_loss_path_at_once(
        seed: int) -> None:
    """(hisparse/simulate.py:697:call:102 went on to the next rank: the refusing rank's
    worker kept its gap until some later message noticed it)"""
    sim = _GapsTaken(SimulateOptions(requests=8, steps=80, seed=seed, message_faults=1 / 3,
                                     tp=2, gpu_blocks=20, host_blocks=40))
    rep = sim.run()
    assert rep.violations == 0
    refused = [i for i, e in enumerate(sim.events) if e[0] == "refused"]
    assert refused
    for i in refused:
        assert sim.events[i + 1] == ("loss path", sim.events[i][1])


def _frame(arrays: object) -> bytes:
    body = json.dumps({"op": "x", "head": {}, "arrays": arrays}).encode()
    return struct.pack("<I", len(body)) + body


@pytest.mark.parametrize(("arrays", "message"), [
    ([["zz", [1]]], "bad array in frame: zz [1]"),  # no dtype a frame carries
    ([5], "bad array in frame: 5"),  # not a (dtype, shape) pair
    ([["<i8"]], "bad array in frame: ['<i8']"),
    ([["<i8", 3]], "bad array in frame: <i8 3"),  # a shape that is no list
    ([["<i8", [True]]], "bad array in frame: <i8 [True]"),  # a bool is no size
    ([["<i8", [2**62, 2**62]]], "frame shorter than its arrays"),  # past int64: no wrap
])
def test_a_frame_whose_arrays_are_malformed_is_refused_as_a_frame_error(
        arrays: object, message: str) -> None:
    """Bytes from the other side of the pipe get the wire's typed error, whatever their
    array list holds (a TypeError or ValueError escaped before, and a shape past int64
    wrapped to a size of 0; hisparse/workerwire.py:70:reorder:1 sized a dtype before
    checking it)."""
    assert struct.calcsize("<I") == workerwire._LEN.size
    with pytest.raises(FrameError) as info:
        unpack(_frame(arrays))
    assert str(info.value) == message


def test_gpu_blocks_with_hisparse_disabled_need_the_gpu_budget_not_the_host_pools() -> None:
    """(hisparse/config.py:147:var:13 tested the host pool's budget instead)"""
    host_only = HiSparseConfig(host_pool_gib=1, block_tokens=4, row_bytes=16, top_k=4,
                               layers=1)
    with pytest.raises(ValueError, match=r"^gpu_blocks_disabled needs gpu_kv_gib \(a budget "
                                         r"in GiB\)$"):
        _ = host_only.gpu_blocks_disabled
    by_blocks = HiSparseConfig(host_pool_blocks=4, gpu_kv_gib=1, block_tokens=4,
                               row_bytes=16, top_k=4, layers=1)
    assert by_blocks.gpu_blocks_disabled == GIB // by_blocks.host_block_bytes
