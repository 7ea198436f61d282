"""Scheduler-side cost with many running requests (``hisparse bench coordinator``).

Measures, with invariant checks off (production) and on, the coordinator's cost
of one spill lifecycle through the connector (spill → build metadata → enqueued
ack → completed ack) and of one idle decode step (build metadata, consume an empty
worker output), while ``running`` requests hold their pages resident.
"""

from __future__ import annotations

import time
from typing import Any

from hisparse.blockpool import BlockPool
from hisparse.config import HiSparseConfig
from hisparse.connector import HiSparseConnector, KVConnectorRole
from hisparse.coordinator import HiSparseCoordinator
from hisparse.spec.messages import trusted_worker_meta


def _measure(running: int, lifecycles: int, check: bool) -> dict[str, float]:
    pages = 4
    cfg = HiSparseConfig(
        host_pool_blocks=lifecycles + 8, block_tokens=64, top_k=2048
    )
    gpu = running * pages
    c = HiSparseCoordinator(cfg, BlockPool(gpu), gpu_blocks=gpu, check=check)
    conn = HiSparseConnector(KVConnectorRole.SCHEDULER, coordinator=c)
    for i in range(running):
        c.add_request(f"r{i}", [f"r{i}:{j}" for j in range(pages)])
        assert c.admit(f"r{i}") is not None
    victims = c.spillable(lifecycles)
    clock = time.perf_counter
    t0 = clock()
    for page in victims:
        tid = c.spill(page)
        assert tid is not None
        conn.build_connector_meta()
        enq = trusted_worker_meta((tid,), (), 0)
        done = trusted_worker_meta((), (tid,), 0)
        conn.update_connector_output(enq)
        conn.update_connector_output(done)
    spill = (clock() - t0) / len(victims) * 1e6
    steps = 2000 if not check else 50
    t0 = clock()
    for _ in range(steps):
        conn.build_connector_meta()
        conn.update_connector_output(None)
    idle = (clock() - t0) / steps * 1e6
    return {"spill_lifecycle_us": spill, "idle_step_us": idle}


def run(running: int = 256, lifecycles: int = 200) -> dict[str, Any]:
    return {
        "running_requests": running,
        "lifecycles": lifecycles,
        "check_off": _measure(running, lifecycles, check=False),
        "check_on": _measure(running, min(lifecycles, 20), check=True),
    }
