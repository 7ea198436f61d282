"""Shared builders for protocol tests: a fixed universe and short scenarios."""

from __future__ import annotations

from hisparse.spec.machine import ProtocolMachine
from hisparse.spec.state import ProtocolConfig

# A universe with prefix sharing: r0/r2 share a two-page prefix, r1 its first page.
UNIVERSE: dict[str, tuple[str, ...]] = {
    "r0": ("k0", "k1"),
    "r1": ("k0",),
    "r2": ("k0", "k1"),
    "r3": ("k2",),
}


def make_machine(
    bug: str = "none",
    *,
    gpu_blocks: int = 3,
    host_pool_bytes: int = 9,
    host_block_bytes: int = 2,
    host_blocks: int = 0,
    record: bool = False,
    universe: dict[str, tuple[str, ...]] | None = None,
) -> ProtocolMachine:
    cfg = ProtocolConfig(
        gpu_blocks=gpu_blocks,
        host_pool_bytes=host_pool_bytes,
        host_block_bytes=host_block_bytes,
        host_blocks=host_blocks,
        bug=bug,
    )
    m = ProtocolMachine(cfg, record=record)
    for r, keys in (universe or UNIVERSE).items():
        m.add_request(r, keys)
    return m


def full_spill(m: ProtocolMachine, page: tuple[str, int], h: int) -> int:
    """Spill one resident page through enqueued and completed acks (batched)."""
    tid = m.StartSpill(page, h)
    m.WorkerEnqueue(tid)
    m.WorkerComplete(h)
    m.WorkerReport()
    m.ConsumeMeta()
    return tid
