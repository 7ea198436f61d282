"""The accounting executor agrees exactly with the reference executor.

It holds no bytes, so its figures are trusted only where the reference (which moves
and compares every byte) gives the same ones: rows, miss plans, counters and hot state
per resolve, and whole simulated runs (hits, misses, spills, bytes counted, series).
"""

from __future__ import annotations

import random
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pytest

from hisparse.executor.accounting import AccountingExecutor
from hisparse.executor.base import ResolveBatch
from hisparse.executor.errors import BadBatch, HotCapacityError, PendingHostWrite
from hisparse.executor.layout import PoolLayout
from hisparse.executor.reference import ReferenceExecutor
from hisparse.simulate import SimulateOptions, simulate

TRACE = Path(__file__).parent / "data" / "mooncake_small.jsonl"
LAYOUT = PoolLayout(gpu_blocks=6, host_blocks=10, block_tokens=4, row_bytes=16,
                    hot_rows=12, slots=3)


def _batch(rng: random.Random, step: int, k: int = 6) -> ResolveBatch:
    """Entries for random slots (a slot's entries consecutive, up to 2 of them), with
    padding, duplicates, resident and host positions."""
    slots: list[int] = []
    for s in rng.sample(range(LAYOUT.slots), rng.randint(1, LAYOUT.slots)):
        slots += [s] * rng.randint(1, 2)
    n = len(slots)
    topk = np.array([[rng.choice([-1, *range(20)]) for _ in range(k)] for _ in range(n)],
                    np.int32)
    resident = np.where((topk >= 0) & (topk % 5 == 0), topk % LAYOUT.resident_rows, -1)
    host = np.where((topk >= 0) & (resident < 0), topk % LAYOUT.host_rows, -1)
    return ResolveBatch(slots=np.array(slots, np.int32), topk=topk,
                        resident_row=resident.astype(np.int32),
                        host_row=host.astype(np.int32), step=step)


@pytest.mark.parametrize("seed", range(6))
def test_every_resolve_matches_the_reference(seed: int) -> None:
    rng = random.Random(seed)
    ref, acc = ReferenceExecutor(), AccountingExecutor()
    rp, ap = ref.allocate(LAYOUT), acc.allocate(LAYOUT)
    compared = 0
    for step in range(1, 60):
        if rng.random() < 0.1:
            s = rng.randrange(LAYOUT.slots)
            ref.reset_slot(rp, s)
            acc.reset_slot(ap, s)
        batch = _batch(rng, step)
        try:
            want = ref.resolve(rp, batch)
        except HotCapacityError as exc:
            with pytest.raises(HotCapacityError) as refused:
                acc.resolve(ap, batch)
            assert str(refused.value) == str(exc)
        else:
            got = acc.resolve(ap, batch)
            assert np.array_equal(got.rows, want.rows)
            assert np.array_equal(got.plan, want.plan)
            assert (got.resident_hits, got.hot_hits, got.misses) == (
                want.resident_hits, want.hot_hits, want.misses)
            compared += 1
        assert np.array_equal(ap.hot_tag, rp.hot_tag)
        assert np.array_equal(ap.hot_stamp, rp.hot_stamp)
    assert compared > 30


def test_a_refused_resolve_changes_nothing() -> None:
    acc = AccountingExecutor()
    pools = acc.allocate(LAYOUT)
    ok = ResolveBatch(slots=np.array([0], np.int32),
                      topk=np.arange(LAYOUT.hot_rows, dtype=np.int32)[None, :],
                      resident_row=np.full((1, LAYOUT.hot_rows), -1, np.int32),
                      host_row=np.arange(LAYOUT.hot_rows, dtype=np.int32)[None, :], step=1)
    acc.resolve(pools, ok)
    before = acc.snapshot(pools)
    # the slot is full and this entry needs one more row than an entry may evict
    over = ResolveBatch(slots=np.array([0, 0], np.int32),
                        topk=np.stack([np.arange(12, 24), np.arange(24, 36)]).astype(np.int32),
                        resident_row=np.full((2, 12), -1, np.int32),
                        host_row=np.stack([np.arange(12, 24), np.arange(24, 36)]).astype(
                            np.int32) % LAYOUT.host_rows, step=2)
    with pytest.raises(HotCapacityError):
        acc.resolve(pools, over)
    after = acc.snapshot(pools)
    assert all(np.array_equal(before[k], after[k]) for k in before)
    # a malformed batch (the same step again) is refused before anything is decided, in
    # the reference's words (accounting.py:102:call:3 skipped the check)
    ref = ReferenceExecutor()
    ref_pools = ref.allocate(LAYOUT)
    ref.resolve(ref_pools, ok)
    for ex, p in ((acc, pools), (ref, ref_pools)):
        with pytest.raises(BadBatch, match=r"^step 1 must exceed the previous resolve's step 1"):
            ex.resolve(p, ok)  # type: ignore[arg-type]
    assert all(np.array_equal(before[k], acc.snapshot(pools)[k]) for k in before)


def test_stream_acks_and_host_read_guard_as_the_reference() -> None:
    acc = AccountingExecutor()
    pools = acc.allocate(LAYOUT)
    acc.enqueue_spills(pools, [(7, 0, 3), (8, 1, 4)])
    assert acc.queued() == [7, 8] and acc.completed() == []
    with pytest.raises(PendingHostWrite):
        acc.read_host_rows(pools, np.array([3 * LAYOUT.block_tokens]))
    acc.release(1)
    assert acc.completed() == [7] and acc.queued() == [8]
    assert acc.read_host_rows(pools, np.array([3 * LAYOUT.block_tokens])).shape == (1, 0)


def _figures(opts: SimulateOptions) -> dict[str, object]:
    rep = asdict(simulate(opts))
    assert rep["violations"] == 0
    for gone in ("sizes", "notes", "invariant_checks", "data_mismatches"):
        rep.pop(gone)
    return rep


@pytest.mark.parametrize("opts", [
    SimulateOptions(seed=0),
    SimulateOptions(seed=3, num_speculative_tokens=1, layers=4),
    SimulateOptions(seed=5, workload="mooncake", workload_path=TRACE, block_tokens=64,
                    gpu_blocks=40, host_blocks=120, abort_rate=0.0, max_decode=30,
                    top_k=96, row_bytes=48),
], ids=["synthetic", "speculative-4-layers", "mooncake"])
def test_whole_runs_match_the_reference(opts: SimulateOptions) -> None:
    """Every count and per-step series (hits, misses, spills, bytes, occupancy) equal."""
    want = _figures(opts)
    got = _figures(replace(opts, executor="accounting"))
    assert want["spills"] and want["misses"] and want["h2d_bytes"]  # offload exercised
    assert got == want
