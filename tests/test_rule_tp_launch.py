"""Rule: ``launch`` starts one process per rank, wires the ranks' groups (a star of pipes,
or ``torch.distributed`` at one free ``tcp://`` port), hands each rank the run's options
(with shared backing, one fresh /dev/shm path for all), returns every rank's report in
rank order, and turns a rank's traceback, a rank's death or silence into ``TpRunFailed``,
stopping the ranks still running (``hisparse/tp/launch.py``).

One test runs the real thing: two spawned processes on reference executors, without TLC,
whose reports equal those of the same run in two threads of this process. The others
give ``launch`` a stand-in ``multiprocessing`` context whose processes are threads (real
pipes, real ``wait``), and a stand-in ``run_rank``, so each test sees exactly what a rank
was handed and what the parent did to each process.

From the guard survivors of the first mutation run of the file (docs/mutation-survivors.md,
"Files run for the first time"): the file's only harness tests were ``tlc``-marked or
failed on every rank alike, so 24 of 38 mutants survived ``tests/test_tp.py``.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
import threading
import types
from collections.abc import Callable
from dataclasses import replace
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from typing import Any

import pytest

from hisparse.tp.group import Group, PipeGroup, TorchGroup
from hisparse.tp.launch import launch
from hisparse.tp.run import TpOptions, TpRunFailed, run_rank

# (``hisparse.tp`` re-exports the function ``launch`` under the module's name)
launch_mod = importlib.import_module("hisparse.tp.launch")
SMALL = TpOptions(executor="reference", ranks=2, requests=8, steps=30, seed=3)
# what a report holds that differs between two runs of the same options (timings, memory)
UNSTABLE = ("memory", "resolve_us_median", "spill_us_median")


def _stable(report: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in report.items() if k not in UNSTABLE}


def _threaded(o: TpOptions) -> list[dict[str, Any]]:
    """``run_rank`` on every rank in threads of this process over ``PipeGroup`` pipes."""
    pipes: list[list[Connection]] = [[] for _ in range(o.ranks)]
    for r in range(1, o.ranks):
        a, b = Pipe()
        pipes[0].append(a)
        pipes[r].append(b)
    reports: dict[int, dict[str, Any]] = {}

    def rank(r: int) -> None:
        reports[r] = run_rank(o, PipeGroup(r, o.ranks, pipes[r]))

    threads = [threading.Thread(target=rank, args=(r,), daemon=True) for r in range(o.ranks)]
    for t in threads:
        t.start()
    for t in threads:  # the limit only catches a rank stuck forever; the run takes seconds
        t.join(timeout=120)
    assert sorted(reports) == list(range(o.ranks))
    return [reports[r] for r in range(o.ranks)]


# -- a stand-in multiprocessing context: processes are threads ------------------------------


def _dup(c: Connection) -> Connection:
    """The child's own copy of a pipe end, as spawning a process gives it one."""
    return Connection(os.dup(c.fileno()), readable=c.readable, writable=c.writable)


class ThreadProcess:
    """A process of the stand-in context, run as a thread. As a spawned process does, it
    gets its own copies of the pipe ends it is handed (the parent's stay open until the
    parent closes them) and keeps no reference to the parent's; its copies close when it
    ends, as a process's exit closes them. A process created ``dead`` runs nothing: it
    exits at once with code -9."""

    def __init__(self, ctx: ThreadContext, target: Callable[..., None], args: tuple[Any, ...],
                 daemon: bool) -> None:
        self.ctx, self.target, self.daemon = ctx, target, daemon
        self._args: tuple[Any, ...] | None = args
        self.rank: int = args[0]
        self.exitcode: int | None = None
        self.joins: list[float | None] = []
        self.terminated = False
        self.started = False
        self._own: list[Connection] = []
        self._reaped = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)

    def _copy(self, x: Any) -> Any:
        if isinstance(x, Connection):
            d = _dup(x)
            self._own.append(d)
            return d
        if isinstance(x, list):
            return [self._copy(y) for y in x]
        return x

    def _main(self, args: tuple[Any, ...]) -> None:
        code = -9
        try:
            if self.rank not in self.ctx.dead:
                self.target(*args)
                code = 0
        finally:
            for c in self._own:
                c.close()
        # a process's pipes close as it exits, before the parent can reap it: here its
        # exit code is known only once the parent joins it (the race at its widest)
        self._reaped.wait(30)
        self.exitcode = code

    def start(self) -> None:
        assert self._args is not None
        self.started = True
        args = tuple(self._copy(a) for a in self._args)
        self._args = None  # (multiprocessing drops the process's arguments at start too)
        self._thread = threading.Thread(target=self._main, args=(args,), daemon=True)
        self._thread.start()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout: float | None = None) -> None:
        self.joins.append(timeout)
        self._reaped.set()
        # (a join without a limit on a process never stopped would wait forever: bounded
        # here, so that such a run fails the test instead of hanging it)
        self._thread.join(10.0 if timeout is None else timeout)

    def terminate(self) -> None:
        self.terminated = True
        self.ctx.release.set()  # a stuck stand-in rank waits on this


class ThreadContext:
    def __init__(self, method: str, dead: frozenset[int], release: threading.Event) -> None:
        self.method = method
        self.dead = dead
        self.release = release
        self.procs: list[ThreadProcess] = []
        self.pipes: list[tuple[Connection, Connection]] = []

    def Pipe(self, duplex: bool = True) -> tuple[Connection, Connection]:
        # kept here, so that only the parent's own close() closes its ends (not the
        # garbage collection of launch's locals once it returns)
        ends = Pipe(duplex)
        self.pipes.append(ends)
        return ends

    def Process(self, target: Callable[..., None], args: tuple[Any, ...],
                daemon: bool = False) -> ThreadProcess:
        p = ThreadProcess(self, target, args, daemon)
        self.procs.append(p)
        return p


class Seen:
    """What the stand-in ``run_rank`` was handed, by rank."""

    def __init__(self) -> None:
        self.options: dict[int, TpOptions] = {}
        self.groups: dict[int, Group] = {}


def _stand_ins(monkeypatch: pytest.MonkeyPatch,
               rank_body: Callable[[TpOptions, Group], dict[str, Any]],
               dead: frozenset[int] = frozenset(), release: threading.Event | None = None
               ) -> tuple[list[ThreadContext], Seen]:
    contexts: list[ThreadContext] = []
    stop = release or threading.Event()
    seen = Seen()

    def get_context(method: str) -> ThreadContext:
        ctx = ThreadContext(method, dead, stop)
        contexts.append(ctx)
        return ctx

    def fake_run_rank(o: TpOptions, group: Group) -> dict[str, Any]:
        seen.options[group.rank] = o
        seen.groups[group.rank] = group
        return rank_body(o, group)

    monkeypatch.setattr(launch_mod, "mp", types.SimpleNamespace(get_context=get_context))
    monkeypatch.setattr(launch_mod, "run_rank", fake_run_rank)
    return contexts, seen


def _exchange(o: TpOptions, group: Group) -> dict[str, Any]:
    """A broadcast, a gather and a barrier over the rank's group."""
    got = group.broadcast(b"plan" if group.rank == 0 else None)
    parts = group.gather(f"r{group.rank}".encode())
    group.barrier()
    return {"rank": group.rank, "got": got.decode(), "parts": [p.decode() for p in parts]}


def _report(o: TpOptions, group: Group) -> dict[str, Any]:
    return {"rank": group.rank}


def test_each_rank_gets_its_pipes_of_the_star_and_the_reports_come_in_rank_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    contexts, seen = _stand_ins(monkeypatch, _exchange)
    o = replace(SMALL, ranks=3)
    reports = launch(o, timeout_s=30)
    assert reports == [{"rank": 0, "got": "plan", "parts": ["r0", "r1", "r2"]},
                       {"rank": 1, "got": "plan", "parts": []},
                       {"rank": 2, "got": "plan", "parts": []}]
    [ctx] = contexts
    assert ctx.method == "spawn"  # CUDA forbids fork
    assert [p.rank for p in ctx.procs] == [0, 1, 2]
    assert all(p.started and p.daemon for p in ctx.procs)
    for r, group in seen.groups.items():
        assert isinstance(group, PipeGroup)
        assert (group.rank, group.world) == (r, 3)
    assert seen.options == {0: o, 1: o, 2: o}  # private backing: no /dev/shm path
    # every process is joined with the long timeout of a run that went well, none stopped
    assert [(p.joins, p.terminated) for p in ctx.procs] == [([30], False)] * 3


def test_torch_transport_initialises_every_rank_at_one_free_port_and_closes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[Any, ...]] = []
    lock = threading.Lock()
    dist = types.ModuleType("torch.distributed")

    def init_process_group(backend: str, init_method: str, rank: int, world_size: int
                           ) -> None:
        with lock:
            calls.append(("init", backend, init_method, rank, world_size))

    def destroy_process_group() -> None:
        with lock:
            calls.append(("destroy",))

    dist.init_process_group = init_process_group  # type: ignore[attr-defined]
    dist.destroy_process_group = destroy_process_group  # type: ignore[attr-defined]
    torch = types.ModuleType("torch")
    torch.distributed = dist  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch.distributed", dist)
    _, seen = _stand_ins(monkeypatch, _report)
    o = replace(SMALL, ranks=3)
    assert launch(o, "torch", timeout_s=30) == [{"rank": 0}, {"rank": 1}, {"rank": 2}]
    inits = sorted(c for c in calls if c[0] == "init")
    assert [c[3] for c in inits] == [0, 1, 2]
    assert {(c[1], c[4]) for c in inits} == {("gloo", 3)}
    [address] = {c[2] for c in inits}
    m = re.fullmatch(r"tcp://127\.0\.0\.1:(\d+)", address)
    assert m is not None and 0 < int(m.group(1)) < 65536  # a bound port, never port 0
    assert calls.count(("destroy",)) == 3  # every rank closes its process group
    assert all(isinstance(g, TorchGroup) for g in seen.groups.values())


def test_pipe_transport_never_touches_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # importing it would raise
    monkeypatch.setitem(sys.modules, "torch.distributed", None)
    _, seen = _stand_ins(monkeypatch, _exchange)
    assert [r["rank"] for r in launch(SMALL, "pipe", timeout_s=30)] == [0, 1]
    assert all(isinstance(g, PipeGroup) for g in seen.groups.values())


def test_an_unknown_transport_is_refused_before_any_process_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    contexts, _ = _stand_ins(monkeypatch, _report)
    with pytest.raises(ValueError) as err:
        launch(SMALL, "mpi")
    assert str(err.value) == "transport 'mpi': choose one of pipe, torch"
    assert contexts == []


@pytest.mark.parametrize(("backing", "path"), [("shared", ""), ("shared", "/dev/shm/given"),
                                               ("private", "")])
def test_shared_backing_gets_one_fresh_shm_path_for_every_rank(
    monkeypatch: pytest.MonkeyPatch, backing: str, path: str
) -> None:
    _, seen = _stand_ins(monkeypatch, _report)
    o = replace(SMALL, ranks=3, backing=backing, shm_path=path)
    launch(o, timeout_s=30)
    handed = set(seen.options.values())
    assert len(seen.options) == 3 and len(handed) == 1
    [got] = handed
    if backing == "shared" and not path:
        assert got.shm_path.startswith(f"/dev/shm/hisparse-tp-{os.getpid()}-")
        assert got == replace(o, shm_path=got.shm_path)
    else:
        assert got == o  # a path given, or private backing: the options as they were


def test_a_rank_that_raises_fails_the_run_with_its_traceback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def body(o: TpOptions, group: Group) -> dict[str, Any]:
        if group.rank == 1:
            raise RuntimeError("boom on rank 1")
        return {"rank": group.rank}

    _stand_ins(monkeypatch, body)
    with pytest.raises(TpRunFailed) as err:
        launch(replace(SMALL, ranks=3), timeout_s=30)
    text = str(err.value)
    assert text.startswith("rank 1: Traceback (most recent call last):")
    assert text.rstrip().endswith("RuntimeError: boom on rank 1")


@pytest.mark.parametrize("dead", [0, 1, 2])
def test_a_rank_that_dies_without_a_word_fails_the_run_with_its_exit_code(
    monkeypatch: pytest.MonkeyPatch, dead: int
) -> None:
    """Whichever rank it is: the parent holds no copy of a child's result pipe once the
    child runs, so the child's death reaches it at once (the last rank's included), and
    the parent reaps it before it reads the exit code."""
    _stand_ins(monkeypatch, _report, dead=frozenset({dead}))
    with pytest.raises(TpRunFailed) as err:
        launch(replace(SMALL, ranks=3), timeout_s=30)
    assert str(err.value) == f"rank {dead} died (exit code -9)"


def test_a_dead_ranks_partner_is_not_left_waiting_on_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 1 dies; rank 0, exchanging with it, sees its pipe's end (the parent holds no
    copy of the star's pipes once the ranks run) instead of waiting forever."""
    seen: dict[int, BaseException] = {}
    ended = threading.Event()

    def body(o: TpOptions, group: Group) -> dict[str, Any]:
        try:
            return _exchange(o, group)
        except BaseException as e:
            seen[group.rank] = e
            raise
        finally:
            ended.set()

    _stand_ins(monkeypatch, body, dead=frozenset({1}))
    with pytest.raises(TpRunFailed):
        launch(SMALL, timeout_s=30)
    assert ended.wait(30)  # (only a rank stuck forever reaches the bound)
    # rank 0's broadcast finds the pipe closed, or (sent before rank 1 was gone) its
    # gather reads the end of it
    assert isinstance(seen[0], (BrokenPipeError, ConnectionResetError, EOFError))


def test_silent_ranks_fail_the_run_and_are_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    """No rank answers within the limit: the run fails, each process gets a short join
    and, still alive, is terminated and joined."""
    release = threading.Event()

    def stuck(o: TpOptions, group: Group) -> dict[str, Any]:
        release.wait()  # until the parent terminates a process
        return {"rank": group.rank}

    contexts, _ = _stand_ins(monkeypatch, stuck, release=release)
    with pytest.raises(TpRunFailed) as err:
        launch(SMALL, timeout_s=1.0)
    assert str(err.value) == "no rank answered within 1 s"
    [ctx] = contexts
    first = ctx.procs[0]
    assert first.terminated and first.joins == [1, None]  # short join, terminate, join
    for p in ctx.procs[1:]:
        # released by the first terminate, each is gone after its short join or stopped
        assert p.joins in ([1], [1, None])
        assert p.terminated == (p.joins == [1, None])
    assert not any(p.is_alive() for p in ctx.procs)


# -- the real thing (last: a mutant that hangs the loop fails the stand-in tests sooner) --


def test_two_spawned_reference_ranks_report_what_the_same_run_in_threads_reports() -> None:
    reports = launch(SMALL, timeout_s=120)
    assert [r["rank"] for r in reports] == [0, 1]
    assert [_stable(r) for r in reports] == [_stable(r) for r in _threaded(SMALL)]
    assert reports[0]["steps"] > 0 and reports[0]["rows_checked"] > 0
    assert all(r["mismatches"] == 0 for r in reports)
