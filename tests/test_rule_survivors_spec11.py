"""Rule: a replay of a command no rank could see again is refused by name, ``drain`` counts
the actions it ran, and an enqueued ack releases every source that all ranks enqueued --
rules that the eleventh group of spec/ survivors of the whole mutation run showed
(docs/mutation-run7).
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from hisparse.spec.catalogue import replayable
from hisparse.spec.errors import ActionNotEnabled, UnknownTransfer
from hisparse.spec.machine import ProtocolMachine
from hisparse.spec.messages import BlockTableReplacement, HiSparseWorkerMeta
from tests.protocol_helpers import checked_coordinator, everything, legal_moves, make_machine

# one rank; two ranks with private pools; two ranks sharing one pool
CONFIGS: list[dict[str, Any]] = [
    {}, {"ranks": 2}, {"ranks": 2, "backing": "shared"},
]


def walked(seeds: int = 2, steps: int = 40) -> Iterator[tuple[dict[str, Any], ProtocolMachine]]:
    """Every state of seeded walks over the legal moves (``legal_moves``: every catalogue
    action, the channels' faults included) of a recording machine under ``CONFIGS``."""
    for config in CONFIGS:
        for seed in range(seeds):
            rng = random.Random(seed)
            m = make_machine(record=True, **config)
            for _ in range(steps):
                yield config, m
                moves = legal_moves(m)
                if not moves:
                    break
                action, args = rng.choice(moves)
                getattr(m, action)(*args)


def snapshot(m: ProtocolMachine) -> tuple[Any, int, int]:
    """The state, the invariant checks made and the recorded steps (a refusal changes none)."""
    assert m.steps is not None
    return m.state.clone(), m.invariant_checks, len(m.steps)


# --- IgnoreReplay: only a command a replay could repeat -----------------------------------


def test_a_replay_of_a_command_no_rank_could_see_again_is_refused_by_name() -> None:
    """In every walked state, IgnoreReplay(src, dst, w) of a pair outside the spec's
    Replayable(w) (neither the command of an open transfer that left rank w's queue, nor
    any block into a published host block) is refused, naming the command and the rank;
    nothing changes (no step, no check). A replayable one is a stutter: one step
    recorded, the state as it was.
    (kills spec/machine.py:1403:raise:67, which dropped the refusal and took the replay,
    and 1414:var:128, which recorded the source block as the destination)"""
    met: Counter[str] = Counter()
    for _, m in walked():
        s = m.state
        cfg = s.config
        for w in range(cfg.ranks):
            ok = set(replayable(s, w))
            for src in range(cfg.gpu_blocks):
                for dst in range(cfg.host_blocks):
                    before = snapshot(m)
                    if (src, dst) in ok:
                        met["replayable"] += 1
                        m.IgnoreReplay(src, dst, w)
                        state, _checks, steps = snapshot(m)
                        assert (state, steps) == (before[0], before[2] + 1)
                        assert m.steps is not None  # the step records the replayed command
                        assert m.steps[-1][:2] == ("IgnoreReplay",
                                                   {"src": src, "dst": dst, "rank": w})
                        met["replayable, src != dst"] += src != dst
                        continue
                    met["refused"] += 1
                    reason = (f"no command {src} -> {dst} was sent to rank {w} "
                              "that a replay could repeat")
                    with pytest.raises(
                        ActionNotEnabled,
                        match=f"^{re.escape(f'IgnoreReplay is not enabled: {reason}')}$",
                    ):
                        m.IgnoreReplay(src, dst, w)
                    assert snapshot(m) == before
    assert met["replayable"] and met["refused"] and met["replayable, src != dst"], met


# --- drain: the number of actions it ran -------------------------------------------------


def test_drain_returns_how_many_fair_actions_it_ran() -> None:
    """After a walk, ``drain`` runs the fair actions until none is enabled and returns how
    many ran: exactly the steps it recorded, and 0 once nothing is left.
    (kills spec/machine.py:1481:arith:7, which counted down: a negative count)"""
    met: Counter[str] = Counter()
    for config in CONFIGS:
        for seed in range(4):
            rng = random.Random(seed)
            m = make_machine(record=True, **config)
            for _ in range(12):
                moves = legal_moves(m)
                if not moves:
                    break
                action, args = rng.choice(moves)
                getattr(m, action)(*args)
            assert m.steps is not None
            before = len(m.steps)
            n = m.drain()
            assert n == len(m.steps) - before
            assert m.enabled() == []
            assert m.drain() == 0 and len(m.steps) == before + n
            met["ran some" if n else "ran none"] += 1
    assert met["ran some"], met


# --- the coordinator: an enqueued ack frees every fully enqueued source ------------------


def test_an_enqueued_ack_frees_a_fully_enqueued_source_listed_after_one_still_sent() -> None:
    """Two ranks, transfers t1 (page a/1) and t2 (page b/1). Rank 1 enqueues t2 only;
    then rank 0's meta acks (t1, t2) enqueued, t1 first. t1 stays sent (rank 1 owes its
    ack): its source stays leased. t2 is now enqueued by every rank: its source GPU block
    goes back to HMA and its page's block-table entry is replaced by its host block --
    though t1, still sent, came first in the ack.
    (kills hisparse/coordinator.py:717:loop:3, which stopped at the first transfer still
    sent and kept every later source leased)"""
    c, kv = checked_coordinator(gpu=4, host=4, ranks=2)
    for r in ("a", "b"):
        c.add_request(r, [f"k{r}"])
        c.admit(r)
    t1, t2 = c.spill(("a", 1)), c.spill(("b", 1))
    assert t1 == 0 and t2 == 1
    cmds, reps = c.take_commands()
    assert [(t.transfer_id, t.src_gpu_block, t.dst_host_block) for t in cmds] == [
        (0, 0, 0), (1, 1, 1)]
    assert reps == () and kv.num_free == 2
    c.on_worker_meta(HiSparseWorkerMeta(enqueued=(t2,), rank=1))
    assert kv.num_free == 2  # rank 0 has not enqueued t2 yet
    c.on_worker_meta(HiSparseWorkerMeta(enqueued=(t1, t2), rank=0))
    s = c.state
    sp1, sp2 = s.spill[0], s.spill[1]
    assert sp1 is not None and sp1.phase == "sent"
    assert sp2 is not None and sp2.phase == "enqueued"
    assert kv.num_free == 3 and kv.is_free(1) and not kv.is_free(0)
    assert kv.is_pinned(0) and not kv.is_pinned(1)
    assert s.loc[("a", 1)] == ("gpu", 0) and s.loc[("b", 1)] == ("host", 1)
    assert c.take_commands() == (
        (), (BlockTableReplacement(request_id="b", page_index=1, host_block=1),))


# --- a loss report naming a transfer that is not open ------------------------------------


@pytest.mark.parametrize("ranks", [1, 2])
def test_a_loss_report_of_a_copy_that_is_no_open_transfer_is_refused_by_name(ranks: int) -> None:
    """``on_worker_lost`` is checked whole first: a transfer ID reported still copying
    that is no open transfer is refused as such (not as one never handed to the worker,
    a later check), and nothing changes: protocol state, the coordinator's tables, the
    pool. (kills hisparse/coordinator.py:761:raise:16, which went on to the later checks)"""
    c, kv = checked_coordinator(ranks=ranks)
    before = everything(c, kv)
    with pytest.raises(UnknownTransfer,
                       match=r"^transfer 12345: reported copying, but not an open transfer$"):
        c.on_worker_lost([12345], rank=ranks - 1)
    assert everything(c, kv) == before
