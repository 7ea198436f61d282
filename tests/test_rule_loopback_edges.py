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
"""

from __future__ import annotations

import numpy as np
import pytest

from hisparse.transport.base import BlockDest
from hisparse.transport.geometry import ImportRequest
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
