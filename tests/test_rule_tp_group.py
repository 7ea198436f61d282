"""Rule: the ranks' rendezvous moves bytes exactly: ``broadcast`` gives rank 0's bytes to
every rank, ``gather`` gives rank 0 every rank's bytes in rank order (an empty list
elsewhere), no collective leaves a byte unread in any pipe, and ``barrier`` lets no rank
through before every rank has entered it (``hisparse/tp/group.py``).

``PipeGroup`` runs over in-process pipes that refuse (rather than block on) a read with
nothing to read, so the ranks can be run one after another in the order the star
allows, and a rank that would wait shows as ``WouldBlock``; one test runs real pipes in
threads. ``TorchGroup`` runs over a stand-in ``torch.distributed`` (torch is not installed
here), one per rank, that follows torch's documented contract (``gather_object``'s list
only on the destination rank, sized to the group).

From the guard survivors of the third guard-phase run (docs/mutation-survivors.md): all
26 mutants of the file survived ``tests/test_tp.py`` without TLC (its one harness test is
``tlc``-marked): ``35:var:0``, ``35:var:1``, ``38:cmp:0``, ``38:int:0``, ``41:call:8``,
``46:cmp:1``, ``46:int:1``, ``48:call:0``, ``48:reorder:0``, ``52:call:1``, ``53:call:2``,
``53:int:3``, ``53:cmp:4``, ``62:var:2``, ``62:var:3``, ``62:call:3``, ``64:var:4``,
``64:var:5``, ``68:call:4``, ``73:cmp:2``, ``73:int:2``, ``74:call:5``, ``75:cmp:3``,
``78:call:6``, ``81:call:7`` (``75:none:0`` is argued equivalent).
"""

from __future__ import annotations

import sys
import threading
import types
from collections import deque
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hisparse.tp.group import PipeGroup, TorchGroup


class WouldBlock(Exception):
    """A read from an in-process pipe with nothing in it: the rank would wait here."""


class _End:
    """One end of an in-process duplex pipe: what it sends lands in its peer's inbox."""

    def __init__(self) -> None:
        self.inbox: deque[bytes] = deque()
        self.peer: _End | None = None

    def send_bytes(self, data: bytes) -> None:
        assert self.peer is not None
        self.peer.inbox.append(bytes(data))

    def recv_bytes(self) -> bytes:
        if not self.inbox:
            raise WouldBlock
        return self.inbox.popleft()


def _star(world: int) -> tuple[list[PipeGroup], list[_End]]:
    """One ``PipeGroup`` per rank over a star of in-process pipes; every end, for the
    check that nothing is left unread."""
    ends: list[_End] = []
    pipes: list[list[_End]] = [[] for _ in range(world)]
    for r in range(1, world):
        a, b = _End(), _End()
        a.peer, b.peer = b, a
        pipes[0].append(a)
        pipes[r].append(b)
        ends += [a, b]
    groups = [PipeGroup(r, world, cast(list[Connection], pipes[r])) for r in range(world)]
    return groups, ends


_OPS = st.one_of(
    st.tuples(st.just("broadcast"), st.binary(max_size=8)),
    st.tuples(st.just("gather"), st.lists(st.binary(max_size=8), min_size=4, max_size=4)),
)


@settings(max_examples=100, deadline=None)
@given(world=st.integers(1, 4), ops=st.lists(_OPS, max_size=6))
def test_pipe_group_collectives_move_exactly_the_bytes_they_name(
    world: int, ops: list[tuple[str, Any]]
) -> None:
    groups, ends = _star(world)
    assert [(g.rank, g.world) for g in groups] == [(r, world) for r in range(world)]
    for kind, data in ops:
        if kind == "broadcast":  # rank 0 sends first; the others then find its bytes
            got = [groups[0].broadcast(data)]
            got += [g.broadcast(None) for g in groups[1:]]
            assert got == [data] * world
        else:  # the others send first; rank 0 then reads each in rank order
            mine = data[:world]
            elsewhere = [g.gather(mine[g.rank]) for g in groups[1:]]
            assert elsewhere == [[]] * (world - 1)
            assert groups[0].gather(mine[0]) == mine
        assert not any(e.inbox for e in ends)  # nothing left unread, nothing sent twice


@pytest.mark.parametrize("world", [2, 3])
def test_no_rank_leaves_a_barrier_before_every_rank_entered(world: int) -> None:
    """Alone in the barrier, rank 0 waits for the others' bytes before sending anything;
    any other rank sends its one empty message and then waits for rank 0's."""
    groups, ends = _star(world)
    with pytest.raises(WouldBlock):
        groups[0].barrier()
    assert not any(e.inbox for e in ends)  # rank 0 sent nothing before the others came
    for r in range(1, world):
        groups, ends = _star(world)
        with pytest.raises(WouldBlock):
            groups[r].barrier()
        assert [list(e.inbox) for e in ends if e.inbox] == [[b""]]  # only its arrival


def test_barriers_and_collectives_over_real_pipes_in_threads() -> None:
    """Three ranks in three threads over ``multiprocessing`` pipes: two barriers, a
    broadcast and a gather end with the right answers on every rank and no bytes left.
    (The join's limit only catches a rank stuck forever; the correct code takes ms.)"""
    world = 3
    ends: list[Connection] = []
    pipes: list[list[Connection]] = [[] for _ in range(world)]
    for r in range(1, world):
        a, b = Pipe()
        pipes[0].append(a)
        pipes[r].append(b)
        ends += [a, b]
    results: dict[int, tuple[bytes, list[bytes]]] = {}
    errors: list[BaseException] = []

    def rank(r: int) -> None:
        try:
            g = PipeGroup(r, world, pipes[r])
            g.barrier()
            got = g.broadcast(b"plan" if r == 0 else None)
            gathered = g.gather(b"meta%d" % r)
            g.barrier()
            results[r] = (got, gathered)
        except BaseException as e:  # reported by the main thread
            errors.append(e)
            for c in pipes[r]:  # its peers then stop with EOFError instead of waiting
                c.close()

    threads = [threading.Thread(target=rank, args=(r,), daemon=True) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a rank is stuck in a collective"
    assert not errors, errors
    assert results == {0: (b"plan", [b"meta0", b"meta1", b"meta2"]),
                       1: (b"plan", []), 2: (b"plan", [])}
    assert not any(c.poll() for c in ends)
    for c in ends:
        c.close()


class _TorchWorld:
    """What the stand-in ranks share: the last broadcast and each rank's gathered object."""

    def __init__(self, world: int) -> None:
        self.world = world
        self.box: list[Any] | None = None
        self.slots: dict[int, Any] = {}


class _FakeDist:
    """One rank's ``torch.distributed``: records its calls and checks their arguments
    as torch documents them; the ranks' calls are made in an order the test picks."""

    def __init__(self, rank: int, shared: _TorchWorld) -> None:
        self.rank, self.shared = rank, shared
        self.calls: list[tuple[Any, ...]] = []

    def init_process_group(self, backend: str, *, init_method: str, rank: int,
                           world_size: int) -> None:
        self.calls.append(("init", backend, init_method, rank, world_size))

    def broadcast_object_list(self, box: list[Any], src: int) -> None:
        assert src == 0
        if self.rank == src:
            self.shared.box = list(box)
        else:
            assert self.shared.box is not None, "a rank read a broadcast not yet sent"
            box[:] = self.shared.box

    def gather_object(self, obj: Any, object_gather_list: list[Any] | None, dst: int) -> None:
        assert dst == 0
        if self.rank == dst:
            assert object_gather_list is not None and len(object_gather_list) == \
                self.shared.world, "the destination's list must be sized to the group"
            for r in range(self.shared.world):
                object_gather_list[r] = obj if r == dst else self.shared.slots.pop(r)
        else:
            assert object_gather_list is None, "only the destination passes a list"
            self.shared.slots[self.rank] = obj

    def barrier(self) -> None:
        self.calls.append(("barrier",))

    def destroy_process_group(self) -> None:
        self.calls.append(("destroy",))


def _torch_groups(monkeypatch: pytest.MonkeyPatch, world: int
                  ) -> tuple[list[TorchGroup], list[_FakeDist]]:
    shared, groups, fakes = _TorchWorld(world), [], []
    for r in range(world):
        fake = _FakeDist(r, shared)
        torch = types.ModuleType("torch")
        dist = types.ModuleType("torch.distributed")
        for name in ("init_process_group", "broadcast_object_list", "gather_object",
                     "barrier", "destroy_process_group"):
            setattr(dist, name, getattr(fake, name))
        torch.distributed = dist  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "torch", torch)
        monkeypatch.setitem(sys.modules, "torch.distributed", dist)
        groups.append(TorchGroup(r, world, "tcp://127.0.0.1:1"))
        fakes.append(fake)
    return groups, fakes


@pytest.mark.parametrize("world", [1, 2, 3])
def test_torch_group_calls_torch_as_documented_and_returns_the_bytes(
    monkeypatch: pytest.MonkeyPatch, world: int
) -> None:
    groups, fakes = _torch_groups(monkeypatch, world)
    assert [(g.rank, g.world) for g in groups] == [(r, world) for r in range(world)]
    assert [f.calls for f in fakes] == [
        [("init", "gloo", "tcp://127.0.0.1:1", r, world)] for r in range(world)]
    assert [g.broadcast(b"plan" if g.rank == 0 else None) for g in groups] == [b"plan"] * world
    others = [g.gather(b"m%d" % g.rank) for g in reversed(groups[1:])]
    assert others == [[]] * (world - 1)
    assert groups[0].gather(b"m0") == [b"m%d" % r for r in range(world)]
    for g in groups:
        g.barrier()
        g.close()
    assert [f.calls[1:] for f in fakes] == [[("barrier",), ("destroy",)]] * world
