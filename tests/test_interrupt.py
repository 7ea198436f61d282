"""An interrupt ends a model check at any moment, on busy cores, and leaves no folder.

Both cores are kept busy by spinning subprocesses for the whole test; the signal is
sent at moments defined by what exists (the scratch folder, TLC's log, the JVM, TLC's
first output), never by sleeping, and every bound is generous. SIGINT arriving while
the JVM was being started was lost before (the check then ran to its end)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hisparse.simulate import SimulateOptions, simulate

BOUND = 120.0  # seconds for anything to appear or end, on two busy cores
BUSY_CORES = 2


@pytest.fixture
def busy_cores() -> Iterator[None]:
    """Two spinning processes for the whole test (CI has two cores)."""
    spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(BUSY_CORES)]
    try:
        yield
    finally:
        for p in spin:
            p.kill()
        for p in spin:
            p.wait()


def children(pid: int) -> list[int]:
    """Direct children of ``pid``, started by any of its threads (Linux /proc)."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return out


def jvms_of(pid: int) -> list[int]:
    """The TLC JVMs that ``pid`` runs (each exec'd by the launcher)."""
    found = []
    for child in children(pid):
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if b"tlc2.TLC" in cmdline.split(b"\0") and b"launch.py" not in cmdline:
            found.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def tlc_printed(tmp: Path) -> bool:
    """TLC wrote its first line (the log's first line is our command)."""
    return any(len(log.read_text().splitlines()) > 1 for log in tmp.rglob("tlc.log"))


def wait_for(proc: subprocess.Popen[str], ready: Callable[[], bool]) -> None:
    deadline = time.monotonic() + BOUND
    while not ready():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the moment to interrupt never came"
        time.sleep(0.01)


MOMENTS: dict[str, Callable[[Path, int], bool]] = {
    "at-once": lambda tmp, pid: True,
    "scratch-made": lambda tmp, pid: any(tmp.iterdir()),
    "jvm-starting": lambda tmp, pid: any(tmp.rglob("tlc.log")),  # log open, JVM not yet
    "jvm-running": lambda tmp, pid: bool(jvms_of(pid)),
    "tlc-printed": lambda tmp, pid: tlc_printed(tmp),
}
CASES = [(signal.SIGINT, m) for m in MOMENTS] + [(signal.SIGTERM, "jvm-starting")]


def interrupt(cmd: list[str], tmp: Path, sig: int, moment: str) -> tuple[int, str, list[int]]:
    """Run ``cmd`` with TMPDIR=tmp, signal it at ``moment``; (exit code, stderr, JVMs
    running when the signal was sent). No JVM may start after the signal."""
    env = {**os.environ, "TMPDIR": str(tmp)}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    jvms: list[int] = []
    try:
        wait_for(proc, lambda: MOMENTS[moment](tmp, proc.pid))
        jvms = jvms_of(proc.pid)
        proc.send_signal(sig)
        late: set[int] = set()
        deadline = time.monotonic() + BOUND
        while proc.poll() is None and time.monotonic() < deadline:
            late |= set(jvms_of(proc.pid)) - set(jvms)
            time.sleep(0.01)
        _, err = proc.communicate(timeout=BOUND)
        assert not late, f"TLC started after the signal: {late}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, err, jvms


@pytest.mark.tlc
@pytest.mark.parametrize(("sig", "moment"), CASES, ids=[f"{s.name}-{m}" for s, m in CASES])
def test_interrupt_ends_the_check_on_busy_cores(
    tmp_path: Path, busy_cores: None, sig: signal.Signals, moment: str
) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    cmd = [sys.executable, "-m", "hisparse", "check", "--model", "ci", "--workers", "1"]
    code, err, jvms = interrupt(cmd, tmp, sig, moment)
    if moment == "at-once":  # before Python installed its handlers, the signal's default
        assert code in (128 + sig, -sig), (code, err)
    else:
        assert code == 128 + sig, (code, err)
    assert list(tmp.iterdir()) == [], f"left behind: {list(tmp.rglob('*'))[:5]}"
    if moment == "jvm-running":
        assert jvms
    assert not any(alive(j) for j in jvms), "TLC's JVM outlived the check"


@pytest.mark.tlc
def test_interrupt_ends_a_trace_check_on_busy_cores(tmp_path: Path, busy_cores: None) -> None:
    """``check --trace`` replays in helper threads: the interrupt kills their JVMs too
    (before, the executor waited for every replay to end)."""
    traces = []
    for seed in range(3):  # different headers: separate groups, replayed in parallel
        path = tmp_path / f"t{seed}.jsonl"
        simulate(SimulateOptions(requests=6 + seed, seed=seed, trace=path))
        traces.append(str(path))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    cmd = [sys.executable, "-m", "hisparse", "check", "--trace", *traces]
    code, err, jvms = interrupt(cmd, tmp, signal.SIGINT, "jvm-running")
    assert code == 130, (code, err)
    assert list(tmp.iterdir()) == [], f"left behind: {list(tmp.rglob('*'))[:5]}"
    assert jvms and not any(alive(j) for j in jvms), "TLC's JVM outlived the check"


def test_a_swallowed_interrupt_still_kills_the_child_and_is_raised_again() -> None:
    """Python drops an exception raised where it cannot raise (a ``__del__``, an at-fork
    hook: how SIGINT was lost while the JVM started). The latch kills the child and
    records the signal whatever happens to the exception, and raises it again."""
    from hisparse.tlc.signals import LATCH, latched

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                             text=True)
    with pytest.raises(KeyboardInterrupt), latched():
        LATCH.add(child)
        with contextlib.suppress(KeyboardInterrupt):  # swallowed, as in a __del__
            signal.raise_signal(signal.SIGINT)  # the handler runs here
        assert child.wait(timeout=BOUND) == -signal.SIGKILL  # killed all the same
        LATCH.discard(child)
    assert LATCH.signum is None  # raised again, then cleared
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored


def test_an_interrupt_removes_the_runs_scratch_folder_whole() -> None:
    # with files in it (cli.py:666:call:127 left them behind)
    from hisparse.cli import _scratch

    with pytest.raises(KeyboardInterrupt), _scratch() as root:
        (root / "sub").mkdir()
        (root / "sub" / "log.txt").write_text("partial")
        raise KeyboardInterrupt
    assert not root.exists()
