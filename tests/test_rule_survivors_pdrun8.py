"""Rules of the worker's P/D import runner (a page mirrored into GPU block 0, a landed
chunk whose slot release the pool refuses) that survivors of the whole mutation run
showed no test stated (docs/mutation-run7)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from hisparse.pdimport import ImportRunner
from hisparse.transport import TransportError
from hisparse.transport.staging import StagingLease
from tests.test_pdimport_runner import (
    BLOCK,
    LAYERS,
    Rig,
    command,
    device_block,
    drain,
    expected_block,
    gated,
    host_block,
    stale_lease,
)


def test_a_host_page_mirrored_into_gpu_block_0_lands_in_that_resident_block(loopback_rig: Rig) -> None:
    # a host import whose final page is needed immediately in resident GPU block 0: the
    # page lands in its host block and in GPU block 0 of every cache, and no other device
    # row is written (kills pdimport/runner.py:335:none:1, which took block 0 for "no
    # mirror" and left GPU block 0 as it was)
    num_tokens = 2 * BLOCK - 1
    pages = loopback_rig.hold("m", num_tokens, 21)
    loopback_rig.runner.start(command(0, "m", "host", num_tokens, [None, 0], [3, 5]))
    before = [p.device.copy() for p in loopback_rig.pools]
    landed, done, failed = drain(loopback_rig)
    assert (landed, done, failed) == ({0: [1, 2]}, [0], {})
    for layer in range(LAYERS):
        assert np.array_equal(host_block(loopback_rig, layer, 3), expected_block(pages, 0, layer,
                                                                        num_tokens))
        assert np.array_equal(host_block(loopback_rig, layer, 5), expected_block(pages, 1, layer,
                                                                        num_tokens))
        assert np.array_equal(device_block(loopback_rig, layer, 0), expected_block(pages, 1, layer,
                                                                          num_tokens))
        assert np.array_equal(loopback_rig.pools[layer].device[BLOCK:], before[layer][BLOCK:])


def _snapshot(runner: ImportRunner, pools: list[Any]) -> dict[str, Any]:
    """The runner's imports, the pool's leases, its counts and every cache."""
    pool = runner.transport.pool
    return {
        "live": {iid: (sorted(imp.copied), imp.failure, list(imp.handle.states),
                       list(imp.handle.dests), imp.handle.error)
                 for iid, imp in runner.live.items()},
        "pool": (pool.in_use, pool.num_free,
                 [pool.holds(StagingLease("a", s)) for s in range(pool.slots)]),
        "stats": (runner.stats.started, runner.stats.done, runner.stats.failed,
                  runner.stats.reasons.copy(), runner.stats.staged_bytes,
                  runner.stats.direct_bytes),
        "caches": [(p.device.tobytes(), p.host.tobytes()) for p in pools],
    }


def test_a_landed_chunk_whose_slot_release_is_refused_stays_unsettled_and_unreported() -> None:
    # chunks 0 and 1 of a host import hold slots 0 and 1 with their READs in flight; slot 0
    # goes back to the pool behind the runner's back; once the READs land, returning chunk
    # 0's slot is refused by the pool, and chunk 0 is not settled: no page reported, and the
    # next advance copies it again and is refused the same way, changing nothing (kills
    # pdimport/runner.py:303:reorder:3, which settled chunk 0 before the release, so the
    # next advance leased its slot again for chunk 2 and finished the import with page 1
    # never reported)
    runner, tr, staging, _ = gated()
    pools = runner.pools
    h = runner.live[0].handle
    assert h.in_flight == 2 and h.leases == (StagingLease("a", 0), StagingLease("a", 1))
    staging.release([StagingLease("a", 0)])
    tr.open = True
    refused = stale_lease("a", 0)
    with pytest.raises(TransportError, match=refused):
        runner.advance()
    assert runner.live[0].copied == set()
    assert runner.take_acks() == ((), (), ())
    # nothing settled, nothing counted (a refused landing counted its bytes, then counted
    # them again at each retry)
    assert (runner.stats.staged_bytes, runner.stats.direct_bytes) == (0, 0)
    before = _snapshot(runner, pools)
    assert before["pool"] == (1, 3, [False, True, False, False])
    with pytest.raises(TransportError, match=refused):
        runner.advance()
    assert _snapshot(runner, pools) == before
    assert runner.take_acks() == ((), (), ())
