"""Run one TLC model check in an isolated directory and return a typed result.

Every run copies the TLA+ sources into its own fresh directory (so generated modules can
sit next to them) and gets its own ``-metadir`` and java tmpdir, so concurrent runs never
collide on TLC's state files or on the standard modules it unpacks.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hisparse.tlc.acquire import TlcInstall, ensure_tlc
from hisparse.tlc.output import TlcOutput, parse_output
from hisparse.tlc.paths import tla_dir as default_tla_dir

JVM_ARGS = ("-XX:+UseParallelGC", "-Xss4m")


def _die_with_parent() -> None:
    """Runs in the child before exec: a killed hisparse must not leave TLC running (Linux)."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    pr_set_pdeathsig = 1
    libc.prctl(pr_set_pdeathsig, signal.SIGKILL)


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
) -> TlcResult:
    """Check ``module`` against ``cfg`` with TLC.

    A fresh directory is made under ``workdir`` (or the system temp dir); the TLA+ sources
    from ``tla_dir`` are copied in, then ``module`` and ``cfg`` (which may be generated
    elsewhere). With ``echo`` TLC output is streamed to stderr as it arrives.
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
    with (
        log_path.open("w") as log,
        subprocess.Popen(
            cmd,
            cwd=run_dir,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            preexec_fn=_die_with_parent,
        ) as proc,
    ):
        assert proc.stdout is not None
        log.write("$ " + " ".join(cmd) + "\n")
        try:
            for line in proc.stdout:
                lines.append(line)
                log.write(line)
                if echo:
                    sys.stderr.write(line)
        except BaseException:  # Ctrl-C, SIGTERM, timeouts: stop TLC rather than wait for it
            proc.kill()
            raise
        finally:
            exit_code = proc.wait()
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
