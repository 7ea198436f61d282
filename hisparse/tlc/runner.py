"""Run one TLC model check in an isolated directory and return a typed result.

Every run copies the TLA+ sources into its own fresh directory (so generated modules can
sit next to them) and gets its own ``-metadir`` and java tmpdir, so concurrent runs never
collide on TLC's state files or on the standard modules it unpacks.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hisparse.tlc.acquire import TlcInstall, ensure_tlc
from hisparse.tlc.errors import TlcError
from hisparse.tlc.launch import GO as GO_BYTES
from hisparse.tlc.output import TlcOutput, parse_output
from hisparse.tlc.paths import tla_dir as default_tla_dir
from hisparse.tlc.signals import LATCH, hold, latched, raise_pending, release

JVM_ARGS = ("-XX:+UseParallelGC", "-Xss4m")


# Started with SIGINT/SIGTERM held; it sets the death signal and execs the JVM.
LAUNCHER = Path(__file__).with_name("launch.py")
GO = GO_BYTES.decode()  # (stdin is text, like stdout)


def _launched(cmd: list[str]) -> list[str]:
    """``cmd`` behind the launcher: a killed hisparse must not leave TLC running (Linux),
    with no Python code run between fork and exec (see ``launch``)."""
    return [sys.executable, "-I", "-S", str(LAUNCHER), str(os.getpid()), *cmd]


class TlcStopped(TlcError):
    """A TLC run was not started: its ``TlcRuns`` was stopped by an interrupt."""


class TlcRuns:
    """The TLC runs started for one caller, stopped together on an interrupt: runs in
    helper threads (``check --trace``), which the main thread's KeyboardInterrupt does
    not reach, would otherwise run to their end while the executor waits for them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: set[subprocess.Popen[str]] = set()
        self._stopped = False

    def stop(self) -> None:
        """Kill every live run; every later ``run_tlc`` with these runs raises TlcStopped."""
        with self._lock:
            self._stopped = True
            live = list(self._live)
        for proc in live:
            proc.kill()

    def add(self, proc: subprocess.Popen[str]) -> bool:
        """Track ``proc``; False (it must be killed) once stopped."""
        with self._lock:
            if self._stopped:
                return False
            self._live.add(proc)
            return True

    def discard(self, proc: subprocess.Popen[str]) -> None:
        with self._lock:
            self._live.discard(proc)


@dataclass
class TlcResult:
    """Verdict and figures of one TLC run, plus where its full output was logged."""

    module: str
    cfg: str
    command: list[str]
    seconds: float
    log_path: Path
    output: TlcOutput
    raw: str = field(repr=False)

    @property
    def result(self) -> str:
        return self.output.result


def stage_sources(src: Path, dest: Path) -> None:
    """Copy every ``*.tla``/``*.cfg`` from ``src`` into ``dest`` (flat, like TLC expects)."""
    for pattern in ("*.tla", "*.cfg"):
        for path in sorted(src.glob(pattern)):
            shutil.copy2(path, dest / path.name)


def run_tlc(
    module: Path,
    cfg: Path,
    workdir: Path | None = None,
    workers: int | str = "auto",
    extra_args: Sequence[str] = (),
    *,
    tla_dir: Path | None = None,
    install: TlcInstall | None = None,
    echo: bool = False,
    runs: TlcRuns | None = None,
) -> TlcResult:
    """Check ``module`` against ``cfg`` with TLC.

    A fresh directory is made under ``workdir`` (or the system temp dir); the TLA+ sources
    from ``tla_dir`` are copied in, then ``module`` and ``cfg`` (which may be generated
    elsewhere). With ``echo`` TLC output is streamed to stderr as it arrives. An
    interrupt (SIGINT, SIGTERM) at any moment kills the JVM before it propagates: the
    signals are held while the JVM starts, so one that comes then is raised only once
    ``proc`` exists; ``runs`` (if given) can kill it from another thread.
    """
    install = install or ensure_tlc()
    src = tla_dir or default_tla_dir()
    run_dir = Path(tempfile.mkdtemp(prefix=f"{module.stem}-{cfg.stem}-", dir=workdir))
    stage_sources(src, run_dir)
    for path in (module, cfg):
        if path.resolve() != (run_dir / path.name).resolve():
            shutil.copy2(path, run_dir / path.name)
    meta = Path(tempfile.mkdtemp(prefix="meta-", dir=run_dir))
    jtmp = Path(tempfile.mkdtemp(prefix="jtmp-", dir=run_dir))
    cmd = [
        install.java,
        *JVM_ARGS,
        f"-Djava.io.tmpdir={jtmp}",
        "-cp",
        str(install.jar),
        "tlc2.TLC",
        "-workers",
        str(workers),
        "-cleanup",
        "-metadir",
        str(meta),
        *extra_args,
        "-config",
        cfg.name,
        module.name,
    ]
    log_path = run_dir / "tlc.log"
    start = time.monotonic()
    lines: list[str] = []
    with latched(), log_path.open("w", buffering=1) as log:  # line by line: `tail -f`
        raise_pending()  # an interrupt that something swallowed: no new JVM
        mask = hold()
        try:
            proc = subprocess.Popen(
                _launched(cmd),
                cwd=run_dir,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                bufsize=1,
            )
        except BaseException:
            release(mask)
            raise
        LATCH.add(proc)  # a SIGINT or SIGTERM kills it, wherever its handler runs
        released = False
        with proc:
            assert proc.stdout is not None and proc.stdin is not None
            try:
                if runs is not None and not runs.add(proc):
                    raise TlcStopped("interrupted: TLC was not started")
                released = True
                release(mask)  # a signal that came while the JVM started is raised here
                raise_pending()
                with contextlib.suppress(BrokenPipeError):  # (its exit code will say why)
                    proc.stdin.write(GO)  # the launcher may exec the JVM now
                    proc.stdin.close()
                log.write("$ " + " ".join(cmd) + "\n")
                for line in proc.stdout:
                    lines.append(line)
                    log.write(line)
                    if echo:
                        sys.stderr.write(line)
                raise_pending()  # killed by a signal whose exception was swallowed
            except BaseException:  # Ctrl-C, SIGTERM, timeouts: stop TLC rather than wait for it
                proc.kill()
                raise
            finally:
                exit_code = proc.wait()  # (killed above on any exception: a short wait)
                LATCH.discard(proc)
                if runs is not None:
                    runs.discard(proc)
                if not released:
                    release(mask)
    seconds = time.monotonic() - start
    # States can be gigabytes; the log and the sources are all we keep.
    shutil.rmtree(meta, ignore_errors=True)
    shutil.rmtree(jtmp, ignore_errors=True)
    raw = "".join(lines)
    return TlcResult(
        module=module.stem,
        cfg=cfg.name,
        command=cmd,
        seconds=seconds,
        log_path=log_path,
        output=parse_output(raw, exit_code),
        raw=raw,
    )
