"""Rule: a transport's refusal changes nothing (``hisparse/transport/base.py``).

From the guard survivors of the second guard-phase run (docs/mutation-survivors.md):

- ``306:reorder:6`` (``del self.live[...]`` moved before the ``ended`` check of
  ``finish``): finishing an import with READs in flight raised ``TransportError`` but had
  already forgotten the import, so its READs went on writing leased slots the transport
  no longer tracked; here, at every point of an import whose READs stay in flight a
  while, ``finish`` before the end is refused with the import still live and its
  handle unchanged, and once it has ended it is forgotten;
- ``342:raise:5`` (``_register``'s ``raise NotImplementedError`` deleted): the bare
  ``Transport`` accepted block memory it can never READ into; here every hook of the
  bare class refuses, and ``register`` through it records no region.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

from hisparse.transport import LoopbackPrefiller, LoopbackTransport, StagingPool, TransportError
from hisparse.transport.base import ImportHandle, Transport
from hisparse.transport.geometry import ImportRequest

ROW, BLOCK, LAYERS = 16, 4, 1
PAGE = ROW * BLOCK * LAYERS


class SlowLoopback(LoopbackTransport):
    """Loopback whose READs land at their third check (each stays in flight a while)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.checks: dict[int, int] = {}

    def _post(self, handle: ImportHandle, chunk: int) -> bool:
        return False

    def _check(self, handle: ImportHandle, chunk: int) -> bool:
        self.checks[chunk] = self.checks.get(chunk, 0) + 1
        return self.checks[chunk] >= 3 and bool(super()._post(handle, chunk))


@pytest.mark.parametrize("abort", [False, True])
def test_finish_before_the_end_is_refused_with_the_import_still_live(abort: bool) -> None:
    pool = StagingPool(4 * PAGE, 4, PAGE)
    peer = LoopbackPrefiller("p", np.zeros((4, PAGE), np.uint8))
    peer.put("a", np.full((3, PAGE), 6, np.uint8))
    tr = SlowLoopback(pool, 1, 2)
    tr.connect(peer)
    req = ImportRequest("a", 3 * BLOCK, ROW, BLOCK, "p", LAYERS)
    leases = pool.lease("a", 3)
    h = tr.begin(req, peer.announce("a", 3 * BLOCK, ROW, BLOCK, LAYERS), leases)
    tr.poll(h)  # two READs posted, in flight
    if abort:
        tr.abort(h)  # failed, but its posted READs still write
    # block memory cannot go while an import may still write it (base.py:117:raise:9)
    blocks = np.zeros(PAGE, np.uint8)
    tr.register(blocks)
    with pytest.raises(TransportError, match=r"^block memory is still being written by an import$"):
        tr.deregister_all()
    assert list(tr.regions.values()) == [blocks]
    refusals = 0
    while not h.ended:
        before = copy.deepcopy((h.states, h.dests, h.error and str(h.error)))
        with pytest.raises(TransportError, match="has READs in flight"):
            tr.finish(h)
        refusals += 1
        assert tr.live == {"a": h}
        assert copy.deepcopy((h.states, h.dests, h.error and str(h.error))) == before
        tr.poll(h)
    assert refusals >= 2
    tr.finish(h)
    assert not tr.live
    tr.deregister_all()  # every import ended: the memory can go
    assert tr.regions == {}
    pool.release(leases)  # the caller's to return, once the import has ended
    assert pool.in_use == 0


HOOKS = ("_prepare", "_bind", "_post", "_check", "_drop", "_register", "_deregister")


def test_the_bare_transport_implements_no_hook_and_registers_nothing() -> None:
    tr = Transport(StagingPool(PAGE, 1, PAGE))
    args: dict[str, tuple[Any, ...]] = {"_bind": (None, 0, []), "_post": (None, 0),
                                        "_check": (None, 0)}
    for name in HOOKS:
        with pytest.raises(NotImplementedError):
            getattr(tr, name)(*args.get(name, (None,)))
    with pytest.raises(NotImplementedError):
        tr.register(np.zeros(PAGE, np.uint8))
    assert tr.regions == {}


@pytest.mark.parametrize(("chunk_pages", "window"), [(0, 1), (1, 0), (0, 0), (-1, 2)])
def test_a_transport_needs_a_positive_chunk_and_window(chunk_pages: int, window: int) -> None:
    # each is checked (transport/base.py:92:var:0 checked the window twice)
    with pytest.raises(ValueError, match=rf"^chunk pages and window must be positive: "
                                         rf"{chunk_pages}, {window}$"):
        Transport(StagingPool(PAGE, 1, PAGE), chunk_pages=chunk_pages, window=window)
    assert Transport(StagingPool(PAGE, 1, PAGE), chunk_pages=2, window=3).window == 3


def test_block_memory_must_be_a_non_empty_contiguous_byte_array() -> None:
    # one byte is memory, no byte is not (base.py:106:int:2 took the edge at 1)
    tr = LoopbackTransport(StagingPool(PAGE, 1, PAGE))
    for bad in (np.zeros(0, np.uint8), np.zeros(4, np.int32), np.zeros((4, 4), np.uint8)[:, 0]):
        with pytest.raises(TransportError, match=r"^block memory must be a non-empty "
                                                 r"contiguous uint8 array$"):
            tr.register(bad)
    assert tr.regions == {}
    one = np.zeros(1, np.uint8)
    tr.register(one)
    assert list(tr.regions.values()) == [one]


def test_an_abort_keeps_the_first_failure_and_leaves_a_done_import_done() -> None:
    """Abort fails a live import once: a second abort keeps the first reason, and an
    import already done stays done without an error (base.py:278:bool:6 failed both)."""
    pool = StagingPool(4 * PAGE, 4, PAGE)
    peer = LoopbackPrefiller("p", np.zeros((4, PAGE), np.uint8))
    peer.put("a", np.full((2, PAGE), 6, np.uint8))
    peer.put("b", np.full((2, PAGE), 7, np.uint8))
    tr = LoopbackTransport(pool, 1, 2)
    tr.connect(peer)
    live = tr.begin(ImportRequest("a", 2 * BLOCK, ROW, BLOCK, "p", LAYERS),
                    peer.announce("a", 2 * BLOCK, ROW, BLOCK, LAYERS), pool.lease("a", 2))
    tr.abort(live, "first")
    tr.abort(live, "second")
    assert live.error is not None and "first" in str(live.error) and "second" not in str(live.error)
    done = tr.wait(tr.begin(ImportRequest("b", 2 * BLOCK, ROW, BLOCK, "p", LAYERS),
                            peer.announce("b", 2 * BLOCK, ROW, BLOCK, LAYERS),
                            pool.lease("b", 2)))
    assert done.done and done.error is None
    tr.abort(done, "too late")
    assert done.done and done.error is None
