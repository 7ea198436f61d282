"""Rules of the simulator's metrics and P/D imports, a worker loss's imports, the worker
process harness, the import acks' shape check and the import runner that survivors of
the whole mutation run showed (docs/mutation-run7)."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hisparse.metrics import HiSparseMetrics
from hisparse.msgshape import worker_meta_imports
from hisparse.sharedpool import SharedHostPool
from hisparse.simulate import SimulateOptions, Simulation
from hisparse.spec.errors import MalformedMessage
from hisparse.spec.machine import ProtocolMachine
from hisparse.spec.messages import (
    CONNECTOR_METADATA,
    HiSparseConnectorMetadata,
    ImportFailure,
    SparseKVPageTransfer,
)
from hisparse.workerproc import ProcessWorker, WorkerProcessError
from hisparse.workload import Arrival
from tests.protocol_helpers import import_walk
from tests.test_pdimport_runner import BLOCK, Rig, command, drain
from tests.test_rule_metrics_exact import samples
from tests.test_rule_msgshape_imports import _ack
from tests.test_sharedpool import CONFIG, GPU, SLOTS

# --- the simulator: metrics and P/D imports ------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_prefix_hit_of_a_run_without_losses_observes_its_reuse_gap(seed: int) -> None:
    # each host page an admission reuses was published by a completed ack the metrics saw
    # first, so every prefix hit observes one reuse gap: the histogram counts exactly the
    # run's prefix hits (kills simulate.py:656:call:71, which never showed the metrics the
    # worker metas: a page's first hit after its publish observed nothing)
    opts = SimulateOptions(requests=20, steps=200, seed=seed, host_blocks=24)
    sim = Simulation(opts)
    metrics = sim.metrics = HiSparseMetrics(sim.config)
    rep = sim.run()
    assert rep.violations == 0 and rep.prefix_hits > 0  # (not vacuous: pages were reused)
    gap = samples(metrics, "hisparse_host_block_reuse_gap_steps")
    assert gap["count"] == rep.prefix_hits


def test_an_aborted_imports_id_declared_again_may_be_aborted_again() -> None:
    # "r" imports at step 0 and is aborted mid-import at step 1 (abort rate 1); its ID
    # arrives again at step 2 and that import is aborted mid-import too: the simulator
    # forgets the first abort once it has counted it. "z" (one page) keeps the run
    # stepping and is still decoding when it ends (kills simulate.py:540:call:34, which
    # kept "r" among the aborted: its second import was never aborted and completed)
    keys = ("k0", "k1", "k2", "k3")
    arrivals = [Arrival(0, "r", keys, 3), Arrival(2, "r", keys, 3), Arrival(6, "z", ("z0",), 3)]
    sim = Simulation(SimulateOptions(pd_share=1.0, gpu_blocks=16, host_blocks=16, steps=30,
                                     abort_rate=1.0), arrivals)
    rep = sim.run()
    assert rep.violations == 0 and rep.data_mismatches == 0, rep.notes
    assert (rep.requests, rep.aborted, rep.finished, rep.still_running) == (3, 2, 0, 1)
    figures = {k: rep.imports[k] for k in ("arrived", "device", "host", "failed",
                                           "failed_by_reason")}
    assert figures == {"arrived": 3, "device": 1, "host": 0, "failed": 2,
                       "failed_by_reason": {"aborted": 2}}
    assert sim.pd is not None and sim.pd.aborted == set() and sim.importing == {}


# --- the protocol machine: a worker loss fails its imports ---------------------------------


def test_a_worker_loss_fails_every_import_landing_or_landed_and_no_other() -> None:
    # in every state of seeded import walks, WorkerLoss fails each import whose bytes are
    # landing or have landed (reported, not yet consumed): it names them, in the order
    # the state holds them, and leaves every other import as it was (kills
    # spec/machine.py:1370:drop:3, which left a landed import landed)
    met: Counter[str] = Counter()
    for seed in range(6):
        for m in import_walk(seed, 60):
            s = m.state
            live = [r for r, x in s.imp.items() if x.phase in ("landing", "landed")]
            if not live:
                continue
            met.update(s.imp[r].phase for r in live)
            v = ProtocolMachine.create(s.config)
            v.state = s.clone()
            out = v.WorkerLoss(0)
            assert out.imports_failed == live
            assert v.state.imp == {r: x._replace(phase="failed") if r in live else x
                                   for r, x in s.imp.items()}
    assert met["landing"] > 0 and met["landed"] > 0  # (not vacuous: both phases met)


# --- the worker process harness ----------------------------------------------------------------


def _reader(skip_writer_wait: bool, pool: SharedHostPool) -> ProcessWorker:
    return ProcessWorker(1, CONFIG, gpu_blocks=GPU, slots=SLOTS, executor="reference",
                         max_positions=16, shared=pool.name, writer=False,
                         skip_writer_wait=skip_writer_wait)


def test_a_reader_process_started_to_skip_the_writers_wait_reads_stale_shared_bytes() -> None:
    # the injected bug reaches the child's executor: a reader process told to skip the
    # writer's events does not wait on transfer 5 (the writer has not copied it) and reads
    # the allocation's zeros (kills workerproc.py:179:var:6, which sent the reader's
    # ``writer`` flag, False, as the bug: the reader waited)
    pool = SharedHostPool(CONFIG.pool_layout(GPU, SLOTS), CONFIG.layers)
    reader = _reader(True, pool)
    try:
        data = np.arange(4 * 16, dtype=np.uint8).reshape(1, 4, 16) + 7
        t = SparseKVPageTransfer(transfer_id=5, src_gpu_block=2, dst_host_block=3)
        reader.write_rows(np.arange(2 * 4, 3 * 4, dtype=np.int64), data)
        reader.bind(CONNECTOR_METADATA.dump_json(HiSparseConnectorMetadata(transfers=(t,))))
        reader.admit("r", [("host", 3)])
        got = reader.decode({"r": np.arange(4, dtype=np.int32)}, 1)
        assert got.waits_on == ()
        assert not got.seen[0].any()  # zeros: the copy never landed
    finally:
        reader.close()
        pool.close()


def test_a_stopped_worker_process_refuses_a_call_as_stopped_before_building_its_frame(
) -> None:
    # a call to a stopped worker is refused as stopped even when its frame could not be
    # built (float64 rows are no frame's dtype): the stop is what the caller must learn
    # (kills workerproc.py:205:reorder:0, which built the frame first: a FrameError)
    pool = SharedHostPool(CONFIG.pool_layout(GPU, SLOTS), CONFIG.layers)
    w = _reader(False, pool)
    w.close()
    try:
        with pytest.raises(WorkerProcessError,
                           match=r"^rank 1: the worker process was stopped$"):
            w.write_rows(np.arange(4, dtype=np.int64), np.zeros((1, 4, 16), np.float64))
    finally:
        pool.close()


FAKE_CUPY = '''"""A CuPy that loads and sees one device, and has nothing else (a test's)."""
import types

cuda = types.SimpleNamespace(
    runtime=types.SimpleNamespace(is_hip=False, getDeviceCount=lambda: 1))
'''


def test_a_worker_process_shapes_its_cuda_executor_by_the_max_positions_asked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the child builds its CUDA executor with the max_positions it is given: one past the
    # resolver's limit is refused by the executor, naming it (a CuPy that loads and has
    # nothing else, on the path the spawned child inherits: the refusal comes before any
    # device is touched) (kills workerproc.py:178:var:4, which sent the rank, 3, instead)
    (tmp_path / "cupy").mkdir()
    (tmp_path / "cupy" / "__init__.py").write_text(FAKE_CUPY)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with pytest.raises(WorkerProcessError,
                           match=r"^rank 3: ExecutorConfigError: max_positions must be in "
                                 r"1\.\.2\*\*31-1, got 2147483648$"):
            ProcessWorker(3, CONFIG, gpu_blocks=GPU, slots=SLOTS, executor="cuda",
                          max_positions=2**31)
    finally:  # the fake is the child's alone: this process never keeps it
        if str(getattr(sys.modules.get("cupy"), "__file__", "")).startswith(str(tmp_path)):
            del sys.modules["cupy"]


# --- the import acks' shape check ----------------------------------------------------------


class DetailUnreadable(ImportFailure):
    """A failure ack whose detail cannot be read (a broken object, though an ack)."""

    def __getattribute__(self, name: str) -> Any:
        if name == "detail":
            raise RuntimeError("read detail")
        return super().__getattribute__(name)


def test_a_failure_ack_with_an_unknown_reason_is_named_before_its_detail_is_read() -> None:
    # the shape check reads a failure's fields in order and names the first bad one: an
    # unknown reason is a MalformedMessage naming it, the detail unread (kills
    # msgshape.py:211:reorder:8, which read the detail first: the read's own error)
    bad = DetailUnreadable.model_construct(import_id=1, reason="tired", detail="")
    with pytest.raises(MalformedMessage, match=r"^import failure reason 'tired' \(str\)$"):
        worker_meta_imports(_ack(imports_failed=(bad,)))


# --- the import runner ---------------------------------------------------------------------


def test_a_worker_loss_counts_each_import_in_flight_as_lost_once(loopback_rig: Rig) -> None:
    # two imports in flight at a worker loss: the runner's failure reasons count two
    # worker_lost, nothing else (kills pdimport/runner.py:205:arith:1, which counted -2)
    loopback_rig.hold("a", 3 * BLOCK, 1)
    loopback_rig.hold("b", 3 * BLOCK, 2)
    loopback_rig.runner.start(command(0, "a", "host", 3 * BLOCK, [None] * 3, [0, 1, 2]))
    loopback_rig.runner.start(command(1, "b", "host", 3 * BLOCK, [None] * 3, [3, 4, 5]))
    loopback_rig.runner.advance()
    assert loopback_rig.runner.stats.reasons == Counter()
    assert sorted(loopback_rig.runner.restart()) == [0, 1]
    assert loopback_rig.runner.stats.reasons == Counter({"worker_lost": 2})


def test_a_worker_loss_takes_every_unsent_import_ack_with_it(loopback_rig: Rig) -> None:
    # an import done (its ack not taken yet), one failed at once, one in flight with a
    # page landed: after the loss nothing is reported, a done import's ack neither
    # (kills pdimport/runner.py:213:call:2, which kept the done ack for the new worker)
    loopback_rig.hold("d", 1 * BLOCK, 3)
    loopback_rig.runner.start(command(0, "d", "device", 1 * BLOCK, [3], [None]))
    for _ in range(10):
        loopback_rig.runner.advance()
        if not loopback_rig.runner.live:
            break
    assert not loopback_rig.runner.live  # "d" is done, its acks wait
    loopback_rig.hold("c", 2 * BLOCK, 4)
    configured, loopback_rig.runner.prefiller = loopback_rig.runner.prefiller, "the-configured-one"
    loopback_rig.runner.start(command(1, "c", "host", 2 * BLOCK, [None, None], [5, 6]))
    loopback_rig.runner.prefiller = configured
    loopback_rig.hold("a", 3 * BLOCK, 5)
    loopback_rig.runner.start(command(2, "a", "host", 3 * BLOCK, [None] * 3, [0, 1, 2]))
    loopback_rig.runner.advance()
    assert loopback_rig.runner.restart() == (2,)
    assert loopback_rig.runner.take_acks() == ((), (), ())
    loopback_rig.runner.start(command(3, "d", "device", 1 * BLOCK, [3], [None]))  # imports again
    landed, done, failed = drain(loopback_rig)
    assert (landed, done, failed) == ({3: [1]}, [3], {})


def test_a_runner_is_idle_only_with_no_import_in_flight_and_no_slot_held(loopback_rig: Rig) -> None:
    # a device-target import in flight holds no staging slot, and a slot held with no
    # import in flight: neither runner is idle (kills pdimport/runner.py:228:bool:1,
    # which took either for idle)
    assert loopback_rig.runner.idle
    loopback_rig.hold("a", 2 * BLOCK, 6)
    loopback_rig.runner.start(command(0, "a", "device", 2 * BLOCK, [0, 1], [None, None]))
    assert loopback_rig.staging.in_use == 0 and not loopback_rig.runner.idle
    drain(loopback_rig)
    assert loopback_rig.runner.idle
    leases = loopback_rig.staging.lease("someone", 1)
    assert not loopback_rig.runner.live and not loopback_rig.runner.idle
    loopback_rig.staging.release(leases)
    assert loopback_rig.runner.idle
