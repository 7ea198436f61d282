"""Rule: the metrics' histograms measure exactly what they name (``hisparse/metrics.py``).

- the lifetime of a host block's content is the steps from the transfer writing it to
  the next overwriting it; the reuse gap the steps from a page's publish (or its last
  prefix hit) to its next prefix hit (mutant ``arith``: ``step + touched``);
- both use the documented step buckets, every one of them (mutants ``drop``);
- the transfers the metrics follow are open ones only, after every step of a run with
  worker losses (mutant ``cmp``: closed transfers kept and open ones dropped, so a
  later completed ack started no reuse clock, and the map grew with every loss);
- ``close`` releases the served port (mutant ``call``: the socket left listening).
"""

from __future__ import annotations

import gc
import socket
import warnings
from typing import Any

import pytest

from hisparse.config import HiSparseConfig
from hisparse.coordinator import Admission
from hisparse.metrics import HiSparseMetrics
from hisparse.simulate import SimulateOptions, Simulation
from hisparse.spec.messages import (
    HiSparseConnectorMetadata,
    HiSparseWorkerMeta,
    SparseKVPageTransfer,
)

CONFIG = HiSparseConfig(host_pool_gib=0.001, block_tokens=8, row_bytes=16, top_k=4)
BUCKETS = ["1.0", "2.0", "5.0", "10.0", "20.0", "50.0", "100.0", "200.0", "500.0", "1000.0",
           "2000.0", "5000.0", "10000.0", "+Inf"]


def samples(m: HiSparseMetrics, name: str) -> dict[str, Any]:
    """One histogram's samples: ``sum``, ``count`` and ``le=...`` buckets."""
    out: dict[str, Any] = {}
    for family in m.registry.collect():
        if family.name == name:
            for s in family.samples:
                key = s.name.removeprefix(name + "_")
                out[f"le={s.labels['le']}" if key == "bucket" else key] = s.value
    return out


def send(m: HiSparseMetrics, tid: int, host: int, step: int) -> None:
    t = SparseKVPageTransfer(transfer_id=tid, src_gpu_block=0, dst_host_block=host)
    m.on_connector_meta(HiSparseConnectorMetadata(transfers=(t,)), step)


def test_lifetime_and_reuse_gap_are_the_steps_between() -> None:
    m = HiSparseMetrics(CONFIG)
    send(m, 1, 2, step=3)
    m.on_worker_meta(HiSparseWorkerMeta(completed=(1,)), step=5)  # published at step 5
    m.on_admission(Admission("r", (("host", 2),), 1), step=12)  # hit 7 steps later
    m.on_admission(Admission("s", (("gpu", 0), ("host", 2)), 1), step=20)  # 8 after that
    send(m, 2, 2, step=10 + 3)  # overwritten 10 steps after it was written
    gap = samples(m, "hisparse_host_block_reuse_gap_steps")
    assert (gap["count"], gap["sum"]) == (2, 15)
    life = samples(m, "hisparse_host_block_lifetime_steps")
    assert (life["count"], life["sum"]) == (1, 10)


def test_both_histograms_have_every_step_bucket() -> None:
    m = HiSparseMetrics(CONFIG)
    for name in ("hisparse_host_block_lifetime_steps", "hisparse_host_block_reuse_gap_steps"):
        buckets = [k.removeprefix("le=") for k in samples(m, name) if k.startswith("le=")]
        assert buckets == BUCKETS, name


def test_the_followed_transfers_are_open_ones_after_every_step() -> None:
    opts = SimulateOptions(requests=200, seed=1, worker_restarts=8, abort_rate=0.05,
                           worker_processes=False)
    sim = Simulation(opts)
    metrics = sim.metrics = HiSparseMetrics(sim.config)
    followed: list[int] = []
    step = sim.step

    def checked_step(t: int) -> None:
        step(t)
        machine = sim.coordinator.machine
        closed = [tid for tid in metrics._dst if machine.open_transfer(tid) is None]
        assert closed == [], f"step {t}: closed transfers still followed {closed}"
        followed.append(len(metrics._dst))

    sim.step = checked_step  # type: ignore[method-assign]
    rep = sim.run()
    assert rep.worker_restarts == 8 and rep.open_at_loss > 0  # losses closed open ones
    assert max(followed) > 0  # (not vacuous: transfers were followed mid-run)


def test_close_releases_the_port() -> None:
    """After ``close`` nothing listens on the served port: the socket is closed, not
    only the serving loop stopped and the server dropped (CPython would then close it
    when collecting it, with a ``ResourceWarning``)."""
    m = HiSparseMetrics(CONFIG)
    port = m.serve(0)
    with socket.create_connection(("127.0.0.1", port), timeout=10):
        pass  # served
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", ResourceWarning)
        m.close()
        gc.collect()
    unclosed = [w for w in seen if issubclass(w.category, ResourceWarning)]
    assert unclosed == [], [str(w.message) for w in unclosed]  # closed, not left to the GC
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=10).close()
