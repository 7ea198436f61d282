"""Tensor-parallel ranks without a GPU: the event ring's wait rule, the shared host file,
and the two-process harness on reference executors against the coordinator with ranks."""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np
import pytest

from hisparse.executor.cuda.hostmem import SharedHostFile
from hisparse.executor.cuda.ipc import EventNotRecorded, EventRing
from hisparse.executor.errors import ExecutorConfigError
from hisparse.tlc import TlcInstall
from hisparse.tp import TpOptions, launch
from hisparse.tracecheck import check_traces


def test_event_ring_waits_only_on_announced_records() -> None:
    """The reuse hazard: record 5 lives in slot 0 of a 4-slot ring, like record 1; a wait
    for 5 before 5 is announced would bind to record 1 and order nothing."""
    owner, peer = EventRing(4), EventRing(4)
    made = [owner.advance() for _ in range(4)]
    assert made == [(1, 0), (2, 1), (3, 2), (4, 3)]
    peer.announce(4)
    assert peer.wait_slot(4) == 3
    with pytest.raises(EventNotRecorded) as err:
        peer.wait_slot(5)  # slot 0 still holds record 1
    assert (err.value.record, err.value.announced) == (5, 4)
    assert peer.announced == 4  # the refusal changed nothing
    assert owner.advance() == (5, 0)
    peer.announce(5)
    assert peer.wait_slot(5) == 0
    assert peer.wait_slot(1) == 0  # re-recorded since: a wait on a later record, never shorter
    with pytest.raises(EventNotRecorded):
        peer.wait_slot(0)
    with pytest.raises(ValueError, match="announced after"):
        peer.announce(3)
    with pytest.raises(ValueError, match="at least 1 slot"):
        EventRing(0)


def test_shared_host_file_is_one_memory_for_every_mapping(tmp_path: Path) -> None:
    path = tmp_path / "pool"
    writer = SharedHostFile(path, 4096, create=True)
    reader = SharedHostFile(path, 4096, create=False)
    w = np.ctypeslib.as_array((ctypes.c_uint8 * 4096).from_address(writer.ptr))
    r = np.ctypeslib.as_array((ctypes.c_uint8 * 4096).from_address(reader.ptr))
    assert not r.any()  # a new file reads as zeros
    w[100:104] = [1, 2, 3, 4]
    assert r[100:104].tolist() == [1, 2, 3, 4]
    assert writer.ptr != reader.ptr
    with pytest.raises(FileExistsError):
        SharedHostFile(path, 4096, create=True)  # two runs never share a file by accident
    with pytest.raises(ExecutorConfigError, match="every rank must lay out the same pools"):
        SharedHostFile(path, 8192, create=False)
    writer.unlink()
    assert not path.exists()
    assert r[100:104].tolist() == [1, 2, 3, 4]  # the mapping outlives the name
    reader.close()
    writer.close()
    with pytest.raises(ExecutorConfigError):
        SharedHostFile(tmp_path / "empty", 0, create=True)


@pytest.mark.tlc
def test_two_reference_ranks_in_two_processes_agree_with_their_oracles(
    tlc: TlcInstall, tmp_path: Path
) -> None:
    """The harness end to end without a GPU: two processes, bytes between them, every
    resolved row checked on both ranks, the coordinator's invariants after every step;
    rank 0's recorded trace is a behaviour of the spec (two ranks, private backing)."""
    trace = tmp_path / "tp.jsonl"
    reports = launch(TpOptions(executor="reference", ranks=2, trace=str(trace)), timeout_s=120)
    assert [r["rank"] for r in reports] == [0, 1]
    coord = reports[0]["coordinator"]
    for r in reports:
        assert r["mismatches"] == 0
        assert r["rows_checked"] > 10_000
        assert r["misses"] > 0 and r["spills_taken"] == coord["spills"] > 0
    assert coord["prefix_hits"] > 0
    assert coord["steps_checked"] == reports[0]["steps"] == reports[1]["steps"]
    assert coord["open_spills"] == 0 and coord["invariant_checks"] > coord["steps_checked"]
    checked = check_traces([trace], install=tlc)
    assert checked.accepted, checked
    assert checked.steps == coord["trace_steps"] > 100


def test_a_failing_rank_fails_the_run_with_its_traceback() -> None:
    from hisparse.tp import TpRunFailed

    with pytest.raises(TpRunFailed, match="no shared host memory"):
        launch(TpOptions(executor="reference", ranks=2, backing="shared"), timeout_s=60)
