"""Two worker processes on two GPUs against one coordinator, private and shared backing.

Every resolved row is checked bit for bit on both ranks (against each rank's reference
oracle and the bytes written for its position, and rank against rank), with the
coordinator's invariants after every step. With shared backing every miss rank 1
resolves from the host reads a page rank 0's copy wrote, ordered by an inter-process
event; the pool's host memory is registered once, not once per rank.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hisparse.tp import TpOptions, launch

pytestmark = pytest.mark.gpu


def _two_gpus() -> None:
    import cupy

    count = int(cupy.cuda.runtime.getDeviceCount())
    if count < 2:
        pytest.skip(f"needs a second NVIDIA GPU (CuPy sees {count} GPU)")


@pytest.mark.parametrize("backing", ["private", "shared"])
def test_two_gpu_ranks_resolve_every_row_bit_for_bit(backing: str) -> None:
    _two_gpus()
    o = TpOptions(ranks=2, backing=backing, executor="cuda")
    reports = launch(o, transport="torch", timeout_s=400)
    coord = reports[0]["coordinator"]
    assert coord["steps_checked"] == reports[0]["steps"] == reports[1]["steps"]
    assert coord["open_spills"] == 0 and coord["prefix_hits"] > 0 and coord["spills"] > 0
    for r in reports:
        assert r["mismatches"] == 0, r
        assert r["rows_checked"] > 10_000 and r["misses"] > 0
        assert r["spills_taken"] == coord["spills"]
    pool = o.host_pool_bytes
    if backing == "shared":
        assert [r["role"] for r in reports] == ["writer", "reader"]
        assert all(r["memory"]["pinned_bytes"] == pool for r in reports)  # one registration
        assert reports[1]["spill_us_n"] > 0  # the reader took (ordered) spill commands
        assert reports[1]["refusals_checked"] == 2  # unannounced events: refused, no change
    else:
        assert all(r["memory"]["pinned_bytes"] == pool for r in reports)  # one pool each


@pytest.mark.parametrize("backing", ["private", "shared"])
def test_two_ranks_on_one_gpu(backing: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Where one GPU is all there is: two processes on one device, the same protocol,
    inter-process events and registered file; every row bit for bit, and the same
    accounting the two-GPU test asserts (the GPU-only mutants of ``tp/run.py`` run here)."""
    shm = f"/dev/shm/hisparse-tp-test-{tmp_path_factory.getbasetemp().name}-{backing}"
    o = TpOptions(ranks=2, backing=backing, executor="cuda", gpus=1,
                  shm_path=shm if backing == "shared" else "")
    reports = launch(o, transport="pipe", timeout_s=400)
    coord = reports[0]["coordinator"]
    assert coord["steps_checked"] == reports[0]["steps"] == reports[1]["steps"]
    assert coord["open_spills"] == 0 and coord["prefix_hits"] > 0 and coord["spills"] > 0
    for r in reports:
        assert r["mismatches"] == 0 and r["rows_checked"] > 10_000 and r["misses"] > 0, r
        assert r["spills_taken"] == coord["spills"]
        assert r["resolve_us_n"] == r["decodes"] > 0  # every decode timed on the device
        assert r["memory"]["pinned_bytes"] == o.host_pool_bytes
    if backing == "shared":
        assert [r["role"] for r in reports] == ["writer", "reader"]
        assert reports[1]["spill_us_n"] > 0  # the reader took (ordered) spill commands
        assert reports[1]["refusals_checked"] == 2  # unannounced events: refused, no change
        assert not Path(shm).exists()  # the writer unlinked the name once every rank mapped it


def test_one_rank_on_shared_backing(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Shared backing with no reader: the writer alone still unlinks the pool's name once
    it has mapped it (the name is rank 0's to drop, whatever the rank count), and every
    row still resolves bit for bit."""
    shm = f"/dev/shm/hisparse-tp-test-{tmp_path_factory.getbasetemp().name}-one"
    o = TpOptions(ranks=1, backing="shared", executor="cuda", gpus=1, shm_path=shm)
    [report] = launch(o, transport="pipe", timeout_s=400)
    assert report["role"] == "writer" and report["coordinator"]["open_spills"] == 0
    assert report["mismatches"] == 0 and report["rows_checked"] > 10_000, report
    assert report["memory"]["pinned_bytes"] == o.host_pool_bytes
    assert not Path(shm).exists()
