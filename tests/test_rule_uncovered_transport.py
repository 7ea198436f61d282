"""Rules of the import transport, its NIXL prefiller process and ``bench nixl`` that lines
no test ran showed: found by the whole mutation run (docs/mutation-run7).

The transport rules run over the loopback transport; the prefiller rules over a stand-in
child process (spawned as ``NixlPrefiller`` spawns its own) that never answers or that
answers a put with something else; the bench rules drive ``bench nixl``'s ``run`` over
loopback stand-ins for NIXL that lose the prefiller or land a wrong byte.
"""

from __future__ import annotations

import multiprocessing as mp
import re
import signal
from multiprocessing.connection import Connection
from types import TracebackType
from typing import Any

import numpy as np
import pytest

import hisparse.bench.nixl as bench
import hisparse.transport.nixlpeer as nixlpeer
from hisparse.bench.cli import BenchFailed
from hisparse.transport import (
    AnnouncementRefused,
    ChunkState,
    ImportRequest,
    LoopbackPrefiller,
    LoopbackTransport,
    StagingPool,
    TransportError,
)
from hisparse.transport.base import BlockDest, ImportHandle, Transport
from hisparse.transport.nixlpeer import NixlPrefiller

ROW, BLOCK = 16, 4
PAGE = ROW * BLOCK


def _pages(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(1, 256, (n, PAGE), dtype=np.uint8)


def _setup(n: int, chunk_pages: int = 1, window: int = 1,
           tr_type: type[LoopbackTransport] = LoopbackTransport,
           ) -> tuple[ImportRequest, LoopbackPrefiller, LoopbackTransport, StagingPool]:
    """Request ``r`` of ``n`` full pages held by loopback prefiller ``p``, a connected
    transport, and an empty staging pool of ``n`` slots."""
    req = ImportRequest("r", n * BLOCK, ROW, BLOCK, "p")
    peer = LoopbackPrefiller("p", _pages(n, seed=n))
    pool = StagingPool(n * PAGE, n, PAGE)
    tr = tr_type(pool, chunk_pages, window)
    tr.connect(peer)
    return req, peer, tr, pool


def _ann(peer: LoopbackPrefiller, req: ImportRequest) -> Any:
    return peer.announce(req.req_id, req.num_tokens, ROW, BLOCK)


# -- begin / bind / wait refusals ------------------------------------------------------


def test_pages_of_another_size_than_the_staging_slots_are_refused_as_geometry() -> None:
    # kills base.py:146:raise:10 (the import went on into slots of another page size)
    req, peer, _, _ = _setup(2)
    pool = StagingPool(2 * 2 * PAGE, 2, 2 * PAGE)  # slots hold pages twice the request's
    tr = LoopbackTransport(pool)
    tr.connect(peer)
    leases = pool.lease("r", 2)
    with pytest.raises(AnnouncementRefused, match=re.escape(
            f"announcement refused (geometry): pages of {PAGE} bytes, staging slots hold "
            f"pages of {2 * PAGE}")) as info:
        tr.begin(req, _ann(peer, req), leases)
    assert info.value.reason == "geometry"
    assert not tr.live and pool.in_use == 2 and not pool.buffer.any()


def test_a_request_already_importing_is_refused_and_its_import_goes_on() -> None:
    # kills base.py:151:raise:11 (the second begin replaced the live import)
    req, peer, tr, pool = _setup(2)
    leases = pool.lease("r", 2)
    first = tr.begin(req, _ann(peer, req), leases)
    with pytest.raises(AnnouncementRefused, match=re.escape(
            "announcement refused (request): 'r' is already importing")) as info:
        tr.begin(req, _ann(peer, req))
    assert info.value.reason == "request"
    assert tr.live == {"r": first} and first.leases == tuple(leases)
    assert first.states == [ChunkState.PENDING] * 2 and not pool.buffer.any()
    tr.wait(first)
    assert first.done
    assert np.array_equal(np.stack([pool.view(ls.slot) for ls in leases]), peer.pages)
    tr.finish(first)
    pool.release(leases)


def test_an_aborted_or_finished_import_takes_no_more_destinations() -> None:
    # kills base.py:185:raise:13 (an aborted import bound a chunk it will never post)
    req, peer, tr, pool = _setup(2)
    handle = tr.begin(req, _ann(peer, req))
    tr.abort(handle)
    lease = pool.lease("r", 1)
    with pytest.raises(AnnouncementRefused, match=re.escape(
            "announcement refused (request): 'r' is not importing")) as info:
        tr.bind(handle, 0, lease)
    assert info.value.reason == "request"
    assert not handle.bound(0) and handle.tokens == [None, None] and handle.leases == ()
    assert handle.ended and tr.wait(handle) is handle
    tr.finish(handle)
    with pytest.raises(AnnouncementRefused, match="'r' is not importing"):
        tr.bind(handle, 1, lease)
    assert not handle.bound(1) and not tr.live and not pool.buffer.any()
    pool.release(lease)


def test_waiting_on_an_import_with_unbound_chunks_is_refused_and_changes_nothing() -> None:
    # kills base.py:288:raise:16 (the wait polled, posted the bound chunk and failed the
    # import for "no completion" instead of refusing)
    req, peer, tr, pool = _setup(2)
    handle = tr.begin(req, _ann(peer, req))
    lease = pool.lease("r", 1)
    tr.bind(handle, 0, lease)
    with pytest.raises(TransportError, match=re.escape(
            "'r' has chunks without destinations")):
        tr.wait(handle, max_polls=4)
    assert handle.error is None and handle.states == [ChunkState.PENDING] * 2
    assert tr.live == {"r": handle} and not pool.buffer.any()  # nothing was posted
    tr.abort(handle)  # an aborted import may be waited on with chunks unbound
    assert tr.wait(handle, max_polls=4) is handle and handle.ended
    tr.finish(handle)
    pool.release(lease)


class HungLoopback(LoopbackTransport):
    """Loopback whose READ of chunk 0 lands when posted and whose other READs, once
    posted, never complete (a hung READ)."""

    def _post(self, handle: ImportHandle, chunk: int) -> bool:
        return chunk == 0 and super()._post(handle, chunk)

    def _check(self, handle: ImportHandle, chunk: int) -> bool:
        return False


def test_a_wait_out_of_polls_fails_the_import_at_its_first_unfinished_chunk() -> None:
    # kills base.py:293:not:0 (returned with the READs still in flight and no error),
    # 294:cmp:41 (failed it at the done chunk 0), 295:call:10 (no error: the import never
    # ends) and 297:cmp:33 (the done chunk marked failed, the hung one left posted)
    req, peer, tr, pool = _setup(4, chunk_pages=1, window=2, tr_type=HungLoopback)
    leases = pool.lease("r", 4)
    handle = tr.begin(req, _ann(peer, req), leases)
    tr.wait(handle, max_polls=5)
    assert handle.states == [ChunkState.DONE] + [ChunkState.FAILED] * 3
    assert handle.error is not None and handle.error.chunk == 1
    # (named once: the error was built for chunk -1 and wrapped again for chunk 1)
    assert str(handle.error) == "import of request 'r' failed at chunk 1: no completion"
    assert handle.ended and handle.in_flight == 0
    assert np.array_equal(pool.view(leases[0].slot), peer.pages[0])
    assert not pool.buffer[PAGE:].any()  # the hung READs landed nothing
    tr.finish(handle)
    assert not tr.live and handle.tokens == [None] * 4
    pool.release(leases)


# -- what a handle holds -------------------------------------------------------------------


def test_a_handle_lists_the_leases_of_its_bound_chunks_in_chunk_order() -> None:
    # kills base.py:68:cmp:37 (read the unbound chunks' destinations: a TypeError)
    req, peer, tr, pool = _setup(3)
    blocks = np.zeros((1, PAGE), np.uint8)
    tr.register(blocks)
    handle = tr.begin(req, _ann(peer, req))
    assert list(handle.leases) == []
    second, = pool.lease("r", 1)
    tr.bind(handle, 2, [second])
    assert list(handle.leases) == [second]
    first, = pool.lease("r", 1)
    tr.bind(handle, 0, [first])
    assert list(handle.leases) == [first, second]  # chunk order, not binding order
    tr.bind(handle, 1, [BlockDest("r", (int(blocks.ctypes.data),))])
    assert list(handle.leases) == [first, second]  # a block destination is no lease
    tr.abort(handle)
    tr.finish(handle)
    pool.release([first, second])


# -- the base close ----------------------------------------------------------------------


class BaseClosing(LoopbackTransport):
    """Loopback keeping the base ``Transport.close``; records each deregistration."""

    def __init__(self, pool: StagingPool, chunk_pages: int = 1, window: int = 1) -> None:
        super().__init__(pool, chunk_pages, window)
        self.deregistered: list[int] = []

    def close(self) -> None:
        Transport.close(self)

    def _deregister(self, buf: Any) -> None:
        self.deregistered.append(int(buf.ctypes.data))


def test_the_base_close_forgets_ended_imports_and_drops_every_registration() -> None:
    # kills base.py:125:call:8 (the ended import stayed live, its block claimed) and
    # 126:call:2 (the block memory stayed registered)
    req, peer, tr, pool = _setup(2, tr_type=BaseClosing)
    assert isinstance(tr, BaseClosing)
    blocks = np.zeros((2, PAGE), np.uint8)
    base = int(blocks.ctypes.data)
    tr.register(blocks)
    dests = [BlockDest("r", (base,)), BlockDest("r", (base + PAGE,))]
    handle = tr.wait(tr.begin(req, _ann(peer, req), dests))
    assert handle.done and np.array_equal(blocks, peer.pages)
    tr.close()
    assert not tr.live and tr.regions == {} and tr.deregistered == [base]
    assert handle.dests == [None, None] and handle.tokens == [None, None]
    tr.close()  # idempotent
    assert tr.deregistered == [base]
    tr.register(blocks)  # the blocks are free again: the same request may land there
    again = tr.wait(tr.begin(req, _ann(peer, req), dests))
    assert again.done
    tr.close()
    assert not tr.live and tr.regions == {} and pool.in_use == 0


# -- the prefiller process ----------------------------------------------------------------
# Stand-in children (``NixlPrefiller`` spawns its target by reference: they live at module
# level). Neither loads NIXL.


def _never_answers(name: str, conn: Connection) -> None:
    """A prefiller whose agent never comes up: it takes the pages and waits for a signal."""
    conn.recv()
    while True:
        signal.pause()


def _refuses_pages(name: str, conn: Connection) -> None:
    """A prefiller that comes up but answers every put with ``refused``."""
    pages = conn.recv()
    conn.send((b"stand-in metadata", 0, pages.shape[1], pages.shape[0]))
    while conn.recv() != "stop":
        conn.send("refused")
    conn.send("stopped")


def test_a_prefiller_that_does_not_come_up_is_killed_and_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # kills nixlpeer.py:74:call:16 (the silent child left running) and 75:raise:3 (read the
    # closed pipe: reported as "died starting up")
    monkeypatch.setattr(nixlpeer, "_serve", _never_answers)
    monkeypatch.setattr(nixlpeer, "READY_TIMEOUT_S", 0.0)  # the child never answers at all
    before = set(mp.active_children())
    try:
        with pytest.raises(TransportError, match=re.escape(
                "prefiller 'mute' did not come up")):
            NixlPrefiller("mute", np.zeros((2, PAGE), np.uint8))
        assert set(mp.active_children()) == before  # killed and reaped
    finally:
        for child in set(mp.active_children()) - before:  # (only on a failure above)
            child.kill()
            child.join()


def test_a_prefiller_that_does_not_take_a_put_is_reported_by_name() -> None:
    # kills nixlpeer.py:92:raise:5 (a put the child refused returned as if it held them);
    # the rows it held on that refusal were a bug the test found (fixed)
    with pytest.MonkeyPatch.context() as mpatch:
        mpatch.setattr(nixlpeer, "_serve", _refuses_pages)
        peer = NixlPrefiller("stubborn", np.zeros((3, PAGE), np.uint8))
    try:
        assert (peer.metadata, peer.base, peer.stride, peer.num_pages) == (
            b"stand-in metadata", 0, PAGE, 3)
        with pytest.raises(TransportError, match=re.escape(
                "prefiller 'stubborn' did not take the pages")):
            peer.put("r", _pages(2, seed=7))
        # its answer did not pair with the put: ended, and the put holds no rows (a
        # retried put would else be refused as already held, announce would name rows
        # never written)
        assert peer.reaped and "r" not in peer.arena.held
        with pytest.raises(TransportError, match=re.escape("prefiller 'stubborn' is gone")):
            peer.put("r", _pages(2, seed=7))
        assert "r" not in peer.arena.held
    finally:
        peer.stop()


# -- bench nixl's byte checks ---------------------------------------------------------------


class _BenchPeer(LoopbackPrefiller):
    """Stands in for ``NixlPrefiller`` in the bench: its metadata is itself."""

    exited = False

    @property
    def metadata(self) -> LoopbackPrefiller:
        return self

    def __enter__(self) -> _BenchPeer:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.exited = True


class _LostPeer(_BenchPeer):
    """A prefiller gone before the first READ."""

    def __init__(self, name: str, pages: np.ndarray) -> None:
        super().__init__(name, pages)
        self.kill()


class _BenchDecoder(LoopbackTransport):
    """Stands in for ``NixlTransport`` in the bench: loopback READs; with ``corrupt`` every
    READ lands its first byte flipped."""

    def __init__(self, pool: StagingPool, name: str, chunk_pages: int = 1, window: int = 1,
                 corrupt: bool = False) -> None:
        super().__init__(pool, chunk_pages, window)
        self.name = name
        self.corrupt = corrupt

    def connect(self, peer: LoopbackPrefiller, expected: str = "") -> None:
        assert peer.name == expected
        super().connect(peer)

    def _post(self, handle: ImportHandle, chunk: int) -> bool:
        finished = super()._post(handle, chunk)
        if self.corrupt:
            local, _, n, _ = handle.tokens[chunk][0]
            self._local(local, n)[0] ^= 0xFF
        return finished


def _stand_ins(monkeypatch: pytest.MonkeyPatch, peer: type[_BenchPeer] = _BenchPeer,
               corrupt: str = "") -> tuple[list[_BenchPeer], list[_BenchDecoder]]:
    """The bench's NIXL classes replaced; the decoder named ``corrupt`` lands bad bytes.
    Returns the peers and decoders the bench makes."""
    peers: list[_BenchPeer] = []
    decoders: list[_BenchDecoder] = []

    def make_peer(name: str, pages: np.ndarray) -> _BenchPeer:
        peers.append(peer(name, pages))
        return peers[-1]

    def make_decoder(pool: StagingPool, name: str, chunk_pages: int = 1,
                     window: int = 1) -> _BenchDecoder:
        decoders.append(_BenchDecoder(pool, name, chunk_pages, window, name == corrupt))
        return decoders[-1]

    monkeypatch.setattr(bench, "NixlPrefiller", make_peer)
    monkeypatch.setattr(bench, "NixlTransport", make_decoder)
    return peers, decoders


def test_the_bench_stand_ins_pass_an_honest_run(monkeypatch: pytest.MonkeyPatch) -> None:
    # the stand-ins themselves land equal bytes: the failures below are the bench's checks
    peers, decoders = _stand_ins(monkeypatch)
    doc = bench.run(total_mib=1, page_kib=256, chunk_pages=2, reps=1, staging_slots=2)
    assert doc["pages"] == 4 and doc["staging_slots"] == 2 and doc["staging_peak"] == 2
    assert [d.name for d in decoders] == ["bench-decoder", "bench-staged-decoder"]
    assert all(p.exited for p in peers) and not any(d.live for d in decoders)


def test_the_bench_fails_with_the_import_error_when_the_prefiller_is_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # kills bench/nixl.py:56:raise:3 (went on to compare the unlanded bytes instead)
    peers, decoders = _stand_ins(monkeypatch, peer=_LostPeer)
    with pytest.raises(BenchFailed, match="^" + re.escape(
            "import of request 'bench' failed at chunk 0: prefiller 'bench-prefiller' "
            "is gone") + "$"):
        bench.run(total_mib=1, page_kib=256, chunk_pages=2, reps=1)
    assert [p.exited for p in peers] == [True]
    assert [d.name for d in decoders] == ["bench-decoder"] and not decoders[0].live


class _CopyThatCorrupts:
    """NumPy for the bench module, except that ``copyto`` (the memcpy ceiling) lands its
    first byte flipped."""

    def __getattr__(self, name: str) -> Any:
        return getattr(np, name)

    @staticmethod
    def copyto(dst: np.ndarray, src: np.ndarray) -> None:
        np.copyto(dst, src)
        dst.reshape(-1)[0] ^= 0xFF


def test_the_bench_fails_when_the_memcpy_baseline_does_not_copy_the_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # kills bench/nixl.py:75:raise:0 (reported a ceiling over bytes it did not copy)
    _stand_ins(monkeypatch)
    monkeypatch.setattr(bench, "np", _CopyThatCorrupts())
    with pytest.raises(BenchFailed, match=r"^the memcpy baseline left bytes that differ$"):
        bench.run(total_mib=1, page_kib=256, chunk_pages=2, reps=1)


def test_the_bench_fails_when_the_staged_import_lands_other_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # kills bench/nixl.py:129:raise:2 (timed a staged import whose host blocks differ)
    peers, decoders = _stand_ins(monkeypatch, corrupt="bench-staged-decoder")
    with pytest.raises(BenchFailed, match=r"^the staged import landed bytes that differ$"):
        bench.run(total_mib=1, page_kib=256, chunk_pages=2, reps=1, staging_slots=2)
    assert [d.name for d in decoders] == ["bench-decoder", "bench-staged-decoder"]
    assert all(p.exited for p in peers) and not any(d.live for d in decoders)
