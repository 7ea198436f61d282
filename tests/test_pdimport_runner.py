"""The worker's import runner against both transports (loopback, and NIXL between two
processes on localhost): bytes equal after import through both targets, a final block
that is not full, staging exhausted, a chunk failing, an abort mid-import, the
prefiller killed, a worker loss during an import. After every test: the staging pool
empty, no import in flight, NIXL registrations gone, prefiller processes reaped.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pytest

from hisparse.executor.layout import PoolLayout
from hisparse.executor.reference import ReferenceExecutor, ReferencePools
from hisparse.pdimport import ImportRefused, ImportRunner
from hisparse.spec.messages import ImportCommand, PageImport
from hisparse.transport import (
    ImportFailed,
    LoopbackPrefiller,
    LoopbackTransport,
    StagingPool,
)

LAYERS, BLOCK, ROW = 2, 4, 16
PAGE = LAYERS * BLOCK * ROW
LAYOUT = PoolLayout(gpu_blocks=8, host_blocks=8, block_tokens=BLOCK, row_bytes=ROW,
                    hot_rows=4, slots=1)
_names = itertools.count()


class Rig:
    """One worker's import side: reference pools for every layer, a staging pool, a
    transport of the kind under test, one prefiller holding pages for many requests."""

    def __init__(self, kind: str, slots: int = 4, chunk_pages: int = 1, window: int = 2,
                 capacity: int = 16) -> None:
        self.kind = kind
        self.executor = ReferenceExecutor()
        self.pools: list[ReferencePools] = [self.executor.allocate(LAYOUT)
                                            for _ in range(LAYERS)]
        for p in self.pools:  # dirty memory: what an import does not write stays as is
            p.device[:] = 0xEE
            p.host[:] = 0xDD
        self.staging = StagingPool(slots * PAGE, slots, PAGE)
        self.name = f"prefiller{next(_names)}"
        self.peers: list[Any] = []
        self.prefiller = self.new_prefiller(self.name, capacity)
        if kind == "loopback":
            self.transport: Any = LoopbackTransport(self.staging, chunk_pages, window)
            self.transport.connect(self.prefiller)
        else:
            from hisparse.transport.nixl import NixlTransport

            self.transport = NixlTransport(self.staging, f"decoder{next(_names)}",
                                           chunk_pages, window)
            self.transport.connect(self.prefiller.metadata, self.name)
        self.runner = ImportRunner(self.transport, self.executor, self.pools, LAYOUT,
                                   self.prefiller, self.name)
        self.held: dict[str, np.ndarray] = {}

    def new_prefiller(self, name: str, capacity: int) -> Any:
        empty = np.zeros((capacity, PAGE), np.uint8)
        if self.kind == "loopback":
            peer: Any = LoopbackPrefiller(name, empty)
        else:
            from hisparse.transport.nixlpeer import NixlPrefiller

            peer = NixlPrefiller(name, empty)
        self.peers.append(peer)
        return peer

    def hold(self, req: str, num_tokens: int, seed: int) -> np.ndarray:
        n = -(-num_tokens // BLOCK)
        pages = np.random.default_rng(seed).integers(0, 256, (n, PAGE), dtype=np.uint8)
        self.prefiller.put(req, pages)
        self.held[req] = pages
        return pages

    def close(self) -> None:
        assert self.runner.idle, "an import or a staging slot outlived the test"
        assert self.staging.in_use == 0 and not self.transport.live
        self.transport.close()
        assert not self.transport.regions
        if self.kind == "nixl":
            assert self.transport.registrations == 0 and self.transport.xfers == 0
            for peer in self.peers:
                if not peer.reaped:
                    peer.stop()
                assert peer.reaped


@pytest.fixture(params=["loopback", "nixl"])
def kind(request: pytest.FixtureRequest) -> str:
    if request.param == "nixl":
        request.getfixturevalue("nixl_available")
    return str(request.param)


@pytest.fixture
def rig(kind: str) -> Iterator[Rig]:
    r = Rig(kind)
    yield r
    r.close()


def stale_lease(owner: str, slot: int) -> str:
    """The exact refusal (a ``match`` pattern) of returning a slot no longer leased."""
    return "^" + re.escape(
        f"StagingLease(owner={owner!r}, slot={slot}) is not a live lease of this pool") + "$"


def command(iid: int, req: str, target: str, num_tokens: int,
            gpu: Sequence[int | None], host: Sequence[int | None]) -> ImportCommand:
    n = -(-num_tokens // BLOCK)
    pages = tuple(
        PageImport(page_index=i + 1, key=f"{req}:{i}", gpu_block=gpu[i], host_block=host[i],
                   valid_rows=min(BLOCK, num_tokens - i * BLOCK))
        for i in range(n)
    )
    return ImportCommand(import_id=iid, request_id=req, target=target,  # type: ignore[arg-type]
                         num_tokens=num_tokens, block_size=BLOCK, pages=pages)


def expected_block(pages: np.ndarray, page: int, layer: int, num_tokens: int) -> np.ndarray:
    """Layer ``layer``'s block of page ``page``: the valid rows, zero after them."""
    block: np.ndarray = pages[page].reshape(LAYERS, BLOCK, ROW)[layer].copy()
    block[max(0, num_tokens - page * BLOCK):] = 0
    return block


def device_block(rig: Rig, layer: int, g: int) -> np.ndarray:
    block: np.ndarray = rig.pools[layer].device[g * BLOCK:(g + 1) * BLOCK]
    return block


def host_block(rig: Rig, layer: int, h: int) -> np.ndarray:
    return rig.pools[layer].host[h * BLOCK:(h + 1) * BLOCK]


def drain(rig: Rig) -> tuple[dict[int, list[int]], list[int], dict[int, Any]]:
    """Advance until idle; every ack, pages landed per import in report order."""
    landed: dict[int, list[int]] = {}
    done: list[int] = []
    failed: dict[int, Any] = {}
    for _ in range(100_000):
        rig.runner.advance()
        ls, ds, fs = rig.runner.take_acks()
        for a in ls:
            landed.setdefault(a.import_id, []).extend(a.pages)
        done += ds
        failed.update({f.import_id: f for f in fs})
        if not rig.runner.live:
            break
    return landed, done, failed


# -- both targets, bytes equal -----------------------------------------------------------


@pytest.mark.parametrize("num_tokens", [3 * BLOCK, 3 * BLOCK - 1, 1])
def test_both_targets_land_the_prefillers_bytes(rig: Rig, num_tokens: int) -> None:
    pages_d = rig.hold("dev", num_tokens, 1)
    pages_h = rig.hold("hst", num_tokens, 2)
    n = pages_d.shape[0]
    gpu_d = [0, 2, 7][:n]  # (one token: its partial page in block 0, whose tail is zeroed
    # too; runner.py:273:none:10 took block 0 for none)
    host_h = [6, 0, 3][:n]
    mirror = [None] * (n - 1) + [4]  # the final page, needed immediately
    rig.runner.start(command(1, "dev", "device", num_tokens, gpu_d, [None] * n))
    rig.runner.start(command(2, "hst", "host", num_tokens, mirror, host_h))
    before = [(p.device.copy(), p.host.copy()) for p in rig.pools]
    landed, done, failed = drain(rig)
    assert not failed and sorted(done) == [1, 2]
    assert sorted(landed[1]) == sorted(landed[2]) == list(range(1, n + 1))
    for layer in range(LAYERS):
        dev_written = np.zeros(LAYOUT.device_rows, bool)
        host_written = np.zeros(LAYOUT.host_rows, bool)
        for i in range(n):
            want = expected_block(pages_d, i, layer, num_tokens)
            assert np.array_equal(device_block(rig, layer, gpu_d[i]), want)
            dev_written[gpu_d[i] * BLOCK:(gpu_d[i] + 1) * BLOCK] = True
            want = expected_block(pages_h, i, layer, num_tokens)
            assert np.array_equal(host_block(rig, layer, host_h[i]), want)
            host_written[host_h[i] * BLOCK:(host_h[i] + 1) * BLOCK] = True
        g = mirror[-1]
        assert g is not None  # the mirrored final page is readable at its resident block
        assert np.array_equal(device_block(rig, layer, g),
                              expected_block(pages_h, n - 1, layer, num_tokens))
        dev_written[g * BLOCK:(g + 1) * BLOCK] = True
        # nothing outside the destinations was written
        assert np.array_equal(rig.pools[layer].device[~dev_written], before[layer][0][~dev_written])
        assert np.array_equal(rig.pools[layer].host[~host_written], before[layer][1][~host_written])
    assert rig.runner.stats.staged_bytes == rig.runner.stats.direct_bytes > 0
    assert rig.runner.stats.staging_peak <= rig.staging.slots


def test_nixl_and_loopback_land_equal_bytes(nixl_available: None) -> None:
    rigs = [Rig("loopback"), Rig("nixl")]
    try:
        for r in rigs:
            r.hold("a", 4 * BLOCK - 3, 9)
            r.runner.start(command(0, "a", "host", 4 * BLOCK - 3, [None, None, None, 1],
                                   [4, 5, 6, 7]))
            r.hold("b", 2 * BLOCK + 1, 10)
            r.runner.start(command(1, "b", "device", 2 * BLOCK + 1, [0, 3, 6], [None] * 3))
            _, done, failed = drain(r)
            assert sorted(done) == [0, 1] and not failed
        for layer in range(LAYERS):
            assert np.array_equal(rigs[0].pools[layer].device, rigs[1].pools[layer].device)
            assert np.array_equal(rigs[0].pools[layer].host, rigs[1].pools[layer].host)
    finally:
        for r in rigs:
            r.close()


# -- staging bounded ---------------------------------------------------------------------


def test_staging_exhausted_waits_and_never_exceeds_the_pool(rig: Rig) -> None:
    rig.hold("a", 5 * BLOCK, 3)
    rig.hold("b", 3 * BLOCK, 4)
    other = rig.staging.lease("someone-else", rig.staging.slots)  # the pool is exhausted
    rig.runner.start(command(0, "a", "host", 5 * BLOCK, [None] * 5, [0, 1, 2, 3, 4]))
    rig.runner.start(command(1, "b", "host", 3 * BLOCK, [None] * 3, [5, 6, 7]))
    for _ in range(20):
        rig.runner.advance()
    landed, done, failed = rig.runner.take_acks()
    assert not landed and not done and not failed and len(rig.runner.live) == 2
    assert rig.runner.stats.staging_waits > 0
    rig.staging.release(other)
    _, done_all, failed_all = drain(rig)
    assert not failed_all and sorted(done_all) == [0, 1]
    assert rig.runner.stats.staging_peak <= rig.staging.slots


def test_a_config_that_cannot_stage_a_page_is_refused_saying_what_to_raise() -> None:
    executor = ReferenceExecutor()
    pools = [executor.allocate(LAYOUT) for _ in range(LAYERS)]
    small = StagingPool(4 * ROW * BLOCK, 4, ROW * BLOCK)  # pages of one layer only
    peer = LoopbackPrefiller("p", np.zeros((1, PAGE), np.uint8))
    with pytest.raises(ImportRefused, match=f"an imported page is {PAGE}"):
        ImportRunner(LoopbackTransport(small), executor, pools, LAYOUT, peer, "p")
    two = StagingPool(2 * PAGE, 2, PAGE)
    with pytest.raises(ImportRefused, match="raise the staging slots to at least 3"):
        ImportRunner(LoopbackTransport(two, chunk_pages=3), executor, pools, LAYOUT, peer, "p")


def test_a_command_out_of_range_is_refused_and_changes_nothing(rig: Rig) -> None:
    rig.hold("a", 2 * BLOCK, 5)
    bad = command(0, "a", "device", 2 * BLOCK, [1, LAYOUT.gpu_blocks], [None, None])
    with pytest.raises(ImportRefused, match="out of range"):
        rig.runner.start(bad)
    assert not rig.runner.live and rig.runner.stats.started == 0
    assert rig.runner.take_acks() == ((), (), ())


# -- failures ----------------------------------------------------------------------------


def test_an_announcement_from_another_agent_fails_the_import_as_refused(rig: Rig) -> None:
    rig.hold("a", 2 * BLOCK, 6)
    rig.runner.prefiller = "the-configured-one"
    rig.runner.start(command(0, "a", "host", 2 * BLOCK, [None, None], [0, 1]))
    _, done, failed = rig.runner.take_acks()
    assert not done and failed[0].reason == "refused" and "agent" in failed[0].detail
    assert rig.runner.idle
    assert not (rig.pools[0].host != 0xDD).any()  # nothing written


def test_a_failing_chunk_fails_that_import_only(rig: Rig, monkeypatch: pytest.MonkeyPatch
                                                 ) -> None:
    rig.hold("a", 3 * BLOCK, 7)
    rig.hold("b", 3 * BLOCK - 2, 8)
    post = rig.transport._post

    def failing(handle: Any, chunk: int) -> bool:
        if handle.request.req_id == "a" and chunk == 1:
            raise ImportFailed("a", 1, "injected")
        return bool(post(handle, chunk))

    monkeypatch.setattr(rig.transport, "_post", failing)
    rig.runner.start(command(0, "a", "host", 3 * BLOCK, [None, None, 2], [0, 1, 2]))
    rig.runner.start(command(1, "b", "device", 3 * BLOCK - 2, [4, 5, 6], [None] * 3))
    landed, done, failed = drain(rig)
    assert done == [1] and failed[0].reason == "transport" and "injected" in failed[0].detail
    assert 0 not in landed  # a failed import reports no progress
    for layer in range(LAYERS):
        assert np.array_equal(device_block(rig, layer, 6),
                              expected_block(rig.held["b"], 2, layer, 3 * BLOCK - 2))


def test_abort_mid_import_returns_everything(rig: Rig) -> None:
    rig.hold("a", 6 * BLOCK, 11)
    rig.runner.start(command(0, "a", "host", 6 * BLOCK, [None] * 6, list(range(6))))
    rig.runner.advance()
    rig.runner.abort(0)
    rig.runner.abort(99)  # unknown: it ended already; ignored
    landed, done, failed = drain(rig)
    assert not done and failed[0].reason == "transport" and failed[0].detail == "aborted"
    assert 0 not in landed  # a failed import reports no progress


def test_killed_prefiller_fails_its_import_and_others_go_on(kind: str) -> None:
    rig = Rig(kind, window=1)
    try:
        other = rig.new_prefiller(f"other{next(_names)}", 8)
        if kind == "loopback":
            rig.transport.connect(other)
        else:
            rig.transport.connect(other.metadata, other.name)
        rig.hold("a", 4 * BLOCK, 12)
        pages_b = np.random.default_rng(13).integers(0, 256, (2, PAGE), dtype=np.uint8)
        other.put("b", pages_b)
        rig.runner.start(command(0, "a", "device", 4 * BLOCK, [0, 1, 2, 3], [None] * 4))
        while not rig.runner.live[0].copied:  # chunk 0 landed
            rig.runner.advance()
        rig.prefiller.kill()
        rig.runner.source = other
        rig.runner.prefiller = other.name
        rig.runner.start(command(1, "b", "host", 2 * BLOCK - 1, [None, 7], [0, 1]))
        landed, done, failed = drain(rig)
        assert done == [1] and set(failed) == {0} and sorted(landed[1]) == [1, 2]
        assert failed[0].reason == ("prefiller_lost" if kind == "loopback" else "transport")
        pages_b[1].reshape(LAYERS, BLOCK, ROW)[:, BLOCK - 1] = 0
        for layer in range(LAYERS):
            assert np.array_equal(host_block(rig, layer, 1),
                                  pages_b[1].reshape(LAYERS, BLOCK, ROW)[layer])
            assert np.array_equal(device_block(rig, layer, 7),
                                  pages_b[1].reshape(LAYERS, BLOCK, ROW)[layer])
    finally:
        rig.close()


def test_worker_loss_during_imports_drops_them_and_returns_everything(rig: Rig) -> None:
    rig.hold("a", 5 * BLOCK, 14)
    rig.hold("b", 3 * BLOCK, 15)
    rig.runner.start(command(0, "a", "host", 5 * BLOCK, [None] * 5, [0, 1, 2, 3, 4]))
    rig.runner.start(command(1, "b", "device", 3 * BLOCK, [0, 1, 2], [None] * 3))
    # and one that failed at once (another agent's announcement): its failure ack waits
    rig.hold("c", 2 * BLOCK, 16)
    configured, rig.runner.prefiller = rig.runner.prefiller, "the-configured-one"
    rig.runner.start(command(3, "c", "host", 2 * BLOCK, [None, None], [5, 6]))
    rig.runner.prefiller = configured
    rig.runner.advance()
    assert sorted(rig.runner.restart()) == [0, 1]
    # every ack went with the worker, a failure's too (runner.py:214:call:3 kept it)
    assert rig.runner.take_acks() == ((), (), ())
    assert rig.runner.idle
    # the restarted worker imports again
    rig.runner.start(command(2, "a", "host", 5 * BLOCK, [None] * 5, [0, 1, 2, 3, 4]))
    _, done, failed = drain(rig)
    assert done == [2] and not failed


# -- the worker: commands in the connector metadata, acks out ------------------------------


def _worker(layers: int = 2) -> tuple[Any, Any, LoopbackPrefiller]:
    from hisparse.config import HiSparseConfig
    from hisparse.worker import HiSparseWorker

    cfg = HiSparseConfig(host_pool_blocks=8, block_tokens=BLOCK, row_bytes=ROW, top_k=4,
                         layers=layers)
    executor = ReferenceExecutor()
    worker = HiSparseWorker(cfg, executor, gpu_blocks=8, slots=2)
    page = layers * BLOCK * ROW
    staging = StagingPool(2 * page, 2, page)
    peer = LoopbackPrefiller("pf", np.zeros((8, page), np.uint8))
    tr = LoopbackTransport(staging)
    tr.connect(peer)
    runner = ImportRunner(tr, executor, worker.import_pools(), worker.layout, peer, "pf")
    worker.attach_importer(runner)
    return worker, runner, peer


def test_the_worker_imports_what_the_metadata_commands() -> None:
    from hisparse.connector import HiSparseConnector, KVConnectorRole
    from hisparse.spec.messages import CONNECTOR_METADATA, trusted_metadata

    worker, runner, peer = _worker()
    pages = np.random.default_rng(20).integers(0, 256, (2, 2 * BLOCK * ROW), dtype=np.uint8)
    peer.put("a", pages)
    conn = HiSparseConnector(KVConnectorRole.WORKER, worker=worker)
    cmd = command(3, "a", "host", 2 * BLOCK - 1, [None, 1], [2, 5])
    conn.bind_connector_metadata(CONNECTOR_METADATA.dump_json(trusted_metadata((), (),
                                                                               imports=(cmd,))))
    assert list(runner.live) == [3]
    for _ in range(10):
        worker.advance_imports()
    # the acks ride in the connector's worker meta, taken once
    meta = conn.get_worker_meta()
    assert meta is not None and meta.imports_done == (3,) and not meta.imports_failed
    assert sorted(p for a in meta.imports_landed for p in a.pages) == [1, 2]
    assert worker.take_import_acks() == ((), (), ())
    pools = worker.import_pools()
    for layer in range(2):
        want = pages[1].reshape(2, BLOCK, ROW)[layer].copy()
        want[BLOCK - 1] = 0
        assert np.array_equal(pools[layer].host[5 * BLOCK:6 * BLOCK], want)
        assert np.array_equal(pools[layer].device[1 * BLOCK:2 * BLOCK], want)
    assert runner.idle


def test_a_bad_import_command_is_refused_by_the_worker_and_changes_nothing() -> None:
    from hisparse.spec.messages import SparseKVPageTransfer, trusted_metadata
    from hisparse.worker import HiSparseWorker, WorkerError

    worker, runner, peer = _worker()
    peer.put("a", np.zeros((2, 2 * BLOCK * ROW), np.uint8))
    bad = command(0, "a", "device", 2 * BLOCK, [1, 99], [None, None])
    spill = SparseKVPageTransfer(transfer_id=1, src_gpu_block=0, dst_host_block=0)
    with pytest.raises(WorkerError, match="out of range"):
        worker.apply(trusted_metadata((spill,), (), imports=(bad,)))
    assert not runner.live and not worker.executor.queued()  # the spill was not enqueued
    plain = HiSparseWorker(worker.config, ReferenceExecutor(), gpu_blocks=8, slots=2)
    good = command(0, "a", "device", 2 * BLOCK, [1, 2], [None, None])
    with pytest.raises(WorkerError, match="without an import runner"):
        plain.apply(trusted_metadata((), (), imports=(good,)))


class GatedLoopback(LoopbackTransport):
    """Loopback whose READs stay in flight until ``open`` (their bytes land then)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.open = False

    def _post(self, handle: Any, chunk: int) -> bool:
        return False

    def _check(self, handle: Any, chunk: int) -> bool:
        return self.open and bool(super()._post(handle, chunk))


def gated(slots: int = 4) -> tuple[ImportRunner, GatedLoopback, StagingPool, LoopbackPrefiller]:
    """A runner over a loopback whose READs stay in flight until ``open``: import 0 of
    request "a" (3 pages to host blocks 0-2, chunks of one page, window 2) started and
    advanced until its first two chunks hold slots 0 and 1 with their READs in flight."""
    executor = ReferenceExecutor()
    pools = [executor.allocate(LAYOUT) for _ in range(LAYERS)]
    staging = StagingPool(slots * PAGE, slots, PAGE)
    peer = LoopbackPrefiller("p", np.zeros((8, PAGE), np.uint8))
    peer.put("a", np.full((3, PAGE), 7, np.uint8))
    tr = GatedLoopback(staging, 1, 2)
    tr.connect(peer)
    runner = ImportRunner(tr, executor, pools, LAYOUT, peer, "p")
    runner.start(command(0, "a", "host", 3 * BLOCK, [None] * 3, [0, 1, 2]))
    for _ in range(3):
        runner.advance()
    return runner, tr, staging, peer


@pytest.mark.parametrize("how", ["abort", "worker loss"])
def test_nothing_is_released_while_a_read_is_in_flight(how: str) -> None:
    """An abort (or a worker loss) with READs posted: the slots and blocks they write stay
    held, and nothing is reported, until those READs end."""
    runner, tr, staging, _ = gated()
    pools = runner.pools
    assert staging.in_use == 2 and runner.live[0].handle.in_flight == 2
    if how == "abort":
        runner.abort(0)
        for _ in range(3):
            runner.advance()
        assert staging.in_use == 2 and 0 in runner.live  # still being written
        assert runner.take_acks() == ((), (), ())
        tr.open = True
        runner.advance()
        _, done, failed = runner.take_acks()
        assert not done and failed[0].detail == "aborted"
    else:
        tr.open = True  # restart waits for the READs in flight (bounded) before releasing
        assert runner.restart() == (0,)
        assert runner.take_acks() == ((), (), ())
    assert runner.idle and staging.in_use == 0 and not tr.live
    assert not (pools[0].host != 0).any()  # the aborted chunks were never copied on
    tr.close()
