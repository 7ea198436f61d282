"""Rule: the decoder's NIXL transport (``hisparse/transport/nixl.py``) fences the staging
pool before every READ it posts; an ``ERR`` state, at the post or at a later check, fails
that import with the message "NIXL reported ERR" at that chunk; a closed transport
refuses a new import as closed (not as an unknown agent); and metadata naming another
agent is refused without dropping a prefiller already connected under that name, while a
name not connected is dropped again.

Over a real prefiller process and a real NIXL agent (NIXL missing is a failure, as in
``tests/test_transport.py``), the agent wrapped to record or change what it answers.

From the guard survivors of the first mutation run of the file (docs/mutation-survivors.md,
"Files run for the first time").
"""

from __future__ import annotations

import itertools
import types
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from hisparse.transport import (
    AnnouncementRefused,
    ChunkState,
    ImportFailed,
    ImportRequest,
    StagingPool,
    TransportError,
)

ROW, BLOCK = 24, 8
PAGE = ROW * BLOCK
_names = itertools.count()


def _unique(prefix: str) -> str:
    return f"{prefix}-rule{next(_names)}"


class Recording:
    """Wraps a NIXL agent: logs posts, checks and remote-agent removals; a handle in
    ``err_post`` answers ``ERR`` when posted, one in ``err_check`` is posted (its real
    state hidden behind ``PROC``) and answers ``ERR`` when checked."""

    def __init__(self, agent: Any, log: list[str]) -> None:
        self._agent = agent
        self.log = log
        self.err_post: set[int] = set()
        self.err_check: set[int] = set()
        self.raise_check: set[int] = set()

    def transfer(self, handle: Any, notif_msg: bytes = b"") -> str:
        self.log.append("transfer")
        if id(handle) in self.err_post:
            return "ERR"
        state = str(self._agent.transfer(handle, notif_msg))
        return "PROC" if id(handle) in self.err_check | self.raise_check else state

    def check_xfer_state(self, handle: Any) -> str:
        if id(handle) in self.err_check:
            return "ERR"
        if id(handle) in self.raise_check:
            raise RuntimeError("the bindings' own error")
        return str(self._agent.check_xfer_state(handle))

    def release_xfer_handle(self, handle: Any) -> Any:
        self.log.append("release")
        return self._agent.release_xfer_handle(handle)

    def register_memory(self, *args: Any) -> Any:
        self.log.append("register")
        return self._agent.register_memory(*args)

    def deregister_memory(self, reg: Any) -> Any:
        self.log.append("deregister")
        return self._agent.deregister_memory(reg)

    def remove_remote_agent(self, name: str) -> Any:
        self.log.append(f"remove {name}")
        return self._agent.remove_remote_agent(name)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._agent, name)


class FencedPool(StagingPool):
    """A host staging pool that logs each fence (host memory has nothing to wait for)."""

    def __init__(self, capacity_bytes: int, slots: int, page_bytes: int, log: list[str]) -> None:
        super().__init__(capacity_bytes, slots, page_bytes)
        self.log = log

    def fence(self) -> None:
        self.log.append("fence")


class Rig:
    """One decoder transport over a fenced pool, its agent recorded, and its prefillers."""

    def __init__(self, chunk_pages: int = 1, window: int = 1) -> None:
        from hisparse.transport.nixl import NixlTransport

        self.log: list[str] = []
        self.pool = FencedPool(6 * PAGE, 6, PAGE, self.log)
        self.tr = NixlTransport(self.pool, _unique("decoder"), chunk_pages, window)
        self.agent = Recording(self.tr.agent, self.log)
        self.tr.agent = self.agent
        self.peers: list[Any] = []

    def prefiller(self, pages: np.ndarray) -> Any:
        from hisparse.transport.nixlpeer import NixlPrefiller

        peer = NixlPrefiller(_unique("prefiller"), pages)
        self.peers.append(peer)
        return peer

    def close(self) -> None:
        self.tr.agent = self.agent._agent
        self.tr.close()
        for p in self.peers:
            if not p.reaped:
                p.stop()


@pytest.fixture
def rig(nixl_available: None) -> Iterator[Rig]:
    r = Rig()
    yield r
    r.close()


def _pages(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, PAGE), dtype=np.uint8)


def test_the_pool_is_fenced_before_every_read_posted(rig: Rig) -> None:
    pages = _pages(3, 1)
    peer = rig.prefiller(pages)
    rig.tr.connect(peer.metadata, peer.name)
    req = ImportRequest("r", 3 * BLOCK, ROW, BLOCK, peer.name)
    leases = rig.pool.lease("r", 3)
    rig.log.clear()
    h = rig.tr.wait(rig.tr.begin(req, peer.announce("r", req.num_tokens, ROW, BLOCK), leases))
    assert h.error is None and h.done
    assert rig.log == ["fence", "transfer"] * 3  # one chunk of one page at a time
    assert np.array_equal(np.stack([rig.pool.view(ls.slot) for ls in leases]), pages)
    rig.log.clear()
    rig.tr.finish(h)
    assert rig.log == ["release"] * 3 and rig.tr.xfers == 0  # each READ's handle, to NIXL
    rig.pool.release(leases)


@pytest.mark.parametrize("where", ["post", "check"])
def test_an_err_state_fails_that_chunk_with_its_message(rig: Rig, where: str) -> None:
    peer = rig.prefiller(_pages(2, 2))
    rig.tr.connect(peer.metadata, peer.name)
    req = ImportRequest("a", 2 * BLOCK, ROW, BLOCK, peer.name)
    leases = rig.pool.lease("a", 2)
    h = rig.tr.begin(req, peer.announce("a", req.num_tokens, ROW, BLOCK), leases)
    (rig.agent.err_post if where == "post" else rig.agent.err_check).add(id(h.tokens[0]))
    rig.tr.wait(h)
    assert isinstance(h.error, ImportFailed)
    assert str(h.error) == "import of request 'a' failed at chunk 0: NIXL reported ERR"
    assert (h.error.chunk, h.error.reason) == (0, "transport")
    assert h.states[0] is ChunkState.FAILED
    rig.tr.finish(h)
    rig.pool.release(leases)
    assert rig.tr.xfers == 0


def test_a_check_nixl_refuses_fails_that_chunk_with_its_message(rig: Rig) -> None:
    peer = rig.prefiller(_pages(2, 11))
    rig.tr.connect(peer.metadata, peer.name)
    req = ImportRequest("a", 2 * BLOCK, ROW, BLOCK, peer.name)
    leases = rig.pool.lease("a", 2)
    h = rig.tr.begin(req, peer.announce("a", req.num_tokens, ROW, BLOCK), leases)
    rig.agent.raise_check.add(id(h.tokens[0]))
    rig.tr.wait(h)
    assert isinstance(h.error, ImportFailed)
    assert str(h.error) == ("import of request 'a' failed at chunk 0: "
                            "NIXL: the bindings' own error")
    assert h.states[0] is ChunkState.FAILED
    rig.tr.finish(h)
    rig.pool.release(leases)


def test_a_closed_transport_refuses_an_import_as_closed(rig: Rig) -> None:
    peer = rig.prefiller(_pages(1, 3))
    rig.tr.connect(peer.metadata, peer.name)
    ann = peer.announce("r", BLOCK, ROW, BLOCK)
    rig.tr.agent = rig.agent._agent
    rig.tr.close()
    req = ImportRequest("r", BLOCK, ROW, BLOCK, peer.name)
    with pytest.raises(TransportError) as err:
        rig.tr.begin(req, ann, rig.pool.lease("r", 1))
    assert type(err.value) is TransportError  # not an AnnouncementRefused: closed, not unknown
    assert str(err.value) == "the NIXL transport is closed"
    assert not rig.tr.live and rig.tr.xfers == 0


def test_metadata_of_another_agent_never_drops_a_connected_prefiller(rig: Rig) -> None:
    a, b = rig.prefiller(_pages(1, 4)), rig.prefiller(_pages(1, 5))
    rig.tr.connect(a.metadata, a.name)
    rig.log.clear()
    # a's metadata again, where b was expected: refused; a stays connected and loaded
    with pytest.raises(AnnouncementRefused) as err:
        rig.tr.connect(a.metadata, b.name)
    assert err.value.reason == "agent"
    assert rig.log == [] and rig.tr.remotes == {a.name}
    # b's metadata where a third was expected: refused, and b (never connected) dropped
    with pytest.raises(AnnouncementRefused):
        rig.tr.connect(b.metadata, "someone-else")
    assert rig.log == [f"remove {b.name}"] and rig.tr.remotes == {a.name}
    # a still imports
    req = ImportRequest("r", BLOCK, ROW, BLOCK, a.name)
    leases = rig.pool.lease("r", 1)
    h = rig.tr.wait(rig.tr.begin(req, a.announce("r", BLOCK, ROW, BLOCK), leases))
    assert h.error is None and h.done
    rig.tr.finish(h)
    rig.pool.release(leases)


class _SaysDevice:
    """Host bytes that present themselves as device memory of GPU 0: what ``register``
    reads of a CuPy array (dtype, flags, size, ``__cuda_array_interface__``, device)."""

    def __init__(self, host: np.ndarray) -> None:
        self.host = host
        self.dtype, self.flags, self.nbytes = host.dtype, host.flags, host.nbytes
        self.device = types.SimpleNamespace(id=0)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {"data": (int(self.host.ctypes.data), False), "shape": self.host.shape,
                "typestr": "|u1", "version": 3}


def test_registrations_are_counted_and_the_options_kept(rig: Rig) -> None:
    from hisparse.transport.nixl import NixlTransport

    assert rig.tr.registrations == 1  # the staging buffer
    blocks = np.zeros((2, PAGE), np.uint8)
    rig.log.clear()
    rig.tr.register(blocks)
    rig.tr.register(blocks)  # registered once: NIXL is asked once (transport/base.py's
    assert rig.tr.registrations == 2  # 111:reorder:1 asked again, leaking the first)
    assert rig.log == ["register"]
    rig.log.clear()
    rig.tr.deregister_all()
    assert rig.tr.registrations == 1 and rig.log == ["deregister"]  # NIXL lets it go too
    other = NixlTransport(StagingPool(2 * PAGE, 2, PAGE), _unique("decoder"), chunk_pages=2,
                          window=3)
    try:
        assert (other.chunk_pages, other.window) == (2, 3)
    finally:
        other.close()
    assert other.registrations == 0


def test_a_closed_transport_refuses_block_memory(rig: Rig) -> None:
    rig.tr.agent = rig.agent._agent
    rig.tr.close()
    with pytest.raises(TransportError) as err:
        rig.tr.register(np.zeros((2, PAGE), np.uint8))
    assert str(err.value) == "the NIXL transport is closed"
    assert rig.tr.registrations == 0 and not rig.tr.regions


def test_device_block_memory_beside_a_host_pool_is_refused_unregistered(rig: Rig) -> None:
    buf = _SaysDevice(np.zeros((2, PAGE), np.uint8))
    rig.log.clear()
    with pytest.raises(TransportError) as err:
        rig.tr.register(buf)
    assert str(err.value) == (
        "block memory is VRAM but the staging pool is DRAM: a READ's local descriptors "
        "share one memory type (use the executor's staging pool)")
    assert rig.log == [] and rig.tr.registrations == 1 and not rig.tr.regions


def test_unreadable_metadata_is_refused_as_such(rig: Rig) -> None:
    with pytest.raises(AnnouncementRefused) as err:
        rig.tr.connect(b"not an agent's metadata", "prefiller")
    assert err.value.reason == "agent"
    assert str(err.value).startswith("announcement refused (agent): unreadable agent metadata: ")
    assert not rig.tr.remotes


def test_an_import_from_an_agent_not_connected_is_refused_as_such(rig: Rig) -> None:
    peer = rig.prefiller(_pages(1, 9))  # never connected
    req = ImportRequest("r", BLOCK, ROW, BLOCK, peer.name)
    leases = rig.pool.lease("r", 1)
    with pytest.raises(AnnouncementRefused) as err:
        rig.tr.begin(req, peer.announce("r", BLOCK, ROW, BLOCK), leases)
    assert err.value.reason == "agent"
    assert str(err.value) == f"announcement refused (agent): {peer.name!r} is not connected"
    assert not rig.tr.live and rig.tr.xfers == 0
    rig.pool.release(leases)


def test_close_finishes_the_imports_still_held(rig: Rig) -> None:
    """An ended import not yet finished: ``close`` finishes it (its transfer handles
    released) before it drops the agents and registrations."""
    peer = rig.prefiller(_pages(2, 10))
    rig.tr.connect(peer.metadata, peer.name)
    req = ImportRequest("r", 2 * BLOCK, ROW, BLOCK, peer.name)
    leases = rig.pool.lease("r", 2)
    h = rig.tr.wait(rig.tr.begin(req, peer.announce("r", req.num_tokens, ROW, BLOCK), leases))
    assert h.done and rig.tr.live and rig.tr.xfers > 0
    rig.log.clear()
    rig.tr.close()
    assert not rig.tr.live and rig.tr.xfers == 0 and rig.tr.registrations == 0
    # its two READ handles, the agent, then the staging buffer
    assert rig.log == ["release", "release", f"remove {peer.name}", "deregister"]
    rig.pool.release(leases)


# -- the prefiller process (hisparse/transport/nixlpeer.py) ---------------------------------


@pytest.mark.parametrize("pages", [np.zeros((2, 2, PAGE), np.uint8), np.zeros(PAGE, np.uint8),
                                   np.zeros((2, PAGE), np.int16)])
def test_a_prefiller_takes_one_uint8_row_per_page(nixl_available: None, pages: np.ndarray) -> None:
    from hisparse.transport.nixlpeer import NixlPrefiller

    with pytest.raises(ValueError) as err:
        NixlPrefiller(_unique("prefiller"), pages)
    assert str(err.value) == "pages must be a 2-D uint8 array, one row per page"


def test_pages_put_land_in_free_rows_and_are_read_back(rig: Rig) -> None:
    """``put`` places a request's pages in rows of the buffer registered at start (the
    published metadata stays valid): an import of the announcement reads those bytes."""
    peer = rig.prefiller(np.zeros((4, PAGE), np.uint8))
    rig.tr.connect(peer.metadata, peer.name)
    pages = _pages(2, 6)
    peer.put("r", pages)
    assert len(peer.arena.held["r"]) == 2
    req = ImportRequest("r", 2 * BLOCK, ROW, BLOCK, peer.name)
    leases = rig.pool.lease("r", 2)
    h = rig.tr.wait(rig.tr.begin(req, peer.announce("r", req.num_tokens, ROW, BLOCK), leases))
    assert h.error is None and h.done
    assert np.array_equal(np.stack([rig.pool.view(ls.slot) for ls in leases]), pages)
    rig.tr.finish(h)
    rig.pool.release(leases)


def test_a_refused_put_holds_no_rows(rig: Rig) -> None:
    peer = rig.prefiller(np.zeros((4, PAGE), np.uint8))
    with pytest.raises(ValueError) as err:
        peer.put("r", np.zeros((2, PAGE + 1), np.uint8))
    assert str(err.value) == f"pages of ({PAGE + 1},) bytes, rows hold {PAGE}"
    with pytest.raises(ValueError):
        peer.put("r", np.zeros((2, 2, PAGE), np.uint8))
    assert peer.arena.held == {}
    peer.kill()  # the process is gone: the put fails and gives its rows back
    with pytest.raises(TransportError) as gone:
        peer.put("r", np.zeros((2, PAGE), np.uint8))
    assert str(gone.value) == f"prefiller {peer.name!r} is gone"
    assert peer.arena.held == {}


def test_a_prefiller_that_dies_starting_up_is_a_transport_error(
    nixl_available: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The child's agent cannot start (no NIXL plugins where it looks): it dies before it
    reads its pages, and the parent, whose pipe is reset, says so as a TransportError."""
    from hisparse.transport.nixlpeer import NixlPrefiller

    monkeypatch.setenv("NIXL_PLUGIN_DIR", "/nonexistent")  # (the spawned child's only)
    name = _unique("prefiller")
    with pytest.raises(TransportError) as err:
        NixlPrefiller(name, np.zeros((2, PAGE), np.uint8))
    assert str(err.value) == f"prefiller {name!r} died starting up"
    assert isinstance(err.value.__cause__, (EOFError, OSError))


def test_a_dropped_request_gives_its_rows_back(rig: Rig) -> None:
    peer = rig.prefiller(np.zeros((4, PAGE), np.uint8))
    peer.put("r", _pages(3, 7))
    peer.drop("r")
    assert peer.arena.held == {}
    peer.put("s", _pages(4, 8))  # every row is free again
    assert sorted(peer.arena.held["s"]) == [0, 1, 2, 3]


def test_without_nixl_the_transport_error_says_what_to_install(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # (nixlpeer.py:34:raise:0: NIXL is installed wherever the suite runs)
    import sys

    from hisparse.transport.nixlpeer import load_nixl

    monkeypatch.setitem(sys.modules, "nixl_cu12", None)  # import nixl_cu12: ImportError
    with pytest.raises(TransportError, match=r"^NIXL is not importable \(.*\): "
                                             r"pip install --no-deps nixl-cu12==1\.5\.1$"):
        load_nixl()
