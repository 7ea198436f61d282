"""Rule: the protocol machine's refusals, records, invariant twins and injected-bug steps
say exactly what the spec says, as survivors of the whole mutation run in spec/ showed
(docs/mutation-run7): each rule below is checked over the states of seeded walks, or
over every small case of the refused input it is about.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from functools import partial
from itertools import combinations, permutations
from typing import Any

import pytest

from hisparse.spec import variants
from hisparse.spec.constants import ProtocolConfig
from hisparse.spec.errors import AckNotOwed, ActionNotEnabled, RepeatedAck, UnknownTransfer
from hisparse.spec.invariants import (
    INVARIANTS,
    LivePagesReadable,
    NoPublishBeforeComplete,
    PublishedPageStable,
)
from hisparse.spec.machine import ProtocolMachine
from hisparse.spec.state import GARBAGE, ProtocolState
from tests.protocol_helpers import full_spill, legal_moves, make_machine
from tests.test_boundaries_machine import refused

# the actions a spill takes from arrival to publication (and a reader's reads): a walk
# takes one of them four times in five where one is legal, so it reaches host pages,
# published blocks, worker metas in flight and a reader's read-done events
SPILL_PATH = frozenset({
    "Arrive", "StartSpill", "WorkerEnqueue", "WorkerComplete", "WorkerReport",
    "ConsumeMeta", "WorkerRead", "WorkerReadsDone", "EvictHost",
})

ONE_RANK: dict[str, Any] = {}
PRIVATE: dict[str, Any] = {"ranks": 2}
SHARED: dict[str, Any] = {"ranks": 2, "backing": "shared"}
SHARED_WRITER_1: dict[str, Any] = {"ranks": 3, "backing": "shared", "writer": 1}


def pick(m: ProtocolMachine, rng: random.Random) -> tuple[str, tuple[Any, ...]] | None:
    """A legal move (the oracle guards' ``legal_moves``; a WorkerRead only where it
    queues a read), a spill's own four times in five; the action first, evenly, then its
    arguments."""
    moves = legal_moves(m)
    s = m.state
    if not any(at is not None and at[0] == "host" and s.req[p[0]] == "running"
               for p, at in s.loc.items()):  # a reader's WorkerRead would queue no read
        moves = [mv for mv in moves if mv[0] != "WorkerRead"]
    ours = [mv for mv in moves if mv[0] in SPILL_PATH]
    if ours and rng.random() < 0.8:
        moves = ours
    if not moves:
        return None
    by_action: dict[str, list[tuple[Any, ...]]] = {}
    for action, args in moves:
        by_action.setdefault(action, []).append(args)
    action = rng.choice(sorted(by_action))
    return action, rng.choice(by_action[action])


def walk(seed: int, steps: int, config: dict[str, Any]) -> Iterator[ProtocolMachine]:
    """A checking, recording machine (``config`` to ``make_machine``) at each state of a
    seeded walk (every state it yields holds every invariant: the machine checks them)."""
    rng = random.Random(seed)
    m = make_machine(record=True, **config)
    for _ in range(steps):
        yield m
        move = pick(m, rng)
        if move is None:
            return
        getattr(m, move[0])(*move[1])


def failing(s: ProtocolState) -> set[str]:
    """Every safety twin that reports a problem in ``s``."""
    return {name for name, inv in INVARIANTS.items() if inv(s)}


# --- invariant twins -------------------------------------------------------------------


def test_live_pages_readable_names_a_running_page_without_a_block_or_on_a_freed_host_block(
) -> None:
    """In every walked state, each running page whose block-table entry is lost is named
    as having no block (after its GPU block's complaint, if it holds one), and freeing
    the host block a running page is on names every running page there, nothing else.
    (spec/invariants.py:271:call:20 and :279:call:28 dropped those two problems.)"""
    met: Counter[str] = Counter()
    for config in (ONE_RANK, PRIVATE, SHARED):
        for seed in range(4):
            for m in walk(seed, 80, config):
                s = m.state
                assert LivePagesReadable(s) == []
                for p, where in s.loc.items():
                    if s.req[p[0]] != "running":
                        continue
                    assert where is not None
                    lost = s.clone()
                    lost.loc[p] = None
                    expected = [f"GPU block {g} is leased to {p}, whose entry is None"
                                for g, o in enumerate(s.gpu_owner) if o == p]
                    expected.append(f"page {p} of a running request has no block")
                    assert LivePagesReadable(lost) == expected
                    met[where[0]] += 1
                    if where[0] != "host":
                        continue
                    h = where[1]
                    freed = s.clone()
                    freed.host_state[h] = "free"
                    there = [q for q, at in s.loc.items()
                             if at == where and s.req[q[0]] == "running"]
                    assert LivePagesReadable(freed) == [
                        f"page {q} on host {h}, which is free" for q in there]
    assert met["gpu"] and met["host"]  # both kinds of running page were met


def test_a_copy_of_other_bytes_into_a_published_block_is_published_page_stables_alone(
) -> None:
    """In every walked state, a copy of other bytes started on any copier into any
    published block breaks PublishedPageStable (naming rank, block and bytes), and
    LivePagesReadable only where a running page is read from that block, never
    NoPublishBeforeComplete, whatever acks of other transfers are in flight; the walks
    meet such states with worker metas in flight. (spec/invariants.py:238:cmp:112
    counted a meta carrying acks of other transfers as naming the block.)"""
    with_metas = 0
    for config in (ONE_RANK, PRIVATE):
        for seed in range(4):
            for m in walk(seed, 80, config):
                s = m.state
                for h, st in enumerate(s.host_state):
                    if st != "valid":
                        continue
                    for w in sorted(s.host_data):  # the copiers
                        bad = s.clone()
                        bad.copying[w][h] = GARBAGE
                        assert PublishedPageStable(bad) == [
                            f"rank {w} copies 'garbage' over published host block {h} "
                            f"({s.host_key[h]!r})"]
                        assert NoPublishBeforeComplete(bad) == []
                        read = any(at == ("host", h) and s.req[q[0]] == "running"
                                   for q, at in s.loc.items())  # then misread, too
                        assert failing(bad) == (
                            {"PublishedPageStable", "LivePagesReadable"} if read
                            else {"PublishedPageStable"})
                        with_metas += any(s.up)
    assert with_metas  # a meta in flight beside the published block was met


# --- check_report: a worker meta's refusals, by name ------------------------------------


def _open_transfer(ranks: int, earlier: int) -> tuple[ProtocolMachine, int, int]:
    """``ranks`` private pools; ``earlier`` transfers spilled and closed before r0's last
    page is spilled into host block 7: the open transfer's ID is ``earlier``."""
    keys = tuple(f"k{i}" for i in range(earlier + 1))
    m = make_machine(ranks=ranks, gpu_blocks=earlier + 1, host_pool_bytes=16,
                     universe={"r0": keys})
    m.Arrive("r0")
    for i in range(earlier):
        full_spill(m, ("r0", i + 1), 4 + i)
    tid = m.StartSpill(("r0", earlier + 1), 7)
    assert tid == earlier
    return m, tid, 7


@pytest.mark.parametrize("ranks", [2, 3])
@pytest.mark.parametrize("earlier", [0, 1, 2])
def test_a_completed_ack_from_a_rank_that_already_reported_it_is_refused_as_repeated(
        ranks: int, earlier: int) -> None:
    """Whichever ranks reported the transfer done (in any order) while another still owes
    it, and whatever its ID, each of them acking it completed again is refused as a
    repeat naming that rank, and nothing changes. (spec/machine.py:567:var:50 and
    :567:var:51 tested the transfer ID against the sets of ranks.)"""
    for order in permutations(range(ranks)):
        for n in range(1, ranks):
            m, tid, h = _open_transfer(ranks, earlier)
            for w in order[:n]:
                m.WorkerEnqueue(tid, w)
                m.WorkerComplete(h, w)
                m.WorkerReport(w)
                m.ConsumeMeta(w)
            assert m.state.spill[h] is not None  # another rank still owes its acks
            for w in order[:n]:
                e = refused(m, partial(m.check_report, (), (tid,), w), RepeatedAck)
                assert type(e) is RepeatedAck
                assert str(e) == f"transfer {tid}: rank {w} already reported it completed"


@pytest.mark.parametrize("ranks", [2, 3])
@pytest.mark.parametrize("earlier", [0, 1, 2])
def test_a_completed_ack_from_a_rank_whose_loss_dropped_the_command_is_not_owed(
        ranks: int, earlier: int) -> None:
    """A rank that never took the command acks it completed: early while the command
    waits for it, not owed once its loss dropped the command, whichever other ranks
    enqueued it and whatever its ID; nothing changes. (spec/machine.py:567:bool:18
    called it a repeat; :569:var:52 called it early when the ID equals a rank that
    enqueued it.)"""
    for v in range(ranks):
        others = [w for w in range(ranks) if w != v]
        for k in range(len(others) + 1):
            for took in combinations(others, k):
                m, tid, h = _open_transfer(ranks, earlier)
                for w in took:
                    m.WorkerEnqueue(tid, w)  # its copy runs: the transfer stays open
                    m.WorkerReport(w)
                    m.ConsumeMeta(w)
                e = refused(m, partial(m.check_report, (), (tid,), v), UnknownTransfer)
                assert type(e) is UnknownTransfer
                assert str(e) == f"transfer {tid}: completed ack before its enqueued ack"
                m.WorkerLoss(v)
                sp = m.state.spill[h]
                assert sp is not None and v not in sp.need  # open: another rank owes acks
                e = refused(m, partial(m.check_report, (), (tid,), v), AckNotOwed)
                assert type(e) is AckNotOwed
                assert str(e) == (f"transfer {tid}: rank {v} owes no such ack: no copy of "
                                  "it runs on that rank")


def test_a_reader_acking_a_command_the_writer_has_not_taken_is_refused_by_name() -> None:
    """In every walked state of a shared pool, a reader rank with nothing pending whose
    meta acks as enqueued a command still waiting for the writer is refused naming the
    rank and the transfer, as WorkerEnqueue itself refuses it, and nothing changes; once
    the writer took it the same meta passes the check, changing nothing. (The refusal
    was removed: spec/machine.py:532:raise:72.)"""
    met: Counter[bool] = Counter()
    for config in (SHARED, SHARED_WRITER_1):
        for seed in range(3):
            for m in walk(seed, 60, config):
                s = m.state
                cfg = s.config
                for w in cfg.readers:
                    if s.up[w] or s.w_enq[w] or s.w_done[w] or s.lost[w]:
                        continue
                    for tid in sorted(s.down[w]):
                        early = tid in s.down[cfg.writer]
                        met[early] += 1
                        if not early:
                            before = s.clone()
                            m.check_report((tid,), (), w)
                            assert m.state == before
                            continue
                        e = refused(m, partial(m.check_report, (tid,), (), w))
                        assert type(e) is ActionNotEnabled
                        assert str(e) == (f"WorkerEnqueue is not enabled: rank {w} acks "
                                          f"transfer {tid} before the writer took it")
                        refused(m, partial(m.WorkerEnqueue, tid, w))
    assert met[True] and met[False]


# --- the record ------------------------------------------------------------------------


def test_every_action_taken_is_recorded_once_and_checked_once() -> None:
    """On a checking, recording machine every action a walk takes (a reader's read-done
    event included) appends one step that names it, a rank-only action's arguments
    being its rank, and checks the invariants once. (spec/machine.py:1252:call:88
    recorded and checked nothing at WorkerReadsDone.)"""
    taken: Counter[str] = Counter()
    rank_only = {"WorkerRead", "WorkerReadsDone", "WorkerReport", "ConsumeMeta",
                 "WorkerLoss", "LoseMeta"}
    for config in (SHARED, SHARED_WRITER_1):
        for seed in range(4):
            rng = random.Random(seed)
            m = make_machine(record=True, **config)
            assert m.steps is not None
            for _ in range(80):
                move = pick(m, rng)
                if move is None:
                    break
                action, args = move
                steps, checks = len(m.steps), m.invariant_checks
                getattr(m, action)(*args)
                if action in ("add_request", "add_import"):  # constants: no step
                    assert (len(m.steps), m.invariant_checks) == (steps, checks)
                    continue
                taken[action] += 1
                assert len(m.steps) == steps + 1 and m.invariant_checks == checks + 1
                assert m.steps[-1][0] == action
                if action in rank_only:
                    assert m.steps[-1][1] == {"rank": args[0]}
    assert taken["WorkerReadsDone"] and taken["WorkerRead"]


# --- injected bugs' steps --------------------------------------------------------------


def _unchecked(bug: str, ranks: int) -> ProtocolMachine:
    """A machine with ``bug`` injected and its checks off (the bug breaks one by design)."""
    cfg = ProtocolConfig(gpu_blocks=3, host_pool_bytes=9, host_block_bytes=2,
                         ranks=ranks, bug=bug)
    m = ProtocolMachine.create(cfg, check=False)
    m.add_request("r0", ("k0",))
    return m


@pytest.mark.parametrize("ranks", [1, 2, 3])
@pytest.mark.parametrize("batched", [False, True])
def test_publish_at_enqueued_publishes_at_the_last_ranks_enqueued_ack_not_before(
        ranks: int, batched: bool) -> None:
    """The variant publishes the destination when the enqueued ack of the last rank is
    consumed, in whatever order the ranks report, and not at an earlier rank's; where
    each rank's meta carries its completed ack too, the last one closes the transfer and
    it is published all the same. (spec/variants.py:73:bool:3 published at the first
    rank's ack, and failed on a transfer its own meta had closed.)"""
    for order in permutations(range(ranks)):
        m = _unchecked("publish_at_enqueued", ranks)
        m.Arrive("r0")
        h = 2
        tid = m.StartSpill(("r0", 1), h)
        s = m.state
        for i, w in enumerate(order):
            m.WorkerEnqueue(tid, w)
            if batched:
                m.WorkerComplete(h, w)
            m.WorkerReport(w)
            m.ConsumeMeta(w)
            last = i == ranks - 1
            assert s.host_state[h] == ("valid" if last else "leased"), (order, w)
            assert (s.spill[h] is None) == (last and batched), (order, w)
        assert s.loc[("r0", 1)] == ("host", h) and s.prefix == {"k0": {h}}


def test_abort_frees_after_one_rank_done_answers_a_bool_for_every_host_block() -> None:
    """The variant's step answers True exactly for a block whose open transfer is of an
    aborted request, and False (a bool, as the production step it replaces) for every
    other block, one with no open transfer included. (spec/variants.py:93:none:2
    answered None there.)"""
    m = _unchecked("abort_frees_after_one_rank_done", 2)
    s = m.state

    def answers() -> list[bool]:
        out = [variants.abort_frees_after_one_rank_done(m, h)
               for h in range(s.config.host_blocks)]
        assert all(type(x) is bool for x in out)
        return out

    assert answers() == [False] * 4
    m.Arrive("r0")
    tid = m.StartSpill(("r0", 1), 2)
    assert answers() == [False] * 4  # open, of a running request
    for w in (0, 1):
        m.WorkerEnqueue(tid, w)
        m.WorkerReport(w)
        m.ConsumeMeta(w)
    m.Abort("r0")
    assert answers() == [False, False, True, False]
    m.WorkerComplete(2, 0)
    m.WorkerReport(0)
    m.ConsumeMeta(0)  # the first rank's completed ack frees it (the bug)
    assert s.spill[2] is None and s.host_state[2] == "free"
    assert answers() == [False] * 4
