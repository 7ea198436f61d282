"""Rules of the worker's P/D import runner (its counts, what an import's end settles, a
slot release the pool refuses) and of ``bench nixl``'s READ window that survivors of the
whole mutation run showed no test stated (docs/mutation-run7)."""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

import pytest

import hisparse.bench.nixl as nixl_bench
from hisparse.pdimport import ImportRunner, ImportStats
from hisparse.transport import LoopbackPrefiller, StagingPool, TransportError
from hisparse.transport.staging import StagingLease
from tests.test_pdimport_runner import (
    BLOCK,
    LAYERS,
    ROW,
    GatedLoopback,
    Rig,
    command,
    drain,
    gated,
    stale_lease,
)
from tests.test_rule_uncovered_transport import _stand_ins

# -- the import runner ----------------------------------------------------------------------


def test_the_runner_counts_each_import_done_once_and_each_failure_once(loopback_rig: Rig) -> None:
    # a host import of 3 pages (the last one of 3 valid rows), a device import of 2 full
    # pages and one refused at once (another agent's announcement): 3 started, 2 done,
    # 1 failed, and the bytes by where they were READ (kills pdimport/runner.py:363:arith:6,
    # which counted each import done as -1)
    loopback_rig.hold("h", 3 * BLOCK - 1, 1)
    loopback_rig.hold("d", 2 * BLOCK, 2)
    loopback_rig.hold("x", 1 * BLOCK, 3)
    loopback_rig.runner.start(command(0, "h", "host", 3 * BLOCK - 1, [None] * 3, [0, 1, 2]))
    loopback_rig.runner.start(command(1, "d", "device", 2 * BLOCK, [0, 1], [None, None]))
    configured, loopback_rig.runner.prefiller = loopback_rig.runner.prefiller, "the-configured-one"
    loopback_rig.runner.start(command(2, "x", "host", 1 * BLOCK, [None], [3]))
    loopback_rig.runner.prefiller = configured
    landed, done, failed = drain(loopback_rig)
    assert sorted(done) == [0, 1] and list(failed) == [2] and failed[2].reason == "refused"
    assert {i: sorted(p) for i, p in landed.items()} == {0: [1, 2, 3], 1: [1, 2]}
    full = LAYERS * BLOCK * ROW  # a full page's valid bytes
    assert loopback_rig.runner.stats == ImportStats(
        started=3, done=2, failed=1,
        staged_bytes=2 * full + LAYERS * (BLOCK - 1) * ROW, direct_bytes=2 * full,
        staging_peak=2, staging_waits=0, reasons=Counter({"refused": 1}))


def _gated(slots: int = 4) -> tuple[ImportRunner, GatedLoopback, StagingPool, LoopbackPrefiller]:
    """``gated`` (its first two chunks' READs in flight), its chunks checked."""
    runner, tr, staging, peer = gated(slots)
    h = runner.live[0].handle
    assert h.in_flight == 2 and h.leases == (StagingLease("a", 0), StagingLease("a", 1))
    assert [h.bound(i) for i in range(3)] == [True, True, False]
    return runner, tr, staging, peer


@pytest.mark.parametrize("how", ["abort", "worker loss"])
def test_an_ended_import_settles_exactly_the_chunks_that_held_slots(how: str) -> None:
    # chunks 0 and 1 hold slots with READs in flight, chunk 2 never got one; once those
    # READs end, the import's end returns both slots and its record counts exactly chunks
    # 0 and 1 as settled, so none of their slots can be returned twice (kills
    # pdimport/runner.py:354:call:5, which settled none, and 354:cmp:28, which settled
    # the chunk that never held a slot instead)
    runner, tr, staging, _ = _gated()
    imp = runner.live[0]
    assert imp.copied == set()
    tr.open = True
    if how == "abort":
        runner.abort(0)
        runner.advance()
        _, done, failed = runner.take_acks()
        assert done == () and [(f.import_id, f.reason, f.detail) for f in failed] == [
            (0, "transport", "aborted")]
    else:
        assert runner.restart() == (0,)
    assert imp.copied == {0, 1}
    assert runner.idle and staging.in_use == 0 and not tr.live
    tr.close()


def _snapshot(runner: ImportRunner) -> dict[str, Any]:
    """Everything an advance could change, the pending acks excepted."""
    pool = runner.transport.pool
    return {
        "live": {iid: (sorted(imp.copied), imp.failure, list(imp.handle.states),
                       list(imp.handle.dests), str(imp.handle.error))
                 for iid, imp in runner.live.items()},
        "transport": sorted(runner.transport.live),
        "pool": (pool.in_use, pool.num_free,
                 [pool.holds(StagingLease("a", s)) for s in range(pool.slots)]),
        "stats": copy.deepcopy(runner.stats),
        "step_peak": runner.step_peak,
    }


def test_a_slot_release_the_pool_refuses_changes_nothing_and_is_refused_again() -> None:
    # the aborted import's slot 1 was returned to the pool behind the runner's back while
    # its READ was in flight; once the READs end, returning the import's slots is refused
    # by the pool, and the refusal changes nothing: the import stays in flight with no
    # chunk settled, unreported, and the next advance is refused the same way (kills
    # pdimport/runner.py:354:reorder:0, which settled the chunks before the pool refused,
    # so the next advance dropped the import as failed with slot 0 still leased)
    runner, tr, staging, _ = _gated()
    runner.abort(0)
    staging.release([StagingLease("a", 1)])
    tr.open = True
    refused = stale_lease("a", 1)
    with pytest.raises(TransportError, match=refused):
        runner.advance()
    before = _snapshot(runner)
    assert before["live"][0][0] == [] and before["pool"] == (1, 3, [True, False, False, False])
    with pytest.raises(TransportError, match=refused):
        runner.advance()
    assert _snapshot(runner) == before
    assert runner.take_acks() == ((), (), ())


# -- hisparse bench nixl: the READ window ---------------------------------------------------


@pytest.mark.parametrize(("total_mib", "page_kib", "chunk_pages", "pages", "window"), [
    (1, 256, 3, 4, 2),  # 4 pages in chunks of 3: 2 chunks (the last one short)
    (1, 256, 4, 4, 1),  # one chunk of every page
    (2, 1024, 1, 2, 2),  # one page a chunk
])
def test_the_nixl_bench_posts_every_chunk_of_its_read_at_once(
        monkeypatch: pytest.MonkeyPatch, total_mib: int, page_kib: int, chunk_pages: int,
        pages: int, window: int) -> None:
    # the timed READ's decoder reads chunks of `chunk_pages` pages with a window of the
    # request's chunk count, ceil(pages / chunk_pages): every chunk in flight at once
    # (kills bench/nixl.py:44:arith:2, a window of pages * chunk_pages, and 44:var:3, of
    # ceil(pages / total_mib))
    _, decoders = _stand_ins(monkeypatch)
    doc = nixl_bench.run(total_mib=total_mib, page_kib=page_kib, chunk_pages=chunk_pages,
                         reps=1)
    assert (doc["bytes"], doc["pages"], doc["page_bytes"], doc["chunk_pages"]) == (
        total_mib << 20, pages, page_kib * 1024, chunk_pages)
    assert [(d.name, d.chunk_pages, d.window) for d in decoders] == [
        ("bench-decoder", chunk_pages, window)]
    assert (decoders[0].live, decoders[0].peers) == ({}, {})
