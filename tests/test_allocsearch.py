"""The equal-HBM benchmark's allocation search, driven by a fake allocator (CPU)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from hisparse.bench.allocsearch import SearchError, largest_fit


class FakeOOM(Exception):
    pass


class FakeAllocator:
    """A device of ``capacity`` bytes: allocations past it raise, frees give bytes back."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self.peak = 0

    def alloc(self, n: int) -> int:
        if self.used + n > self.capacity:
            raise FakeOOM(n)
        self.used += n
        self.peak = max(self.peak, self.used)
        return n

    def free(self, n: int) -> None:
        self.used -= n


def engine_fits(
    dev: FakeAllocator, fixed: int, per_request: int, workspace: int
) -> Callable[[int], bool]:
    """An engine build: fixed state, per-request state, then a step's workspace; every
    allocation is freed whether the build succeeded or not."""

    def fits(batch: int) -> bool:
        held: list[int] = []
        try:
            held.append(dev.alloc(fixed))
            for _ in range(batch):
                held.append(dev.alloc(per_request))
            held.append(dev.alloc(workspace * batch))
            return True
        except FakeOOM:
            return False
        finally:
            for n in held:
                dev.free(n)

    return fits


@pytest.mark.parametrize("guess", [1, 2, 7, 8, 9, 30, 99, 100])
def test_finds_the_true_largest_batch_from_any_guess(guess: int) -> None:
    dev = FakeAllocator(capacity=10_000)
    # fixed 1000, 900 + 100 workspace per request: 9 requests fit exactly (1000 + 9000)
    fits = engine_fits(dev, fixed=1000, per_request=900, workspace=100)
    got = largest_fit(fits, guess=guess, limit=100)
    assert got.batch == 9
    assert (9, True) in got.probes and (10, False) in got.probes
    assert dev.used == 0  # a refused probe leaves nothing allocated
    assert len(got.probes) == len({b for b, _ in got.probes})  # no batch probed twice


def test_a_close_guess_costs_few_probes() -> None:
    dev = FakeAllocator(capacity=1 << 40)
    per = 173 << 20
    truth = ((1 << 40) - (5 << 30)) // per
    fits = engine_fits(dev, fixed=5 << 30, per_request=per, workspace=0)
    got = largest_fit(fits, guess=truth - 1, limit=100_000)
    assert got.batch == truth and len(got.probes) <= 4
    # from above too: the search starts down from the guess, not from the limit
    # (allocsearch.py:60:var:6)
    got = largest_fit(fits, guess=truth + 1, limit=100_000)
    assert got.batch == truth and got.probes == [(truth + 1, False), (truth, True)]


def test_nothing_fits_and_everything_fits() -> None:
    dev = FakeAllocator(capacity=500)
    assert largest_fit(engine_fits(dev, 1000, 1, 0), guess=5, limit=50).batch == 0
    assert largest_fit(engine_fits(dev, 0, 1, 0), guess=5, limit=50).batch == 50
    assert dev.used == 0


def test_a_bad_guess_or_limit_is_refused() -> None:
    with pytest.raises(SearchError, match="guess"):
        largest_fit(lambda b: True, guess=0, limit=5)
    with pytest.raises(SearchError, match="limit"):
        largest_fit(lambda b: True, guess=1, limit=0)
