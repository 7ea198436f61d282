"""Rules of the simulator's runs, the MultiConnector's loader, the connector config and the
worker process that survivors of the whole mutation run showed (docs/mutation-run7): each
line ran, but no test asserted its effect."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

import pytest

import hisparse.workerproc as workerproc
from hisparse.config import HiSparseConfig
from hisparse.connectors.base import ConnectorError
from hisparse.connectors.config import hisparse_config_from
from hisparse.connectors.multi import MultiConnectorScheduler
from hisparse.coordinator import HiSparseCoordinator
from hisparse.indexer_sim import IndexerSimulation
from hisparse.simulate import SimulateOptions, Simulation
from hisparse.workerproc import ProcessWorker, WorkerProcessError
from hisparse.workerwire import Frame, FrameError
from hisparse.workload import Arrival
from tests.connector_helpers import NamedChild


def left_held(c: HiSparseCoordinator) -> dict[str, int]:
    """The coordinator's non-empty tables once its published pages are evicted."""
    c.evict_published()
    return {name: n for name, n in c.table_sizes().items() if n}


# --- a P/D import that can never fit -------------------------------------------------------


def test_an_import_larger_than_the_host_pool_is_aborted_and_counted_once_as_too_large() -> None:
    # "a" (two pages) lands on the device target and takes two of the four GPU blocks;
    # "big" (three pages: not more than the GPU pool, so admissible at arrival) then gets
    # the host target, and three pages never fit a host pool of two: it is aborted (the
    # coordinator forgets it), counted once as too large and never admitted, and its
    # prefiller drops its pages (kills simulate.py:515:call:61, which left it declared;
    # simulate.py:517:arith:27 and simulate.py:518:arith:28, which counted it down)
    arrivals = [Arrival(0, "a", ("a0", "a1"), 2), Arrival(0, "big", ("b0", "b1", "b2"), 2)]
    sim = Simulation(SimulateOptions(pd_share=1.0, gpu_blocks=4, host_blocks=2, steps=20,
                                     abort_rate=0.0), arrivals)
    assert sim.coordinator._host_capacity == 2
    rep = sim.run()
    assert rep.violations == 0 and rep.data_mismatches == 0, rep.notes
    assert (rep.requests, rep.too_large, rep.never_admitted, rep.still_running,
            rep.finished, rep.aborted) == (2, 1, 1, 1, 0, 0)
    assert rep.pages_admitted == 2  # "a"'s pages only
    assert rep.notes[-1] == ("1 request(s) never admitted: more pages than the whole GPU "
                             "pool (raise --gpu-blocks)")
    assert rep.imports["arrived"] == 2 and rep.imports["device"] == 1
    assert rep.imports["host"] == 0 and rep.imports["failed"] == 0
    c = sim.coordinator
    assert "big" not in c.state.req and "big" not in c.state.page_keys
    assert left_held(c) == {}
    assert c.state.host_used == 0 and sim.kv.num_free == sim.kv.num_blocks
    assert sim.pd is not None and sim.pd.held == set() and sim.pending == []


# --- the indexer run: a request still restoring at the end --------------------------------


class DrainCounted(IndexerSimulation):
    """An indexer run that notes how many requests still wait for restores as it drains."""

    restoring_at_drain: list[str]

    def drain(self) -> None:
        self.restoring_at_drain = sorted(self.restoring)
        super().drain()


def test_a_request_still_restoring_when_the_run_ends_is_finished_with_the_coordinator() -> None:
    # seed 2, 8 requests, 31 steps: the run ends with restores pending. Each such request
    # ends like a running one: finished with the coordinator, which then holds nothing
    # (kills indexer_sim.py:263:call:27, which left it running there with its GPU blocks)
    opts = replace(SimulateOptions(indexer_offload=True, offload_blocks=96), seed=2,
                   requests=8, steps=31)
    sim = DrainCounted(opts)
    rep = sim.run()
    assert rep.violations == 0 and rep.data_mismatches == 0, rep.notes
    cut = sim.restoring_at_drain
    assert cut  # (not vacuous: the run ended with restores pending)
    c = sim.coordinator
    assert not set(cut) & set(c.state.req)
    assert left_held(c) == {}
    assert c.state.host_used == 0 and sim.kv.num_free == sim.kv.num_blocks
    assert sim.restoring == {} and sim.group.num_free == sim.group.blocks


# --- the MultiConnector: the loader is the last answer's ----------------------------------


class Answering(NamedChild):
    """A scheduler child whose matched-token answer the test sets between questions."""

    def __init__(self, name: str, matched: int | None) -> None:
        super().__init__(name)
        self.matched = matched
        self.allocs: list[tuple[str, tuple[int, ...], int]] = []

    def get_num_new_matched_tokens(self, request_id: str, num_computed_tokens: int
                                   ) -> int | None:
        return self.matched

    def update_state_after_alloc(self, request_id: str, block_ids: Sequence[int],
                                 num_external_tokens: int) -> None:
        self.allocs.append((request_id, tuple(block_ids), num_external_tokens))

    def build_connector_meta(self) -> bytes | None:
        return None

    def parse_worker_meta(self, raw: bytes) -> object:
        return raw

    def apply_worker_meta(self, parsed: object) -> None:
        pass

    def request_finished(self, request_id: str, block_ids: Sequence[int]) -> bool:
        return False

    def get_stats(self) -> Mapping[str, int]:
        return {}


@pytest.mark.parametrize("now", [None, 0])
def test_a_request_asked_again_forgets_a_loader_no_child_matches_now(now: int | None) -> None:
    # a request asked again (its allocation failed, it waits a step) while the child that
    # matched before answers "not known yet" (None) or nothing (0) now: no child loads it,
    # so the allocation gives every child zero external tokens
    # (kills connectors/multi.py:144:call:7 for None, connectors/multi.py:149:call:3 for 0:
    # both kept the earlier loader, which then got the blocks and tokens)
    a, b = Answering("a", 8), Answering("b", 0)
    m = MultiConnectorScheduler([a, b])
    assert m.get_num_new_matched_tokens("r", 0) == 8 and m.loader("r") == "a"
    a.matched = now
    assert m.get_num_new_matched_tokens("r", 0) == now
    assert m.loader("r") is None
    m.update_state_after_alloc("r", [3, 4], 0)
    assert a.allocs == b.allocs == [("r", (), 0)]


# --- the connector config: a nameless entry is refused on its name alone ------------------


class Recorded(Mapping[str, Any]):
    """A config object (any Mapping) that records which of its keys were read."""

    def __init__(self, entries: dict[str, Any]) -> None:
        self._entries = entries
        self.read: list[str] = []

    def __getitem__(self, key: str) -> Any:
        self.read.append(key)
        return self._entries[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


@pytest.mark.parametrize("name", [{}, {"kv_connector": ""}, {"kv_connector": 7}])
def test_an_entry_naming_no_connector_is_refused_before_its_extra_config_is_read(
        name: dict[str, Any]) -> None:
    # whatever its extra config holds (here an unreadable one would fail), the entry is
    # refused for its name, the one key read (kills connectors/config.py:27:reorder:1,
    # which read the extra config first)
    extra = {"kv_connector_extra_config": {"host_pool_blocks": 4}}
    top = Recorded({**name, **extra})
    with pytest.raises(ConnectorError, match=r"^kv_transfer_config: kv_connector must name "
                                             r"a connector$"):
        hisparse_config_from(top)
    assert top.read == ["kv_connector"]
    child = Recorded({**name, **extra})
    multi = {"kv_connector": "MultiConnector",
             "kv_connector_extra_config": {"connectors": [child]}}
    with pytest.raises(ConnectorError, match=r"^MultiConnector child 0: kv_connector must "
                                             r"name a connector$"):
        hisparse_config_from(multi)
    assert child.read == ["kv_connector"]


# --- the worker process: stopped when it does not answer or its answer is not a frame -----

CONFIG = HiSparseConfig(host_pool_blocks=4, block_tokens=4, row_bytes=16, top_k=4, layers=1)


def process_worker(timeout_s: float = workerproc.ANSWER_TIMEOUT_S) -> ProcessWorker:
    return ProcessWorker(0, CONFIG, gpu_blocks=4, slots=2, executor="reference",
                         max_positions=16, timeout_s=timeout_s)


def reap(w: ProcessWorker) -> None:
    """Whatever a failed assertion left: the test's own child killed, then closed."""
    if w._proc.is_alive():
        w._proc.kill()
    w.close()


@pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="needs SIGSTOP")
def test_a_worker_that_does_not_answer_is_killed_at_once_and_never_asked_to_close(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the child is stopped (SIGSTOP): it cannot answer, however long the wait. The call
    # fails naming op and wait, the child is killed (SIGKILL) and the pipe closed, and the
    # polite stop (a close frame, then up to 5 s for each of its answer, the exit and a
    # terminate) is never run on an open pipe; later calls are refused
    # (kills workerproc.py:208:call:29, which ran the polite stop on the stopped child,
    # and workerproc.py:198:call:16, which left the pipe open)
    polite: list[bool] = []
    stop = workerproc._stop

    def recorded(proc: BaseProcess, conn: Connection) -> None:
        polite.append(not conn.closed)  # a close frame can be sent only on an open pipe
        stop(proc, conn)

    monkeypatch.setattr(workerproc, "_stop", recorded)  # the finalizer takes it at start
    w = process_worker()  # a running child answers within the usual wait, however busy
    try:
        assert w.queued() == ()
        w.timeout_s = 0.01  # a stopped one never answers: a short wait decides as well
        pid = w.pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        _, status = os.waitpid(pid, os.WUNTRACED)
        assert os.WIFSTOPPED(status)
        with pytest.raises(WorkerProcessError, match=r"^rank 0: no answer to 'queued' within "
                                                     r"0\.01 s$"):
            w.queued()
        assert w._proc.exitcode == -signal.SIGKILL
        assert w._conn.closed
        assert True not in polite
        with pytest.raises(WorkerProcessError, match=r"^rank 0: the worker process was "
                                                     r"stopped$"):
            w.land(None)
        w.close()
        assert True not in polite
    finally:
        reap(w)


def test_an_answer_that_is_not_a_frame_stops_the_worker(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # an answer with a stray byte (a corrupted pipe: the two sides are out of step) fails
    # the call with the FrameError and stops the worker: the polite close ends it and later
    # calls are refused (kills workerproc.py:218:call:31, which left it running)
    w = process_worker()
    try:
        assert w.queued() == ()
        unpack = workerproc.unpack

        def corrupted(raw: bytes) -> Frame:
            return unpack(raw + b"\0")

        monkeypatch.setattr(workerproc, "unpack", corrupted)
        with pytest.raises(FrameError, match=r"^1 stray bytes after the frame's arrays$"):
            w.queued()
        monkeypatch.setattr(workerproc, "unpack", unpack)
        assert w._proc.exitcode == 0  # it answered the close and exited
        with pytest.raises(WorkerProcessError, match=r"^rank 0: the worker process was "
                                                     r"stopped$"):
            w.queued()
    finally:
        reap(w)
