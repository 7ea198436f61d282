"""Rule: a correct worker's drop refusal, the import actions' records, the host import's
room-making evictions and the accounting executor's all-or-nothing spill batches do
exactly what the spec says, as the third group of spec/ survivors of the whole mutation
run showed (docs/mutation-run7).
"""

from __future__ import annotations

import random
import re
from collections import Counter
from functools import partial
from typing import Any

import pytest

from hisparse.executor.accounting import AccountingExecutor
from hisparse.executor.base import Executor
from hisparse.executor.errors import BadTransfer
from hisparse.executor.reference import ReferenceExecutor
from hisparse.spec.messages import HiSparseWorkerMeta, ImportLanded
from tests.protocol_helpers import (
    IMPORT_GUARDS,
    WALK_IMPORTS,
    checked_coordinator,
    legal_moves,
    make_machine,
)
from tests.test_accounting_executor import LAYOUT
from tests.test_boundaries_machine import refused
from tests.test_rule_survivors_spec import ONE_RANK, PRIVATE, SHARED, SHARED_WRITER_1, walk

# --- a correct worker never drops a command ---------------------------------------------

NEVER_DROPS = "WorkerDrop is not enabled: a correct worker never drops a command"


def test_a_correct_worker_refuses_every_drop_by_name_whatever_transfer_and_rank() -> None:
    """In every walked state of the production machine, WorkerDrop(tid, w) is refused as
    the drop no correct worker makes, before the transfer ID or the rank is looked at: a
    command in flight to w, an ID not in flight, a rank out of range alike; nothing
    changes. (spec/machine.py:1269:reorder:30 looked the command up first, so an unknown
    ID was refused as an unknown transfer and a bad rank as an unknown rank.)"""
    met: Counter[str] = Counter()
    for config in (ONE_RANK, PRIVATE, SHARED, SHARED_WRITER_1):
        for seed in range(2):
            for m in walk(seed, 30, config):
                s = m.state
                ranks = s.config.ranks
                in_flight = {tid for down in s.down for tid in down}
                unknown = max(in_flight, default=0) + 1
                for w in (-1, *range(ranks), ranks):
                    mine = set(s.down[w]) if 0 <= w < ranks else set()
                    for tid in (*sorted(in_flight), unknown):
                        met["in flight" if tid in mine else "not in flight"] += 1
                        err = refused(m, partial(m.WorkerDrop, tid, w))
                        assert str(err) == NEVER_DROPS
    assert met["in flight"] and met["not in flight"]


# --- every import action taken is recorded once and checked once ------------------------

PAGE_ONLY = {"LeaseStaging", "CopyToHost", "MirrorPage", "ReleaseStaging"}
REQUEST_ONLY = {"ImportArrive", "ChooseTarget", "AdmitImport", "ReportImport",
                "ImportError", "CompleteImport", "FailImport"}


def _recorded_args(action: str, args: tuple[Any, ...]) -> dict[str, Any]:
    """The arguments a trace step of an import action names."""
    if action in PAGE_ONLY:
        return {"page": [args[0][0], args[0][1]]}
    if action == "LandChunk":
        return {"page": [args[0][0], args[0][1]], "chunk": args[1]}
    assert action in REQUEST_ONLY, action
    return {"request": args[0]}


def test_every_import_action_taken_is_recorded_once_and_checked_once() -> None:
    """On a checking, recording machine every P/D import action a walk takes (a mirror
    into the resident block and the done report included) appends one step that names
    it and its page or request, and checks the invariants once. (spec/machine.py:1008:
    call:79 recorded and checked nothing at MirrorPage; :1070:call:82 nothing at
    ReportImport; :1096:call:83 nothing at CompleteImport.)"""
    taken: Counter[str] = Counter()
    configs: list[tuple[dict[str, Any], int]] = [({}, 8), ({"chunks": 2}, 4)]
    for config, seeds in configs:  # (an import's own action 4 times in 5, as import_walk)
        for seed in range(seeds):
            rng = random.Random(seed)
            m = make_machine(imports=WALK_IMPORTS, record=True, **config)
            assert m.steps is not None and m.check
            for _ in range(60):
                moves = legal_moves(m)
                ours = [mv for mv in moves if mv[0] in IMPORT_GUARDS and mv[0] != "ImportError"]
                if not moves:
                    break
                action, args = rng.choice(ours if ours and rng.random() < 0.8 else moves)
                steps, checks = len(m.steps), m.invariant_checks
                getattr(m, action)(*args)
                if action in ("add_request", "add_import"):  # constants: no step
                    assert (len(m.steps), m.invariant_checks) == (steps, checks)
                    continue
                assert len(m.steps) == steps + 1 and m.invariant_checks == checks + 1
                assert m.steps[-1][0] == action
                if action in IMPORT_GUARDS:
                    taken[action] += 1
                    assert m.steps[-1][1] == _recorded_args(action, args)
    assert set(taken) == set(IMPORT_GUARDS), set(IMPORT_GUARDS) - set(taken)


# --- a host-target import evicts only what it needs -------------------------------------


@pytest.mark.parametrize(("pages", "evicted", "hits"), [(2, 0, 2), (3, 1, 1), (4, 2, 0)])
def test_a_host_import_evicts_exactly_the_published_pages_it_needs_room_for(
    pages: int, evicted: int, hits: int
) -> None:
    """Two published, unreferenced host pages (k1, k2) in a pool of four: a host-target
    import of n pages evicts the least recently released ones until n more fit, no more:
    none when used + n is exactly the capacity (n = 2), one for n = 3, both for n = 4;
    the rest stay prefix hits. (hisparse/coordinator.py:389:cmp:56 also evicted at
    used + n == capacity.)"""
    c, _ = checked_coordinator(gpu=2, host=4)
    c.add_request("busy", ["b"])
    assert c.admit("busy") is not None  # one GPU block left: a multi-page import is host
    c.add_import("a", ["k1", "k2"], num_tokens=8, block_size=4)
    assert c.admit_import("a") == "host"
    (cmd,), _ = c.take_imports()
    c.on_worker_meta(HiSparseWorkerMeta(
        imports_landed=(ImportLanded(import_id=cmd.import_id, pages=(1, 2)),)))
    c.on_worker_meta(HiSparseWorkerMeta(imports_done=(cmd.import_id,)))
    c.finish("a")  # k2's block was released at completion (mirrored), k1's now
    assert c.state.host_used == 2 and c.evictions == 0
    keys = [f"n{i}" for i in range(pages)]
    c.add_import("r", keys, num_tokens=4 * pages, block_size=4)
    assert c.admit_import("r") == "host"
    assert c.evictions == evicted
    assert c.state.host_used == 4
    c.add_request("again", ["k1", "k2"])
    assert c.lookup_prefix("again") == hits


# --- a batch of spills is refused whole ---------------------------------------------------


def _queued_and_pools(ex: Executor[Any], pools: Any) -> tuple[list[int], dict[str, bytes]]:
    return ex.queued(), {k: v.tobytes() for k, v in ex.snapshot(pools).items()}


def test_a_spill_batch_that_collides_with_the_queue_is_refused_whole_as_by_the_reference(
) -> None:
    """A batch of spills whose later copy collides with the stream (its destination still
    has a copy queued, its transfer ID already has a copy queued for this cache, or has
    already completed) is refused with the collision named, before any copy of the
    batch is queued: the queue and the pools are as before, in the accounting executor
    exactly as in the reference. (executor/accounting.py:76:call:5 checked each copy only
    as it queued it, so the batch's first copy stayed queued.)"""
    refusals = [
        ([(5, 0, 2), (6, 1, 1)], "host block 1 still has copy 2 queued into it; its "
                                 "destination lease is held until that copy completes"),
        ([(5, 0, 2), (2, 1, 3)], "transfer 2 already has a copy queued for this cache; "
                                 "one transfer moves one page per cache"),
        ([(5, 0, 2), (1, 1, 3)], "transfer 1 has already completed; use a fresh transfer ID"),
    ]
    executors: list[Executor[Any]] = [AccountingExecutor(), ReferenceExecutor()]
    for ex in executors:
        pools = ex.allocate(LAYOUT)
        ex.enqueue_spills(pools, [(1, 0, 0)])
        ex.release()  # 1 has landed, not yet reported
        ex.enqueue_spills(pools, [(2, 1, 1)])
        before = _queued_and_pools(ex, pools)
        assert before[0] == [2]
        for spills, message in refusals:
            with pytest.raises(BadTransfer, match=f"^{re.escape(message)}$"):
                ex.enqueue_spills(pools, spills)
            after = _queued_and_pools(ex, pools)
            assert after[0] == before[0]
            assert after[1] == before[1]
        ex.enqueue_spills(pools, [(5, 0, 2), (6, 1, 3)])
        ex.release()
        assert ex.completed() == [1, 2, 5, 6]
