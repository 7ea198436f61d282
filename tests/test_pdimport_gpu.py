"""P/D import on the CUDA executor against the NumPy reference, bit for bit (GPU only).

The same imports (device target with a final block that is not full; host target
through the staging pool in VRAM, its final page mirrored into a resident block) run
through the import runner and the loopback transport on both executors from identical
dirty pools; every device and host byte must agree afterwards, and a resolve over every
imported position (resident hits on the device pages and the mirror, misses read from
the host blocks the import wrote) must give the same rows holding the same bytes. ``write_host_block``
refuses exactly as the reference does (a spill still queued into the block, a block out
of range, the wrong shape) and a refusal changes nothing. ``simulate --executor cuda
--pd-share 0.5`` runs clean with both targets exercised.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from hisparse.executor.base import ResolveBatch
from hisparse.executor.errors import BadPlan, PendingHostWrite
from hisparse.executor.layout import PoolLayout
from hisparse.executor.reference import ReferenceExecutor
from hisparse.pdimport import ImportRunner
from hisparse.spec.messages import ImportCommand
from hisparse.transport import LoopbackPrefiller, LoopbackTransport, StagingPool
from tests.test_pdimport_runner import BLOCK as RUNNER_BLOCK
from tests.test_pdimport_runner import command

pytestmark = pytest.mark.gpu

LAYERS, BLOCK, ROW = 2, 4, 32
assert BLOCK == RUNNER_BLOCK  # the runner tests' import command builds pages of BLOCK rows
PAGE = LAYERS * BLOCK * ROW
TOP_K = 16
LAYOUT = PoolLayout(gpu_blocks=8, host_blocks=8, block_tokens=BLOCK, row_bytes=ROW,
                    hot_rows=TOP_K, slots=2)
_names = itertools.count()


def cuda_executor() -> Any:
    from hisparse.executor.cuda import CudaExecutor

    return CudaExecutor(top_k=TOP_K, max_positions=64)


class Side:
    """One worker's import side on one executor: dirty pools for every layer, the
    executor's staging pool (VRAM for CUDA, host memory for the reference), a loopback
    transport and prefiller holding the same pages."""

    def __init__(self, executor: Any, pages: dict[str, np.ndarray], slots: int = 2,
                 padding: int = 0) -> None:
        self.executor = executor
        self.pools = [executor.allocate(LAYOUT) for _ in range(LAYERS)]
        rows = np.arange(LAYOUT.device_rows, dtype=np.int64)
        for p in self.pools:  # dirty memory: what an import does not write stays as is
            executor.write_device_rows(p, rows, np.full((rows.size, ROW), 0xEE, np.uint8))
            p.host[:] = 0xDD  # before any copy touches the host pool
        make = getattr(executor, "staging_pool", StagingPool)
        self.staging = make(slots * PAGE + padding, slots, PAGE)
        name = f"prefiller{next(_names)}"
        self.prefiller = LoopbackPrefiller(name, np.zeros((16, PAGE), np.uint8))
        for req, data in pages.items():
            self.prefiller.put(req, data)
        self.transport = LoopbackTransport(self.staging, 1, 2)
        self.transport.connect(self.prefiller)
        self.runner = ImportRunner(self.transport, executor, self.pools, LAYOUT,
                                   self.prefiller, name)

    def run(self, commands: Sequence[ImportCommand]) -> list[int]:
        for cmd in commands:
            self.runner.start(cmd)
        done: list[int] = []
        for _ in range(10_000):
            self.runner.advance()
            _, ds, fs = self.runner.take_acks()
            assert not fs, fs
            done += ds
            if not self.runner.live:
                break
        assert self.runner.idle and self.staging.in_use == 0
        self.transport.close()
        return sorted(done)

    def snapshots(self) -> list[dict[str, np.ndarray]]:
        return [self.executor.snapshot(p) for p in self.pools]

    def resolve(self, commands: Sequence[ImportCommand]) -> list[tuple[Any, np.ndarray]]:
        """Per layer: the rows of one resolve over every imported position (one entry per
        import, in its own slot) and the bytes those rows hold."""
        n = len(commands)
        topk = np.full((n, TOP_K), -1, np.int32)
        resident = np.full((n, TOP_K), -1, np.int32)
        host = np.full((n, TOP_K), -1, np.int32)
        for e, cmd in enumerate(commands):
            for t in range(cmd.num_tokens):
                pg, off = cmd.pages[t // BLOCK], t % BLOCK
                topk[e, t] = t
                if pg.gpu_block is not None:  # a device page, or the mirrored final page
                    resident[e, t] = LAYOUT.resident_row(pg.gpu_block, off)
                if pg.host_block is not None:
                    host[e, t] = LAYOUT.host_row(pg.host_block, off)
        batch = ResolveBatch(slots=np.arange(n, dtype=np.int32), topk=topk,
                             resident_row=resident, host_row=host, step=1)
        out = []
        for p in self.pools:
            result = self.executor.resolve(p, batch).to_host()
            rows = result.rows[result.rows >= 0].astype(np.int64)
            out.append((result, self.executor.read_device_rows(p, rows)))
        return out


@pytest.mark.parametrize("num_tokens", [3 * BLOCK, 3 * BLOCK - 1, 2 * BLOCK + 1])
@pytest.mark.parametrize("padding", [0, 48])
def test_both_targets_land_bit_for_bit_as_the_reference(num_tokens: int, padding: int) -> None:
    """``padding`` 0: slots of whole blocks, so the runner copies each cache's staged
    blocks in one launch (``write_host_blocks``); otherwise slots are not whole blocks
    and it copies block by block (``write_host_block``)."""
    from hisparse.executor.cuda.staging import DeviceStagingPool

    n = -(-num_tokens // BLOCK)
    rng = np.random.default_rng(num_tokens)
    pages = {r: rng.integers(0, 256, (n, PAGE), dtype=np.uint8) for r in ("dev", "hst")}
    commands = [
        command(1, "dev", "device", num_tokens, [5, 2, 7][:n], [None] * n),
        command(2, "hst", "host", num_tokens, [None] * (n - 1) + [4], [6, 0, 3][:n]),
    ]
    ref = Side(ReferenceExecutor(), pages, padding=padding)
    gpu = Side(cuda_executor(), pages, padding=padding)
    assert (gpu.staging.slot_bytes % (BLOCK * ROW) == 0) == (padding == 0)
    assert isinstance(gpu.staging, DeviceStagingPool) and not isinstance(
        ref.staging, DeviceStagingPool)
    assert ref.run(commands) == gpu.run(commands) == [1, 2]
    for layer, (want, got) in enumerate(zip(ref.snapshots(), gpu.snapshots(), strict=True)):
        for pool in ("device", "host"):
            assert np.array_equal(want[pool], got[pool]), (layer, pool)
        # and the bytes are the prefiller's (the reference is checked on the CPU too)
        valid = num_tokens - (n - 1) * BLOCK
        blocks = pages["hst"].reshape(n, LAYERS, BLOCK, ROW)
        final = got["device"][4 * BLOCK:5 * BLOCK]  # the mirrored final host page
        assert np.array_equal(final[:valid], blocks[n - 1, layer, :valid])
        assert np.array_equal(got["host"][6 * BLOCK:7 * BLOCK], blocks[0, layer])
    assert ref.runner.stats.staged_bytes == gpu.runner.stats.staged_bytes > 0
    assert ref.runner.stats.direct_bytes == gpu.runner.stats.direct_bytes > 0
    # decoding reads them alike: resident hits, and misses from the imported host blocks
    for layer, ((want, want_bytes), (got, got_bytes)) in enumerate(
            zip(ref.resolve(commands), gpu.resolve(commands), strict=True)):
        assert np.array_equal(want.rows, got.rows), layer
        assert (want.resident_hits, want.hot_hits, want.misses) == (
            got.resident_hits, got.hot_hits, got.misses)
        assert want.misses > 0 and want.resident_hits > 0
        assert np.array_equal(want_bytes, got_bytes), layer
        prefilled = {r: pages[r].reshape(n, LAYERS, BLOCK, ROW)[:, layer].reshape(-1, ROW)
                     for r in ("dev", "hst")}  # the prefiller's rows, position order
        assert np.array_equal(got_bytes, np.concatenate(
            [prefilled["dev"][:num_tokens], prefilled["hst"][:num_tokens]]))


def _refusals(executor: Any, pools: Any, data: Any) -> list[tuple[str, str, Any]]:
    """Each refused ``write_host_block``: (error type, message, attributes)."""
    out: list[tuple[str, str, Any]] = []
    executor.enqueue_spill(pools, 7, 1, 3)
    for block, payload in ((3, data), (LAYOUT.host_blocks, data), (-1, data),
                           (2, data[:-1])):
        with pytest.raises((PendingHostWrite, BadPlan)) as info:
            executor.write_host_block(pools, block, payload)
        exc = info.value
        extra = ((exc.host_block, exc.transfer_id) if isinstance(exc, PendingHostWrite)
                 else None)
        out.append((type(exc).__name__, str(exc), extra))
    return out


def test_write_host_block_refuses_as_the_reference_and_changes_nothing() -> None:
    import cupy

    ref, gpu = ReferenceExecutor(), cuda_executor()
    rng = np.random.default_rng(3)
    device = rng.integers(0, 256, (LAYOUT.device_rows, ROW), dtype=np.uint8)
    host = rng.integers(0, 256, (LAYOUT.host_rows, ROW), dtype=np.uint8)
    data = rng.integers(0, 256, (BLOCK, ROW), dtype=np.uint8)
    r_pools, c_pools = ref.allocate(LAYOUT, lru=False), gpu.allocate(LAYOUT, lru=False)
    rows = np.arange(LAYOUT.device_rows, dtype=np.int64)
    for ex, p in ((ref, r_pools), (gpu, c_pools)):
        p.host[...] = host
        ex.write_device_rows(p, rows, device)
    want = _refusals(ref, r_pools, data)
    assert want[0][0] == "PendingHostWrite" and want[0][2] == (3, 7)
    assert _refusals(gpu, c_pools, cupy.asarray(data)) == want
    # the batched form refuses the same, and each bad pair of a batch, copying nothing
    two = rng.integers(0, 256, (2, BLOCK, ROW), dtype=np.uint8)
    source = cupy.asarray(two.reshape(-1))
    with pytest.raises(PendingHostWrite) as pending:
        gpu.write_host_blocks(c_pools, source, [(2, 0), (3, 1)])
    assert (str(pending.value), pending.value.host_block) == (want[0][1], 3)
    for copies in ([(2, 0), (2, 1)], [(2, 2)], [(LAYOUT.host_blocks, 0)], [(-1, 0)]):
        with pytest.raises(BadPlan):
            gpu.write_host_blocks(c_pools, source, copies)
    ref.release()
    gpu.release()
    assert ref.completed() == gpu.completed() == [7]
    # the refusals wrote nothing: only the spill landed
    for pool in ("device", "host"):
        assert np.array_equal(ref.snapshot(r_pools)[pool], gpu.snapshot(c_pools)[pool])
    # once the spill has landed the same write is accepted, from device or host memory
    ref.write_host_block(r_pools, 3, data)
    gpu.write_host_block(c_pools, 3, cupy.asarray(data))
    ref.write_host_block(r_pools, 5, data[::-1])
    gpu.write_host_block(c_pools, 5, data[::-1])
    ref.write_host_block(r_pools, 6, two[1])
    ref.write_host_block(r_pools, 7, two[0])
    gpu.write_host_blocks(c_pools, source, [(7, 0), (6, 1)])
    block_rows = np.arange(3 * BLOCK, 8 * BLOCK, dtype=np.int64)
    # a CPU reader right after the asynchronous copy sees its bytes (it waits for them)
    assert np.array_equal(gpu.read_host_rows(c_pools, block_rows),
                          ref.read_host_rows(r_pools, block_rows))
    assert np.array_equal(ref.snapshot(r_pools)["host"], gpu.snapshot(c_pools)["host"])


def test_import_memory_is_the_resident_region_in_vram() -> None:
    import cupy

    gpu = cuda_executor()
    pools = gpu.allocate(LAYOUT, lru=False)
    region = gpu.import_memory(pools)
    assert isinstance(region, cupy.ndarray) and region.flags.c_contiguous
    assert region.shape == (LAYOUT.resident_rows, ROW) and region.dtype == np.uint8
    assert region.data.ptr == pools.device.data.ptr


def test_simulate_pd_share_on_cuda_is_clean_with_both_targets() -> None:
    from hisparse.simulate import SimulateOptions, simulate

    rep = simulate(SimulateOptions(requests=40, steps=300, seed=3, gpu_blocks=40,
                                   pd_share=0.5, executor="cuda"))
    m = rep.imports
    assert rep.violations == 0 and rep.data_mismatches == 0, rep.notes
    assert m["device"] > 0 and m["host"] > 0, m  # both targets exercised
    assert m["unaligned_final_block"] > 0 and m["staged_bytes"] > 0 and m["direct_bytes"] > 0
    assert 0 < m["staging_peak"] <= m["staging_slots"]
