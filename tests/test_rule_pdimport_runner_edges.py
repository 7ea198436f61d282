"""Rule: the import runner accepts a staging pool exactly as large as one chunk, and
``drain`` ends every import in flight, each reported once (``hisparse/pdimport/runner.py``).

From the guard survivors of the second guard-phase run (docs/mutation-survivors.md):

- ``107:cmp:1`` (``chunk_pages > pool.slots`` → ``>=``): chunks of exactly as many pages
  as the pool has slots were refused, though one chunk fits; here every chunk size up to
  the slots is accepted and lands, one more is refused;
- ``191:not:1`` (``if not self.live`` → ``if self.live``): ``drain`` returned at once
  with imports in flight (and spun ``max_polls`` rounds when there were none); here,
  for several imports of each target, ``drain`` leaves the runner idle with every page
  landed and every import done exactly once;
- ``197:call:14`` (the ``wait`` of ``drain``'s last resort deleted): an import still in
  flight after ``max_polls`` rounds was aborted but left live with its READs posted;
  here it is reported failed as aborted, once, and nothing is held;
- ``273:cmp:18`` (``valid_rows < b`` → ``<=``): a full page of a device-target import
  got a zeroing write of no rows (one executor call per cache, a launch on the GPU);
  here exactly the pages that are not full get one zeroing write per cache, of exactly
  their rows past the valid ones, before the READ lands.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from hisparse.executor.layout import PoolLayout
from hisparse.executor.reference import ReferenceExecutor
from hisparse.pdimport import ImportRefused, ImportRunner
from hisparse.spec.messages import ImportCommand, PageImport
from hisparse.transport import (
    AnnouncementRefused,
    LoopbackPrefiller,
    LoopbackTransport,
    StagingPool,
)
from hisparse.transport.base import ImportHandle

LAYERS, BLOCK, ROW = 2, 4, 16
PAGE = LAYERS * BLOCK * ROW
LAYOUT = PoolLayout(gpu_blocks=8, host_blocks=8, block_tokens=BLOCK, row_bytes=ROW,
                    hot_rows=4, slots=1)


class SlowLoopback(LoopbackTransport):
    """Loopback whose READs land at their third check (each stays in flight a while)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.checks: dict[tuple[str, int], int] = {}

    def _post(self, handle: ImportHandle, chunk: int) -> bool:
        return False

    def _check(self, handle: ImportHandle, chunk: int) -> bool:
        key = (handle.request.req_id, chunk)
        self.checks[key] = self.checks.get(key, 0) + 1
        return self.checks[key] >= 3 and bool(super()._post(handle, chunk))


class SpyExecutor(ReferenceExecutor):
    """The reference executor, recording every device-row write (its rows)."""

    def __init__(self) -> None:
        super().__init__()
        self.device_writes: list[list[int]] = []

    def write_device_rows(self, pools: Any, rows: Any, data: Any) -> None:
        self.device_writes.append([int(r) for r in rows])
        super().write_device_rows(pools, rows, data)


def _runner(slots: int, chunk_pages: int, window: int = 1, slow: bool = False,
            executor: ReferenceExecutor | None = None
            ) -> tuple[ImportRunner, LoopbackPrefiller, StagingPool]:
    executor = executor or ReferenceExecutor()
    pools = [executor.allocate(LAYOUT) for _ in range(LAYERS)]
    staging = StagingPool(slots * PAGE, slots, PAGE)
    peer = LoopbackPrefiller("p", np.zeros((16, PAGE), np.uint8))
    tr = (SlowLoopback if slow else LoopbackTransport)(staging, chunk_pages, window)
    tr.connect(peer)
    return ImportRunner(tr, executor, pools, LAYOUT, peer, "p"), peer, staging


def _command(iid: int, req: str, target: str, pages: int, first_block: int) -> ImportCommand:
    blocks = [first_block + i for i in range(pages)]
    return ImportCommand(
        import_id=iid, request_id=req, target=target,  # type: ignore[arg-type]
        num_tokens=pages * BLOCK, block_size=BLOCK,
        pages=tuple(PageImport(page_index=i + 1, key=f"{req}:{i}",
                               gpu_block=blocks[i] if target == "device" else None,
                               host_block=blocks[i] if target == "host" else None,
                               valid_rows=BLOCK) for i in range(pages)))


@pytest.mark.parametrize("slots", [1, 2, 3])
def test_chunks_as_large_as_the_pool_are_accepted_and_one_more_refused(slots: int) -> None:
    for chunk in range(1, slots + 1):
        runner, peer, staging = _runner(slots, chunk)
        peer.put("a", np.full((3, PAGE), 9, np.uint8))
        runner.start(_command(0, "a", "host", 3, 0))
        runner.drain()
        _, done, failed = runner.take_acks()
        assert done == (0,) and not failed and staging.in_use == 0
    with pytest.raises(ImportRefused, match=f"raise the staging slots to at least {slots + 1}"):
        _runner(slots, slots + 1)


@pytest.mark.parametrize("target", ["host", "device"])
def test_drain_ends_every_import_in_flight_each_reported_once(target: str) -> None:
    runner, peer, staging = _runner(2, 1)
    sizes = [3, 1, 2]
    for i, n in enumerate(sizes):
        peer.put(f"r{i}", np.full((n, PAGE), 10 + i, np.uint8))
        runner.start(_command(i, f"r{i}", target, n, sum(sizes[:i])))
    assert len(runner.live) == len(sizes)
    runner.drain()
    assert runner.idle and staging.in_use == 0
    landed, done, failed = runner.take_acks()
    assert sorted(done) == list(range(len(sizes))) and not failed
    assert {a.import_id: sorted(a.pages) for a in landed} == {
        i: list(range(1, n + 1)) for i, n in enumerate(sizes)}
    runner.drain()  # nothing in flight: returns, reports nothing more
    assert runner.take_acks() == ((), (), ())


@pytest.mark.parametrize("target", ["host", "device"])
def test_drain_out_of_polls_aborts_waits_and_reports_once(target: str) -> None:
    runner, peer, staging = _runner(2, 1, window=2, slow=True)
    peer.put("a", np.full((3, PAGE), 5, np.uint8))
    runner.start(_command(0, "a", target, 3, 0))
    runner.drain(max_polls=1)  # one round: two READs posted, none landed
    assert runner.idle and staging.in_use == 0 and not runner.transport.live
    landed, done, failed = runner.take_acks()
    assert not landed and not done
    assert [(f.import_id, f.reason, f.detail) for f in failed] == [(0, "transport", "aborted")]


@pytest.mark.parametrize("num_tokens", [1, BLOCK - 1, BLOCK, 2 * BLOCK, 3 * BLOCK - 2])
def test_only_a_page_that_is_not_full_gets_its_tail_zeroed(num_tokens: int) -> None:
    spy = SpyExecutor()
    runner, peer, _ = _runner(2, 1, executor=spy)
    n = -(-num_tokens // BLOCK)
    peer.put("a", np.full((n, PAGE), 3, np.uint8))
    blocks = [6, 1, 4][:n]
    cmd = ImportCommand(
        import_id=0, request_id="a", target="device", num_tokens=num_tokens,
        block_size=BLOCK,
        pages=tuple(PageImport(page_index=i + 1, key=f"a:{i}", gpu_block=blocks[i],
                               host_block=None,
                               valid_rows=min(BLOCK, num_tokens - i * BLOCK))
                    for i in range(n)))
    runner.start(cmd)
    runner.drain()
    assert runner.take_acks()[1] == (0,)
    valid = num_tokens - (n - 1) * BLOCK  # rows of the final page
    tail = list(range(blocks[-1] * BLOCK + valid, (blocks[-1] + 1) * BLOCK))
    assert spy.device_writes == ([tail] * LAYERS if valid < BLOCK else [])


def test_a_device_staging_pool_copies_each_cache_in_one_call_at_its_slot_blocks() -> None:
    """With a staging pool in device memory whose slots hold whole blocks, each cache's
    staged pages go to their host blocks in one batched call: slot ``s`` holds block
    ``s * blocks_per_slot + layer`` of the buffer (runner.py:322:arith:4 multiplied). The
    CUDA executor is the one with that path: stand-ins take its place here."""
    layout = PoolLayout(gpu_blocks=4, host_blocks=8, block_tokens=4, row_bytes=16,
                        hot_rows=4, slots=1)
    layers, block_bytes = 2, 4 * 16

    class DeviceBuffer:
        __cuda_array_interface__ = None  # only its presence is read

    calls: list[tuple[str, list[tuple[int, int]]]] = []
    pool = SimpleNamespace(buffer=DeviceBuffer(), slot_bytes=layers * block_bytes)
    executor = SimpleNamespace(
        write_host_blocks=lambda pools, buffer, pairs: calls.append((pools, list(pairs))))
    runner: Any = SimpleNamespace(transport=SimpleNamespace(pool=pool), layout=layout,
                                  executor=executor, pools=["cache0", "cache1"])
    staged = [(SimpleNamespace(host_block=5, gpu_block=None), 0),
              (SimpleNamespace(host_block=7, gpu_block=None), 3)]
    ImportRunner._copy_out(runner, staged)
    assert calls == [("cache0", [(5, 0), (7, 6)]), ("cache1", [(5, 1), (7, 7)])]


@pytest.mark.parametrize("target", ["host", "device"])
def test_a_refused_bind_fails_the_import_and_returns_its_staging_slots(
        target: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The transport refuses a chunk's descriptors (NIXL's check): the import fails as
    refused and a host import's leased staging slots go back (runner.py:258:cmp:23
    released them for the device target only)."""
    runner, peer, staging = _runner(2, 1)
    peer.put("a", np.full((2, PAGE), 3, np.uint8))

    def refuse(handle: Any, chunk: int, dests: Any) -> None:
        raise AnnouncementRefused("destination", "the descriptors were refused")

    monkeypatch.setattr(runner.transport, "bind", refuse)
    runner.start(_command(0, "a", target, 2, 0))
    runner.drain()
    _, done, failed = runner.take_acks()
    assert not done and [(f.import_id, f.reason) for f in failed] == [(0, "refused")]
    assert "the descriptors were refused" in failed[0].detail
    assert staging.in_use == 0 and runner.idle


@pytest.mark.parametrize("gpu_block", [2, 0])
def test_a_device_staging_pool_mirrors_each_page_with_a_gpu_block_too(gpu_block: int) -> None:
    """The batched path (a device staging pool of whole blocks) also mirrors each staged
    page that has a GPU block into its resident rows, every cache, from its own slot;
    a page without one is not mirrored (runner.py:328:call:36 dropped the mirror: an
    imported page needed at once was missing from its resident block). Block 0 is a
    block (runner.py:327:none:6 read it as none and left its rows unwritten)."""
    layout = PoolLayout(gpu_blocks=4, host_blocks=8, block_tokens=4, row_bytes=16,
                        hot_rows=4, slots=1)
    layers, block_bytes = 2, 4 * 16

    class DeviceBuffer:
        __cuda_array_interface__ = None  # only its presence is read

    def view(slot: int) -> Any:  # slot s: layer l's block holds the bytes 10*s + l
        return np.repeat(np.array([10 * slot + i for i in range(layers)], np.uint8),
                         block_bytes)

    rows: list[tuple[str, list[int], set[int]]] = []
    pool = SimpleNamespace(buffer=DeviceBuffer(), slot_bytes=layers * block_bytes, view=view)
    executor = SimpleNamespace(
        write_host_blocks=lambda pools, buffer, pairs: None,
        write_device_rows=lambda pools, mirror, data: rows.append(
            (pools, [int(r) for r in mirror], set(np.unique(data).tolist()))))
    runner: Any = SimpleNamespace(transport=SimpleNamespace(pool=pool), layout=layout,
                                  executor=executor, pools=["cache0", "cache1"])
    runner._mirror = lambda pg, staged: ImportRunner._mirror(runner, pg, staged)
    staged = [(SimpleNamespace(host_block=5, gpu_block=None), 0),
              (SimpleNamespace(host_block=7, gpu_block=gpu_block), 3)]
    ImportRunner._copy_out(runner, staged)
    resident = [layout.resident_row(gpu_block, 0) + r for r in range(4)]
    assert rows == [("cache0", resident, {30}), ("cache1", resident, {31})]
