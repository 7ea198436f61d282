"""The P/D import transport: loopback (the oracle) and NIXL between two processes.

Every NIXL test runs a real prefiller process on localhost over UCX; NIXL missing is a
failure, never a skip (``.ci/run`` and ``bootstrap.sh`` install ``nixl-cu12``). After
each test: staging slots back, NIXL registrations dropped, prefiller processes reaped.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hisparse.transport import (
    Announcement,
    AnnouncementRefused,
    ChunkState,
    ImportFailed,
    ImportRequest,
    LoopbackPrefiller,
    LoopbackTransport,
    StagingConfigError,
    StagingExhausted,
    StagingPool,
    TransportError,
)

ROW, BLOCK = 24, 8
PAGE = ROW * BLOCK
_names = itertools.count()


def _unique(prefix: str) -> str:
    return f"{prefix}{next(_names)}"


class Side:
    """A transport kind under test: makes prefillers and a decoder transport, then cleans up."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.prefillers: list[Any] = []
        self.transports: list[Any] = []

    def prefiller(self, name: str, pages: np.ndarray) -> Any:
        if self.kind == "loopback":
            peer: Any = LoopbackPrefiller(name, pages)
        else:
            from hisparse.transport.nixlpeer import NixlPrefiller

            peer = NixlPrefiller(name, pages)
        self.prefillers.append(peer)
        return peer

    def transport(self, pool: StagingPool, chunk_pages: int = 1, window: int = 1) -> Any:
        if self.kind == "loopback":
            tr: Any = LoopbackTransport(pool, chunk_pages, window)
        else:
            from hisparse.transport.nixl import NixlTransport

            tr = NixlTransport(pool, _unique("decoder"), chunk_pages, window)
        self.transports.append(tr)
        return tr

    def connect(self, tr: Any, peer: Any) -> None:
        if self.kind == "loopback":
            tr.connect(peer)
        else:
            tr.connect(peer.metadata, peer.name)

    def kill(self, peer: Any) -> None:
        peer.kill()

    def close(self) -> None:
        for tr in self.transports:
            assert not tr.live or all(h.ended for h in tr.live.values())
            if self.kind == "nixl":
                tr.close()
                assert tr.registrations == 0 and tr.xfers == 0 and not tr.remotes
        for peer in self.prefillers:
            if self.kind == "nixl":
                if not peer.reaped:
                    peer.stop()
                assert peer.reaped
                assert peer.process.exitcode is not None


@pytest.fixture(params=["loopback", "nixl"])
def side(request: pytest.FixtureRequest) -> Iterator[Side]:
    if request.param == "nixl":
        request.getfixturevalue("nixl_available")
    s = Side(request.param)
    yield s
    s.close()


def _pages(seed: int, request: ImportRequest) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (request.num_pages, request.page_bytes), dtype=np.uint8)


def _expected(pages: np.ndarray, request: ImportRequest) -> np.ndarray:
    """What the leased slots must hold: the valid rows, zero after the final token."""
    flat = pages.reshape(-1).copy()
    flat[request.num_tokens * request.row_bytes :] = 0
    return flat.reshape(pages.shape)


def _landed(pool: StagingPool, leases: list[Any]) -> np.ndarray:
    return np.stack([pool.view(ls.slot) for ls in leases])


def _import(side: Side, num_tokens: int, seed: int, chunk_pages: int = 2,
            window: int = 2) -> tuple[np.ndarray, np.ndarray]:
    req = ImportRequest("r", num_tokens, ROW, BLOCK, _unique("prefiller"))
    pages = _pages(seed, req)
    pool = StagingPool(8 * PAGE, 8, PAGE)
    peer = side.prefiller(req.prefiller, pages)
    tr = side.transport(pool, chunk_pages, window)
    side.connect(tr, peer)
    leases = pool.lease("r", req.num_pages)
    handle = tr.wait(tr.begin(req, peer.announce("r", num_tokens, ROW, BLOCK), leases))
    assert handle.error is None and handle.done
    got = _landed(pool, leases).copy()
    tr.finish(handle)
    pool.release(leases)
    assert pool.in_use == 0 and not tr.live
    return got, _expected(pages, req)


# -- staging pool ---------------------------------------------------------------------


def test_staging_config_that_cannot_hold_a_page_says_what_to_raise() -> None:
    with pytest.raises(StagingConfigError, match=rf"at least {4 * PAGE}.*at most 3"):
        StagingPool(4 * PAGE - 1, 4, PAGE)
    with pytest.raises(StagingConfigError, match="at least 1 slot"):
        StagingPool(PAGE, 0, PAGE)


def test_staging_exhaustion_is_a_refusal_that_changes_nothing_and_release_returns() -> None:
    pool = StagingPool(3 * PAGE, 3, PAGE)
    a = pool.lease("a", 2)
    pool.view(a[0].slot)[:] = 7
    before = pool.buffer.copy()
    with pytest.raises(StagingExhausted, match="asked for 2 staging slots, 1 of 3"):
        pool.lease("b", 2)
    assert pool.in_use == 2 and pool.num_free == 1
    assert np.array_equal(pool.buffer, before)
    with pytest.raises(TransportError, match="not a live lease"):
        pool.release([a[0], dataclasses.replace(a[1], owner="b")])
    assert pool.in_use == 2  # the refused release returned neither lease
    pool.release(a)
    assert pool.in_use == 0 and pool.num_free == 3
    b = pool.lease("b", 3)
    assert not pool.view(b[0].slot).any()  # a lease hands out zeroed slots
    pool.release(b)
    assert pool.in_use == 0


# -- byte equality ----------------------------------------------------------------------


@pytest.mark.parametrize("num_tokens", [5 * BLOCK, 5 * BLOCK - 3, 1])
def test_import_lands_the_announced_bytes(side: Side, num_tokens: int) -> None:
    got, expected = _import(side, num_tokens, seed=num_tokens)
    assert np.array_equal(got, expected)
    if num_tokens % BLOCK:  # the final block is not full: the rest of its page stays zero
        tail = got[-1][(num_tokens % BLOCK) * ROW :]
        assert tail.size > 0 and not tail.any()


def test_nixl_and_loopback_land_equal_bytes(nixl_available: None) -> None:
    results = {}
    for kind in ("loopback", "nixl"):
        s = Side(kind)
        try:
            results[kind] = _import(s, 7 * BLOCK - 5, seed=11, chunk_pages=3, window=1)[0]
        finally:
            s.close()
    assert np.array_equal(results["loopback"], results["nixl"])
    assert results["nixl"].any()


def test_writes_land_only_in_the_slots_leased_for_the_request(side: Side) -> None:
    req = ImportRequest("r", 3 * BLOCK - 1, ROW, BLOCK, _unique("prefiller"))
    pages = _pages(3, req)
    pool = StagingPool(6 * PAGE, 6, PAGE)
    other = pool.lease("other", 2)  # slots 0 and 1 belong to another request
    for ls in other:
        pool.view(ls.slot)[:] = 0xAB
    leases = pool.lease("r", req.num_pages)
    peer = side.prefiller(req.prefiller, pages)
    tr = side.transport(pool)
    side.connect(tr, peer)
    outside = np.ones(pool.buffer.size, dtype=bool)
    for ls in leases:
        start = ls.slot * pool.slot_bytes
        outside[start : start + PAGE] = False
    before = pool.buffer[outside].copy()
    handle = tr.wait(tr.begin(req, peer.announce("r", req.num_tokens, ROW, BLOCK), leases))
    assert handle.done
    assert np.array_equal(pool.buffer[outside], before)
    assert np.array_equal(_landed(pool, leases), _expected(pages, req))
    tr.finish(handle)
    pool.release(leases + other)
    assert pool.in_use == 0


# -- refusals ---------------------------------------------------------------------------

Tamper = Callable[[Announcement, ImportRequest], tuple[Announcement, ImportRequest]]


def _swap_page(ann: Announcement, i: int, **changes: int) -> Announcement:
    pages = list(ann.pages)
    pages[i] = dataclasses.replace(pages[i], **changes)
    return dataclasses.replace(ann, pages=tuple(pages))


REFUSALS: dict[str, tuple[str, Tamper]] = {
    "another agent": ("agent", lambda a, r: (dataclasses.replace(a, agent="intruder"), r)),
    "other row bytes": ("geometry", lambda a, r: (dataclasses.replace(a, row_bytes=ROW * 2), r)),
    "other block size": ("geometry", lambda a, r: (dataclasses.replace(a, block_size=BLOCK // 2), r)),
    "more pages than the request": (
        "pages", lambda a, r: (a, dataclasses.replace(r, num_tokens=BLOCK))),
    "more tokens than the request": (
        "pages", lambda a, r: (dataclasses.replace(a, num_tokens=r.num_tokens + 1), r)),
    "another request": ("request", lambda a, r: (dataclasses.replace(a, req_id="x"), r)),
    "a page of another size": ("descriptor", lambda a, r: (_swap_page(a, 1, nbytes=PAGE * 2), r)),
    "pages out of order": ("descriptor", lambda a, r: (_swap_page(a, 0, page=2), r)),
    "an address outside the prefiller's memory": (
        "descriptor", lambda a, r: (_swap_page(a, 2, addr=a.pages[2].addr + (1 << 40)), r)),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_bad_announcement_is_refused_and_changes_nothing(side: Side, case: str) -> None:
    reason, tamper = REFUSALS[case]
    req = ImportRequest("r", 3 * BLOCK, ROW, BLOCK, _unique("prefiller"))
    pool = StagingPool(4 * PAGE, 4, PAGE)
    peer = side.prefiller(req.prefiller, _pages(5, req))
    tr = side.transport(pool)
    side.connect(tr, peer)
    leases = pool.lease("r", req.num_pages)
    ann, asked = tamper(peer.announce("r", req.num_tokens, ROW, BLOCK), req)
    with pytest.raises(AnnouncementRefused) as info:
        tr.begin(asked, ann, leases)
    assert info.value.reason == reason
    assert not tr.live and pool.in_use == len(leases)
    assert not pool.buffer.any()  # no READ landed anywhere
    # the same transport still imports the honest announcement
    handle = tr.wait(tr.begin(req, peer.announce("r", req.num_tokens, ROW, BLOCK), leases))
    assert handle.done
    tr.finish(handle)
    pool.release(leases)


def test_leases_of_another_request_are_refused(side: Side) -> None:
    req = ImportRequest("r", 2 * BLOCK, ROW, BLOCK, _unique("prefiller"))
    pool = StagingPool(4 * PAGE, 4, PAGE)
    peer = side.prefiller(req.prefiller, _pages(6, req))
    tr = side.transport(pool)
    side.connect(tr, peer)
    theirs = pool.lease("other", 2)
    mine = pool.lease("r", 1)  # one lease for two pages
    ann = peer.announce("r", req.num_tokens, ROW, BLOCK)
    for leases in (theirs, mine):
        with pytest.raises(AnnouncementRefused) as info:
            tr.begin(req, ann, leases)
        assert info.value.reason == "destination"
    # no leases at all is too few too, not "no leases given" (base.py:152:none:4)
    with pytest.raises(AnnouncementRefused, match="0 leases for 2 pages"):
        tr.begin(req, ann, [])
    assert not tr.live and not pool.buffer.any() and pool.in_use == 3
    pool.release(theirs + mine)
    assert pool.in_use == 0


def test_nixl_metadata_of_another_agent_is_refused(nixl_available: None) -> None:
    s = Side("nixl")
    try:
        pool = StagingPool(PAGE, 1, PAGE)
        peer = s.prefiller(_unique("prefiller"), np.zeros((1, PAGE), dtype=np.uint8))
        tr = s.transport(pool)
        with pytest.raises(AnnouncementRefused) as info:
            tr.connect(peer.metadata, "the-configured-one")
        assert info.value.reason == "agent" and not tr.remotes
    finally:
        s.close()


# -- failures ---------------------------------------------------------------------------


def test_killed_prefiller_fails_its_import_and_others_go_on(side: Side) -> None:
    req_a = ImportRequest("a", 4 * BLOCK, ROW, BLOCK, _unique("prefiller"))
    req_b = ImportRequest("b", 3 * BLOCK - 2, ROW, BLOCK, _unique("prefiller"))
    pages_b = _pages(8, req_b)
    pool = StagingPool(8 * PAGE, 8, PAGE)
    peer_a = side.prefiller(req_a.prefiller, _pages(7, req_a))
    peer_b = side.prefiller(req_b.prefiller, pages_b)
    tr = side.transport(pool, chunk_pages=1, window=1)
    side.connect(tr, peer_a)
    side.connect(tr, peer_b)
    leases_a = pool.lease("a", req_a.num_pages)
    leases_b = pool.lease("b", req_b.num_pages)
    ha = tr.begin(req_a, peer_a.announce("a", req_a.num_tokens, ROW, BLOCK), leases_a)
    hb = tr.begin(req_b, peer_b.announce("b", req_b.num_tokens, ROW, BLOCK), leases_b)
    while ha.states[0] is not ChunkState.DONE:  # chunk 0 landed; at most chunk 1 posted
        tr.poll(ha)
    side.kill(peer_a)
    tr.wait(ha)
    tr.wait(hb)
    assert isinstance(ha.error, ImportFailed) and ha.error.req_id == "a"
    assert ha.error.chunk >= 1 and ha.states[-1] is ChunkState.FAILED
    assert hb.error is None and hb.done
    assert np.array_equal(_landed(pool, leases_b), _expected(pages_b, req_b))
    for h in (ha, hb):
        tr.finish(h)
    pool.release(leases_a + leases_b)
    assert pool.in_use == 0 and not tr.live


# -- the benchmark runs (its figures are not asserted) ------------------------------------


def test_bench_nixl_runs_and_checks_its_bytes(nixl_available: None, tmp_path: Path) -> None:
    from hisparse.cli import main

    out = tmp_path / "nixl.json"
    assert main(["bench", "nixl", "--mib", "1", "--page-kib", "16", "--chunk-pages", "8",
                 "--reps", "1", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["bytes"] == 1 << 20 and doc["pages"] == 64
    assert doc["nixl_GBps"] > 0 and doc["memcpy_GBps"] > 0


def test_a_poll_posts_at_most_window_chunks() -> None:
    req = ImportRequest("r", 3 * BLOCK, ROW, BLOCK, "p")
    pool = StagingPool(3 * PAGE, 3, PAGE)
    tr = LoopbackTransport(pool, chunk_pages=1, window=1)
    peer = LoopbackPrefiller("p", _pages(9, req))
    tr.connect(peer)
    leases = pool.lease("r", 3)
    handle = tr.begin(req, peer.announce("r", req.num_tokens, ROW, BLOCK), leases)
    pending = ChunkState.PENDING
    assert tr.poll(handle) == [ChunkState.DONE, pending, pending]
    assert tr.poll(handle) == [ChunkState.DONE, ChunkState.DONE, pending]
    peer.kill()
    assert tr.poll(handle) == [ChunkState.DONE, ChunkState.DONE, ChunkState.FAILED]
    assert handle.error is not None and handle.error.chunk == 2
    assert np.array_equal(_landed(pool, leases)[:2], _pages(9, req)[:2])
    assert not _landed(pool, leases)[2].any()  # the failed chunk wrote nothing
    tr.finish(handle)
    pool.release(leases)
    assert pool.in_use == 0 and not tr.live


def test_bench_nixl_without_nixl_exits_2_with_one_line(
    nixl_available: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import hisparse.transport.nixl as decoder_side
    from hisparse.cli import main

    def missing() -> object:
        raise TransportError("NIXL is not importable (test): pip install --no-deps nixl-cu12")

    monkeypatch.setattr(decoder_side, "load_nixl", missing)
    assert main(["bench", "nixl", "--mib", "1", "--reps", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("hisparse: ") and "pip install --no-deps nixl-cu12" in err[-1]
    assert "Traceback" not in "\n".join(err)


def _sub_announcement(ann: Announcement, req: ImportRequest, first: int) -> Announcement:
    """Pages ``first..`` of a prefiller's holding, announced as ``req`` (renumbered from 0)."""
    pages = tuple(dataclasses.replace(d, page=i)
                  for i, d in enumerate(ann.pages[first : first + req.num_pages]))
    return dataclasses.replace(ann, req_id=req.req_id, num_tokens=req.num_tokens, pages=pages)


def test_random_imports_agree_with_the_loopback_oracle(nixl_available: None) -> None:
    """Random lengths (aligned or not), offsets, chunking and windows: NIXL == loopback."""
    rng = np.random.default_rng(2026)
    held = rng.integers(0, 256, (12, PAGE), dtype=np.uint8)
    nixl_side, loop_side = Side("nixl"), Side("loopback")
    try:
        pools = {k: StagingPool(12 * PAGE, 12, PAGE) for k in ("nixl", "loopback")}
        peers = {s.kind: s.prefiller("holder", held) for s in (nixl_side, loop_side)}
        trs: dict[str, Any] = {}
        for s in (nixl_side, loop_side):
            trs[s.kind] = s.transport(pools[s.kind], int(rng.integers(1, 4)),
                                      int(rng.integers(1, 4)))
            s.connect(trs[s.kind], peers[s.kind])
        for n in range(12):
            num_tokens = int(rng.integers(1, 6 * BLOCK))
            req = ImportRequest(f"r{n}", num_tokens, ROW, BLOCK, "holder")
            first = int(rng.integers(0, 12 - req.num_pages + 1))
            landed = {}
            for kind, tr in trs.items():
                pool = pools[kind]
                pool.view(0)[:] = 0xEE  # a dirty slot is zeroed when leased
                leases = pool.lease(req.req_id, req.num_pages)
                ann = _sub_announcement(peers[kind].announce("x", 1, ROW, BLOCK), req, first)
                handle = tr.wait(tr.begin(req, ann, leases))
                assert handle.done and handle.error is None
                landed[kind] = _landed(pool, leases).copy()
                tr.finish(handle)
                pool.release(leases)
            assert np.array_equal(landed["nixl"], landed["loopback"])
            assert np.array_equal(
                landed["nixl"], _expected(held[first : first + req.num_pages], req))
        assert all(p.in_use == 0 for p in pools.values())
    finally:
        nixl_side.close()
        loop_side.close()


class _ErrOnce:
    """Wraps a NIXL agent: the first READ posted for one request reports ``ERR``."""

    def __init__(self, agent: Any, bad: set[int]) -> None:
        self._agent = agent
        self._bad = bad

    def transfer(self, handle: Any, notif_msg: bytes = b"") -> str:
        if id(handle) in self._bad:
            return "ERR"
        return str(self._agent.transfer(handle, notif_msg))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._agent, name)


def test_nixl_err_state_fails_that_import_only(nixl_available: None) -> None:
    s = Side("nixl")
    try:
        req_a = ImportRequest("a", 2 * BLOCK, ROW, BLOCK, _unique("prefiller"))
        req_b = ImportRequest("b", 2 * BLOCK - 1, ROW, BLOCK, req_a.prefiller)
        pages = _pages(12, req_a)
        pool = StagingPool(4 * PAGE, 4, PAGE)
        peer = s.prefiller(req_a.prefiller, pages)
        tr = s.transport(pool, chunk_pages=1, window=2)
        s.connect(tr, peer)
        la, lb = pool.lease("a", 2), pool.lease("b", 2)
        ha = tr.begin(req_a, peer.announce("a", req_a.num_tokens, ROW, BLOCK), la)
        hb = tr.begin(req_b, peer.announce("b", req_b.num_tokens, ROW, BLOCK), lb)
        real = tr.agent
        tr.agent = _ErrOnce(real, {id(ha.tokens[1])})
        tr.wait(ha)
        tr.wait(hb)
        tr.agent = real
        assert isinstance(ha.error, ImportFailed) and ha.error.chunk == 1
        assert "ERR" in str(ha.error) and ha.states[1] is ChunkState.FAILED
        assert hb.done and np.array_equal(_landed(pool, lb), _expected(pages, req_b))
        for h in (ha, hb):
            tr.finish(h)
        pool.release(la + lb)
        assert pool.in_use == 0 and tr.xfers == 0
    finally:
        s.close()


# -- destinations: staging leases and registered blocks ------------------------------------


def test_block_destinations_are_checked_before_anything_is_held(side: Side) -> None:
    """A device-target page lands only in registered block memory claimed by no other
    page, for its own request; every refusal holds nothing and writes nothing."""
    from hisparse.transport.base import BlockDest

    req = ImportRequest("r", 2 * BLOCK - 3, ROW, BLOCK, _unique("prefiller"))
    pages = _pages(21, req)
    pool = StagingPool(2 * PAGE, 2, PAGE)
    peer = side.prefiller(req.prefiller, pages)
    tr = side.transport(pool)
    side.connect(tr, peer)
    blocks = np.full((4, PAGE), 0xCC, np.uint8)  # four blocks of device memory
    unregistered = np.zeros((1, PAGE), np.uint8)
    tr.register(blocks)
    base = int(blocks.ctypes.data)
    ann = peer.announce("r", req.num_tokens, ROW, BLOCK)
    handle = tr.begin(req, ann)
    bad = {
        "another request's": [BlockDest("other", (base,))],
        "unregistered": [BlockDest("r", (int(unregistered.ctypes.data),))],
        "past the region": [BlockDest("r", (base + 3 * PAGE + 1,))],
        "two layers for one": [BlockDest("r", (base, base + PAGE))],
        # one destination per page of the chunk, no more, no fewer (base.py:197:raise:15
        # let the count through: a ValueError of zip, not a refusal)
        "two for one page": [BlockDest("r", (base,)), BlockDest("r", (base + PAGE,))],
        "none for one page": [],
    }
    for why, dests in bad.items():
        with pytest.raises(AnnouncementRefused) as info:
            tr.bind(handle, 0, dests)
        assert info.value.reason == "destination", why
        assert not handle.bound(0)
    tr.bind(handle, 0, [BlockDest("r", (base + 2 * PAGE,))])
    # a bound or absent chunk is refused before its destinations are read (base.py's
    # 188:reorder:4 read them first: an IndexError, or the claim's message)
    for chunk, dest in ((0, base + 2 * PAGE), (0, base + 3 * PAGE), (2, base + 3 * PAGE)):
        with pytest.raises(AnnouncementRefused, match=rf"chunk {chunk} is bound or absent"):
            tr.bind(handle, chunk, [BlockDest("r", (dest,))])
    with pytest.raises(AnnouncementRefused):  # claimed by page 0 already
        tr.bind(handle, 1, [BlockDest("r", (base + 2 * PAGE,))])
    tr.bind(handle, 1, [BlockDest("r", (base,))])
    tr.wait(handle)
    assert handle.done
    assert np.array_equal(blocks[2], pages[0])
    want = pages[1].copy()
    want[(BLOCK - 3) * ROW:] = 0xCC  # past the valid rows: as it was (the runner zeroes it)
    assert np.array_equal(blocks[0], want)
    assert (blocks[[1, 3]] == 0xCC).all() and not pool.buffer.any()
    tr.finish(handle)  # drops the claims: the blocks can be claimed again
    h2 = tr.begin(req, ann)
    tr.bind(h2, 0, [BlockDest("r", (base + 2 * PAGE,))])
    tr.abort(h2)
    tr.wait(h2)
    tr.finish(h2)
    assert not tr.live


def test_one_staging_slot_for_two_pages_of_a_chunk_is_refused(side: Side) -> None:
    # each page lands in its own slot (base.py:211:call:12 let a chunk's second page reuse
    # the first one's)
    req = ImportRequest("r", 2 * BLOCK, ROW, BLOCK, _unique("prefiller"))
    pool = StagingPool(4 * PAGE, 4, PAGE)
    peer = side.prefiller(req.prefiller, _pages(6, req))
    tr = side.transport(pool, chunk_pages=2)
    side.connect(tr, peer)
    handle = tr.begin(req, peer.announce("r", req.num_tokens, ROW, BLOCK))
    one = pool.lease("r", 1)
    with pytest.raises(AnnouncementRefused, match="is not a live lease"):
        tr.bind(handle, 0, one * 2)
    assert not handle.bound(0)
    two = pool.lease("r", 2)
    tr.bind(handle, 0, two)
    tr.wait(handle)
    assert handle.done
    tr.finish(handle)
    pool.release(one + two)
    assert pool.in_use == 0
