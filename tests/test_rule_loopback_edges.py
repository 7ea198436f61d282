"""Rule: the loopback transport and prefiller keep their small contracts: the transport
reads with the chunk size and window it was given, ``close`` drops every block
registration and every peer, a prefiller's buffer must be a 2-D ``uint8`` array, and a
refused ``put`` holds no rows (``hisparse/transport/loopback.py``).

From the guard survivors of the third guard-phase run (docs/mutation-survivors.md):
``74:var:4``, ``74:var:5`` (the window passed as the chunk size, or the reverse),
``88:call:4`` (``close`` kept the registrations), ``33:bool:0`` (``or`` → ``and``: a
1-D or a non-``uint8`` buffer accepted), ``48:reorder:1`` (rows taken before the shape
check: a refused put held them), ``46:int:1`` (``ndim != 2`` → ``!= 3``: every
well-shaped put refused), ``110:var:7`` (``addr + n`` → ``n + n``: every local address
at or above the staging buffer read as inside it, so a page for block memory registered
above the staging buffer was written past the buffer's end, not into its block).

From the second round: ``52:call:0`` (``drop`` kept the rows), ``81:call:2``
(``disconnect`` kept the peer), ``93:raise:2`` (an announcement of an unconnected agent
not refused), ``97:arith:7`` (``off + nbytes`` → ``off - nbytes``: a descriptor running
past the prefiller's buffer accepted), ``86:call:5`` (``close`` kept ended imports live),
``135:cmp:8`` (``finish`` kept the bound chunks' transfer state and dropped none),
``110:cmp:7`` (``<=`` → ``<``: a page ending exactly at the staging buffer's end read as
outside it), ``114:raise:3``, ``115:reorder:3`` (a local address outside every
registered region not refused as a ``TransportError``).
"""

from __future__ import annotations

import numpy as np
import pytest

from hisparse.transport.base import BlockDest, ChunkState
from hisparse.transport.errors import AnnouncementRefused, TransportError
from hisparse.transport.geometry import Announcement, ImportRequest, PageDescriptor
from hisparse.transport.loopback import LoopbackPrefiller, LoopbackTransport
from hisparse.transport.staging import StagingPool

ROW, BLOCK = 16, 4
PAGE = ROW * BLOCK


class _StagingBelowBlocks(StagingPool):
    """A staging pool whose buffer is the start of one allocation whose rest (4 pages) is
    the block memory: the blocks lie right above the staging buffer, deterministically."""

    def _allocate(self, nbytes: int) -> np.ndarray:
        self.whole = np.zeros(nbytes + 4 * PAGE, np.uint8)
        return self.whole[:nbytes]


def _pool() -> StagingPool:
    return StagingPool(capacity_bytes=4 * 64, slots=4, page_bytes=64)


@pytest.mark.parametrize(("chunk", "window"), [(1, 1), (2, 3), (3, 2)])
def test_the_transport_keeps_its_chunk_size_and_window(chunk: int, window: int) -> None:
    t = LoopbackTransport(_pool(), chunk_pages=chunk, window=window)
    assert (t.chunk_pages, t.window) == (chunk, window)


def test_close_drops_every_registration_and_peer() -> None:
    t = LoopbackTransport(_pool())
    block = np.zeros(256, np.uint8)
    t.register(block)
    t.connect(LoopbackPrefiller("p", np.zeros((2, 64), np.uint8)))
    assert t.regions and t.peers
    t.close()
    assert t.regions == {} and t.peers == {}
    t.close()  # idempotent


@pytest.mark.parametrize("pages", [np.zeros(64, np.uint8), np.zeros((2, 64), np.int8),
                                   np.zeros((2, 2, 16), np.uint8)])
def test_a_prefiller_buffer_must_be_two_dimensional_uint8(pages: np.ndarray) -> None:
    with pytest.raises(ValueError, match="2-D uint8"):
        LoopbackPrefiller("p", pages)


def test_a_refused_put_holds_no_rows() -> None:
    p = LoopbackPrefiller("p", np.zeros((3, 64), np.uint8))
    with pytest.raises(ValueError, match="bytes, rows hold 64"):
        p.put("r", np.ones((2, 32), np.uint8))
    assert p.arena.num_free == 3 and p.arena.held == {}
    with pytest.raises(ValueError, match="rows hold 64"):
        p.put("r", np.ones(64, np.uint8))  # one page, but not as a row
    assert p.arena.num_free == 3 and p.arena.held == {}
    p.put("r", np.full((3, 64), 7, np.uint8))  # the same request, the right shape, fits
    assert p.arena.num_free == 0 and bool(np.all(p.pages == 7))


def test_a_page_lands_in_block_memory_registered_right_above_the_staging_buffer() -> None:
    pool = _StagingBelowBlocks(2 * PAGE, 2, PAGE)
    blocks = pool.whole[2 * PAGE:]
    assert blocks.ctypes.data == pool.buffer.ctypes.data + pool.buffer.nbytes
    req = ImportRequest("r", 2 * BLOCK, ROW, BLOCK, "p")
    pages = np.arange(2 * PAGE, dtype=np.uint8).reshape(2, PAGE) + 1
    peer = LoopbackPrefiller("p", pages)
    t = LoopbackTransport(pool)
    t.connect(peer)
    t.register(blocks)
    base = int(blocks.ctypes.data)
    handle = t.begin(req, peer.announce("r", req.num_tokens, ROW, BLOCK))
    t.bind(handle, 0, [BlockDest("r", (base + 3 * PAGE,))])
    t.bind(handle, 1, [BlockDest("r", (base + PAGE,))])
    t.wait(handle)
    assert handle.done and handle.error is None
    assert np.array_equal(blocks[3 * PAGE:], pages[0])
    assert np.array_equal(blocks[PAGE:2 * PAGE], pages[1])
    assert not blocks[:PAGE].any() and not blocks[2 * PAGE:3 * PAGE].any()
    assert not pool.buffer.any()  # nothing went through the staging slots
    t.finish(handle)
    t.close()


def _peer(rows: int = 3) -> LoopbackPrefiller:
    pages = np.arange(rows * PAGE, dtype=np.uint8).reshape(rows, PAGE) + 1
    return LoopbackPrefiller("p", pages)


def test_a_dropped_request_gives_its_rows_back() -> None:
    p = _peer(3)
    p.put("a", np.full((2, PAGE), 5, np.uint8))
    assert p.arena.num_free == 1
    p.drop("a")
    assert p.arena.held == {} and p.arena.num_free == 3
    p.put("b", np.full((3, PAGE), 6, np.uint8))  # every row free again
    assert sorted(p.arena.held["b"]) == [0, 1, 2]
    p.drop("never-put")  # idempotent: nothing held, nothing changes
    assert p.arena.num_free == 0


def test_an_unconnected_or_disconnected_agent_is_refused_holding_nothing() -> None:
    req = ImportRequest("r", BLOCK, ROW, BLOCK, "p")
    peer = _peer(1)
    ann = peer.announce("r", req.num_tokens, ROW, BLOCK)
    t = LoopbackTransport(StagingPool(PAGE, 1, PAGE))
    with pytest.raises(AnnouncementRefused, match="'p' is not connected") as exc:
        t.begin(req, ann)
    assert exc.value.reason == "agent" and t.live == {}
    t.connect(peer)
    t.finish(t.wait(t.begin(req, ann, t.pool.lease("r", 1))))
    t.disconnect("p")
    assert t.peers == {}
    with pytest.raises(AnnouncementRefused, match="'p' is not connected") as exc:
        t.begin(req, ann)
    assert exc.value.reason == "agent" and t.live == {}
    t.disconnect("p")  # idempotent


@pytest.mark.parametrize(("page", "shift"), [(0, -1), (1, 1), (1, PAGE), (0, 3 * PAGE)])
def test_a_descriptor_outside_the_prefillers_buffer_is_refused(page: int, shift: int) -> None:
    """The peer's buffer is 2 pages: a page starting one byte before it, ending one byte
    or a page past it, or starting past its end, is refused before any READ."""
    req = ImportRequest("r", 2 * BLOCK, ROW, BLOCK, "p")
    peer = _peer(2)
    honest = peer.announce("r", req.num_tokens, ROW, BLOCK)
    descs = list(honest.pages)
    descs[page] = PageDescriptor(page, descs[page].addr + shift, PAGE)
    ann = Announcement("p", "r", req.num_tokens, ROW, BLOCK, tuple(descs))
    t = LoopbackTransport(StagingPool(2 * PAGE, 2, PAGE))
    t.connect(peer)
    leases = t.pool.lease("r", 2)
    with pytest.raises(AnnouncementRefused, match=f"page {page} lies outside 'p'") as exc:
        t.begin(req, ann, leases)
    assert exc.value.reason == "descriptor" and t.live == {}
    assert not t.pool.buffer.any()
    h = t.wait(t.begin(req, honest, leases))  # the honest one, ending at the end, reads
    assert h.done and np.array_equal(t.pool.buffer.reshape(2, PAGE), peer.pages)


def test_full_pages_land_in_every_staging_slot_up_to_the_buffers_last_byte() -> None:
    """Slots exactly one page each: the last slot's page ends at the buffer's last byte
    and is still a staging write."""
    req = ImportRequest("r", 3 * BLOCK, ROW, BLOCK, "p")
    peer = _peer(3)
    t = LoopbackTransport(StagingPool(3 * PAGE, 3, PAGE), chunk_pages=2, window=2)
    t.connect(peer)
    leases = t.pool.lease("r", 3)
    h = t.wait(t.begin(req, peer.announce("r", req.num_tokens, ROW, BLOCK), leases))
    assert h.done and h.error is None
    for lease, row in zip(leases, range(3), strict=True):
        assert np.array_equal(t.pool.view(lease.slot), peer.pages[row])
    assert t.pool.buffer.nbytes == 3 * PAGE


def test_finish_and_close_drop_every_ended_import_and_its_transfer_state() -> None:
    req = ImportRequest("r", 2 * BLOCK, ROW, BLOCK, "p")
    peer = _peer(2)
    ann = peer.announce("r", req.num_tokens, ROW, BLOCK)
    t = LoopbackTransport(StagingPool(2 * PAGE, 2, PAGE))
    t.connect(peer)
    h = t.wait(t.begin(req, ann, t.pool.lease("r", 2)))
    assert h.done and all(tok is not None for tok in h.tokens)
    t.finish(h)
    assert t.live == {} and h.tokens == [None, None] and h.dests == [None, None]
    # an ended import still live is dropped by close, with its transfer state
    t2 = LoopbackTransport(StagingPool(2 * PAGE, 2, PAGE))
    t2.connect(peer)
    h2 = t2.wait(t2.begin(req, ann, t2.pool.lease("r", 2)))
    assert h2.states == [ChunkState.DONE, ChunkState.DONE] and "r" in t2.live
    t2.close()
    assert t2.live == {} and h2.tokens == [None, None] and h2.dests == [None, None]
    t2.connect(peer)  # close dropped the peer too
    h3 = t2.begin(req, ann)  # the same request may import again: it is no longer live
    assert t2.live == {"r": h3}


def test_a_local_address_outside_every_registered_region_is_refused() -> None:
    """The bind checks keep an unregistered address from a READ; the last defence in
    ``_local`` still refuses one as a ``TransportError`` naming it, never a view."""
    t = LoopbackTransport(StagingPool(PAGE, 1, PAGE))
    block = np.zeros(PAGE, np.uint8)
    t.register(block)
    inside = int(block.ctypes.data)
    assert np.shares_memory(t._local(inside, PAGE), block)
    outside = 8  # below every allocation: in neither the staging buffer nor the region
    with pytest.raises(TransportError, match=f"local address {outside:#x} is not registered"):
        t._local(outside, 1)
