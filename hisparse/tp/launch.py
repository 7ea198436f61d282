"""Start one process per rank (spawned: CUDA forbids fork), run, collect the reports.

A rank that fails sends its traceback; the others are stopped (they would wait in a
collective forever) and ``TpRunFailed`` carries the first failure's text.
"""

from __future__ import annotations

import multiprocessing as mp
import socket
import traceback
from dataclasses import replace
from multiprocessing.connection import Connection, wait
from typing import Any

from hisparse.tp.group import Group, PipeGroup, TorchGroup
from hisparse.tp.run import TpOptions, TpRunFailed, os_shm_path, run_rank

TRANSPORTS = ("pipe", "torch")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _child(rank: int, o: TpOptions, transport: str, init: str, pipes: list[Connection],
           result: Connection) -> None:
    try:
        group: Group
        if transport == "torch":
            group = TorchGroup(rank, o.ranks, init)
        else:
            group = PipeGroup(rank, o.ranks, pipes)
        result.send({"ok": run_rank(o, group)})
        if isinstance(group, TorchGroup):
            group.close()
    except BaseException:  # the parent reports it
        result.send({"error": f"rank {rank}: {traceback.format_exc()}"})


def launch(o: TpOptions, transport: str = "pipe", timeout_s: float = 600.0) -> list[dict[str, Any]]:
    """Run ``o`` with one process per rank; every rank's report, in rank order."""
    if transport not in TRANSPORTS:
        raise ValueError(f"transport {transport!r}: choose one of {', '.join(TRANSPORTS)}")
    if o.backing == "shared" and not o.shm_path:
        o = replace(o, shm_path=os_shm_path())
    ctx = mp.get_context("spawn")
    init = f"tcp://127.0.0.1:{_free_port()}" if transport == "torch" else ""
    star: list[list[Connection]] = [[] for _ in range(o.ranks)]
    for r in range(1, o.ranks):
        a, b = ctx.Pipe()
        star[0].append(a)
        star[r].append(b)
    receivers: list[Connection] = []
    procs = []
    for r in range(o.ranks):
        recv, send = ctx.Pipe(duplex=False)
        receivers.append(recv)
        p = ctx.Process(target=_child, args=(r, o, transport, init, star[r], send), daemon=True)
        p.start()
        procs.append(p)
        # the child has its own copies now: with the parent's closed, a child's death
        # ends its pipes (its result pipe here, its star pipes at its partners)
        send.close()
        for c in star[r]:
            c.close()
    reports: dict[int, dict[str, Any]] = {}
    error: str | None = None
    try:
        waiting = dict(enumerate(receivers))
        while waiting and error is None:
            ready = wait(list(waiting.values()), timeout=timeout_s)
            if not ready:
                error = f"no rank answered within {timeout_s:.0f} s"
                break
            for r, conn in list(waiting.items()):
                if conn in ready:
                    try:
                        msg = conn.recv()
                    except EOFError:  # its pipe ended with it: reap it for the exit code
                        procs[r].join(timeout=5)
                        msg = {"error": f"rank {r} died (exit code {procs[r].exitcode})"}
                    del waiting[r]
                    if "error" in msg:
                        error = error or msg["error"]
                    else:
                        reports[r] = msg["ok"]
    finally:
        for p in procs:
            p.join(timeout=30 if error is None else 1)
            if p.is_alive():
                p.terminate()
                p.join()
    if error is not None:
        raise TpRunFailed(error)
    return [reports[r] for r in range(o.ranks)]
