"""Shared builders for the MultiConnector tests: a named child's plumbing, and a small
HiSparse + OffloadingConnector system (both halves of each child)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hisparse.blockpool import BlockPool
from hisparse.config import HiSparseConfig
from hisparse.connector import HiSparseConnector, KVConnectorRole
from hisparse.connectors.base import KVLayout
from hisparse.connectors.hisparse_child import HiSparseSchedulerChild, HiSparseWorkerChild
from hisparse.connectors.offloading import OffloadingScheduler, OffloadingWorker
from hisparse.coordinator import HiSparseCoordinator
from hisparse.executor.reference import ReferenceExecutor
from hisparse.workerport import LocalWorker

KV = KVLayout(block_tokens=4)


class NamedChild:
    """A fake child's name and layout (neither provides a pool nor refuses on apply
    unless a subclass or instance says so)."""

    provides_memory_pool = False
    refuses_on_apply = False

    def __init__(self, name: str, layout: KVLayout = KV) -> None:
        self._name, self._layout = name, layout

    @property
    def name(self) -> str:
        return self._name

    @property
    def layout(self) -> KVLayout:
        return self._layout


@dataclass
class Children:
    """HiSparse's and the OffloadingConnector's halves over one small system."""

    coord: HiSparseCoordinator
    hs: HiSparseSchedulerChild
    off: OffloadingScheduler
    port: LocalWorker
    hs_w: HiSparseWorkerChild
    off_w: OffloadingWorker


def children() -> Children:
    """4 GPU and 4 host blocks of 4 tokens; an offload store of 3 blocks of 8 bytes."""
    cfg = HiSparseConfig(host_pool_blocks=4, block_tokens=4, row_bytes=16, top_k=4)
    coord = HiSparseCoordinator(cfg, BlockPool(4), gpu_blocks=4, check=True)
    sched = HiSparseConnector(KVConnectorRole.SCHEDULER, coordinator=coord)
    port = LocalWorker(0, cfg, ReferenceExecutor(), gpu_blocks=4, slots=2)
    return Children(coord, HiSparseSchedulerChild(sched, KV), OffloadingScheduler(KV, 8, 3),
                    port, HiSparseWorkerChild(port, KV),
                    OffloadingWorker(KV, np.zeros((4, 8), np.uint8), 3))
