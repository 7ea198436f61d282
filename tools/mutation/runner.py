"""Run mutants: each in its own scratch copy of the tree, guards first, then the suite.

The package is installed editable in ``.venv``; a scratch copy puts its own root first on
``PYTHONPATH`` and links ``hisparse/spec`` and ``hisparse/executor`` to its ``spec/`` and
``executor/`` (the installed layout), so ``import hisparse...`` loads the mutated copy.
``import_paths`` proves it for a copy, and the tool's tests check that a planted mutant is
reported killed.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tools.mutation.mutants import Mutant, mutated_source
from tools.mutation.reach import reach
from tools.mutation.targets import FULL_SUITE_IGNORES, TARGETS, Guard

if TYPE_CHECKING:
    from tools.mutation.covermap import CoverMap

ROOT = Path(__file__).resolve().parents[2]

KILLED = "killed"
SURVIVED = "survived"
TIMEOUT = "timeout"  # a run that cannot finish counts as caught (a loop that never ends)
ERROR = "error"  # pytest collected nothing or died (not a verdict on the mutant)
STARTUP_S = 10.0  # a pytest process's own start and collection, beside its tests' time
MIN_MEMORY = 2 << 30  # the least a pytest run may allocate (the suite's runs peak far below)

# A pytest run under a data-size limit (heap and anonymous mappings): a mutant that
# allocates without end (a loop appending to the list it walks) fails its test with a
# MemoryError, a kill, instead of exhausting the host and being killed by the kernel,
# which took the other runs' processes too. (A launcher, not ``preexec_fn``: the runs
# start from threads.)
_CAPPED = ("import os, resource, sys\n"
           "cap = int(sys.argv[1])\n"
           "resource.setrlimit(resource.RLIMIT_DATA, (cap, cap))\n"
           "os.execv(sys.executable, [sys.executable, '-m', 'pytest', *sys.argv[2:]])")


def memory_per_run(jobs: int | None = None) -> int:
    """The data limit of each pytest run: the host's memory shared by ``jobs`` runs and
    the tool itself (every core's worth by default), never below ``MIN_MEMORY``."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return max(MIN_MEMORY, total // ((jobs or os.cpu_count() or 1) + 1))


def tree_files(root: Path = ROOT) -> list[str]:
    """The working tree as git sees it: tracked files and untracked, unignored ones."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root, capture_output=True, check=True,
    ).stdout.decode()
    return sorted(f for f in out.split("\0") if f and (root / f).is_file())


class Scratch:
    """A private copy of the tree that imports as ``hisparse`` ahead of the install."""

    def __init__(self, files: Iterable[str], root: Path = ROOT,
                 memory: int | None = None) -> None:
        self.memory = memory_per_run() if memory is None else memory
        # the tree goes one level down, beside a link to the ``../shared`` the tests read
        self.base = Path(tempfile.mkdtemp(prefix="hisparse-mutate-"))
        self.root = self.base / root.name
        shared = root.parent / "shared"
        if shared.is_dir():
            (self.base / "shared").symlink_to(shared.resolve())
        for f in files:
            dest = self.root / f
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / f, dest)
        (self.root / "hisparse" / "spec").symlink_to("../spec")
        (self.root / "hisparse" / "executor").symlink_to("../executor")
        # the copy first; a PYTHONPATH set outside (dependencies installed with --target)
        # stays behind it
        path = os.pathsep.join(p for p in (str(self.root), os.environ.get("PYTHONPATH")) if p)
        self.env = {**os.environ, "PYTHONPATH": path, "PYTHONDONTWRITEBYTECODE": "1"}
        self.env.pop("CI", None)  # a skip is not a kill: the CI skip policy stays out

    def __enter__(self) -> Scratch:
        return self

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.base, ignore_errors=True)

    def write(self, file: str, text: str) -> None:
        (self.root / file).write_text(text)

    def import_paths(self, modules: Iterable[str]) -> dict[str, str]:
        """Where each module is imported from in this copy (its ``__file__``)."""
        names = list(modules)
        probe = "import importlib, sys\nfor n in sys.argv[1:]:\n" \
                "    print(importlib.import_module(n).__file__)"
        out = subprocess.run(
            [sys.executable, "-c", probe, *names], cwd=self.root, env=self.env,
            capture_output=True, text=True, check=True,
        ).stdout.split()
        return dict(zip(names, out, strict=True))

    def pytest(self, args: list[str], markers: str, timeout: float) -> str:
        return self.run_tests(args, markers, timeout).status

    def run_tests(self, args: list[str], markers: str, timeout: float) -> Run:
        """pytest on ``args`` in this copy, stopping at the first failure (``-x``). A
        parametrized id that is not there (the mutant renamed it, or another pytest
        spells its ids differently from the one that made the map) is tried again as
        its whole test function before the run counts as undecided."""
        run = self._pytest(args, markers, timeout)
        whole = whole_functions(args)
        if run.status == ERROR and run.killer.startswith("not found: ") and whole != args:
            return self._pytest(whole, markers, timeout)
        return run

    def _pytest(self, args: list[str], markers: str, timeout: float) -> Run:
        cmd = [sys.executable, "-c", _CAPPED, str(self.memory), "-x", "-q",
               "-p", "no:cacheprovider", "-m", markers, "--hypothesis-seed=0", *args]
        try:
            proc = subprocess.run(cmd, cwd=self.root, env=self.env, capture_output=True,
                                  text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return Run(TIMEOUT)
        if proc.returncode == 0:
            return Run(SURVIVED)
        out = proc.stdout + proc.stderr
        if proc.returncode == 4 and "ERROR: not found:" in out:
            # a selected test is not there to decide the mutant
            return Run(ERROR, "not found: " + out.split("ERROR: not found:", 1)[1].split()[0])
        if proc.returncode in (1, 2, 3, 4):
            # a test failed, collection or a conftest import broke on the mutant: the
            # baseline ran the same arguments on the unmutated tree green
            return Run(KILLED, first_failure(proc.stdout) or f"exit {proc.returncode}")
        return Run(ERROR)  # 5: nothing collected, or a signal


@dataclass(frozen=True)
class Run:
    """One pytest run's verdict and, for a kill, the test that failed first (if named)."""

    status: str
    killer: str = ""


def whole_functions(args: list[str]) -> list[str]:
    """Each parametrized node id as its test function (``t.py::f[a-b]`` -> ``t.py::f``),
    once each, in order; other arguments as they are."""
    return list(dict.fromkeys(a.split("[", 1)[0] if "::" in a else a for a in args))


def first_failure(stdout: str) -> str:
    """The node id of the first ``FAILED``/``ERROR`` line of pytest's short summary."""
    for line in stdout.splitlines():
        for tag in ("FAILED ", "ERROR "):
            if line.startswith(tag):
                return line[len(tag):].split(" - ", 1)[0].strip()
    return ""


def module_name(file: str) -> str:
    """The import name of a target file (``spec/x.py`` is ``hisparse.spec.x``)."""
    parts = Path(file).with_suffix("").parts
    head = {"spec": ["hisparse", "spec"], "executor": ["hisparse", "executor"]}.get(parts[0])
    return ".".join([*(head or [parts[0]]), *parts[1:]])


def guard_markers(guard: Guard) -> str:
    return "not gpu" if guard.tlc else "not tlc and not gpu"


FULL_MARKERS = "not tlc and not gpu"


def full_suite_args() -> list[str]:
    return ["tests", *(f"--ignore={p}" for p in FULL_SUITE_IGNORES)]


@dataclass(frozen=True)
class Outcome:
    """What became of one mutant. ``phase`` is where it was decided: ``guard``, ``full``
    (the whole non-TLC suite), ``cover`` (the tests that run its lines, by the coverage
    map: the whole suite for that mutant) or ``uncovered`` (no test runs its lines; its
    guards ran); ``tests`` how many the deciding run selected (0: a whole file list);
    ``killer`` the test that failed first."""

    mutant: Mutant
    status: str
    phase: str
    seconds: float
    tests: int = 0
    killer: str = ""


def guard_key(guard: Guard) -> str:
    return " ".join(guard.tests)


@dataclass(frozen=True)
class Limits:
    """Seconds a guard run (by ``guard_key``) and a whole-suite run may take before the
    mutant is timed out: a multiple of what the unmutated run took (``baseline``); and
    the bytes each run may allocate (None: ``memory_per_run``)."""

    guard: dict[str, float]
    full: float
    default: float = 600.0
    factor: float = 5.0
    floor: float = 60.0
    memory: int | None = None

    @classmethod
    def from_baseline(cls, seconds: dict[str, float], factor: float, floor: float) -> Limits:
        scaled = {k: max(floor, factor * v) for k, v in seconds.items()}
        return cls(scaled, scaled.get("full", floor), factor=factor, floor=floor)

    def of(self, guard: Guard) -> float:
        return self.guard.get(guard_key(guard), self.default)


class Killers:
    """Which killer tests pass alone on the unmutated tree, each asked once per run.

    A kill is a kill only if its test passes without the mutant: a test that fails on
    this host for its own reasons (a tool missing, an order it needs) would otherwise
    "kill" every mutant whose run reaches it. Shared by a run's threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._passes: dict[str, bool] = {}

    def passes(self, s: Scratch, killer: str, timeout: float) -> bool:
        """Whether ``killer`` passes alone in ``s``, which must hold the unmutated tree."""
        with self._lock:
            known = self._passes.get(killer)
        if known is not None:
            return known
        ok = s.pytest([killer], FULL_MARKERS, timeout) == SURVIVED
        with self._lock:
            self._passes[killer] = ok
        return ok


def run_mutant(m: Mutant, files: list[str], limits: Limits, full: bool = True,
               guard: Guard | None = None, cover: CoverMap | None = None,
               killers: Killers | None = None) -> Outcome:
    """One mutant in its own scratch copy. With a coverage map and an edit that runs only
    when called, never at import: the tests that run its lines (the whole suite for it), then, for a
    module guarded only by model checking, those guards. Otherwise its guards, then (if
    it survives them and ``full``) the whole non-TLC suite. With ``killers``, a kill by
    a test that fails on the unmutated tree too is no verdict (``error``, run again)."""
    g = guard or TARGETS[m.file]
    t0 = time.monotonic()
    source = (ROOT / m.file).read_text()
    with Scratch(files, memory=limits.memory) as s:
        s.write(m.file, mutated_source(m, source))
        o = _decide(s, m, g, source, limits, full, cover, t0)
        if killers is not None and o.status == KILLED and "::" in o.killer:
            s.write(m.file, source)  # the mutant undone: the killer alone, unmutated
            if not killers.passes(s, o.killer, limits.full):
                return dataclasses.replace(o, status=ERROR, killer=f"{o.killer} fails unmutated")
    return o


def _decide(s: Scratch, m: Mutant, g: Guard, source: str, limits: Limits, full: bool,
            cover: CoverMap | None, t0: float) -> Outcome:
    if cover is not None:
        r = reach(m, source)
        if r.runtime and not cover.at_import(m.file, r.lines):
            return _by_cover(s, m, g, cover, cover.tests_of(m.file, r.lines), limits, t0)
    run = s.run_tests(list(g.tests), guard_markers(g), limits.of(g))
    phase = "guard"
    if run.status == SURVIVED and full:
        print(f"guard survivor, running the whole suite: {m.id}  {m.before}", flush=True)
        run = s.run_tests(full_suite_args(), FULL_MARKERS, limits.full)
        phase = "full"
    return Outcome(m, run.status, phase, round(time.monotonic() - t0, 1), killer=run.killer)


def _by_cover(s: Scratch, m: Mutant, g: Guard, cover: CoverMap, tests: list[str],
              limits: Limits, t0: float) -> Outcome:
    if tests:
        limit = max(limits.floor, limits.factor * (cover.seconds_of(tests) + STARTUP_S))
        run = s.run_tests(tests, cover.markers, limit)
        phase = "cover"
        if run.status == SURVIVED and g.tlc:
            run = s.run_tests(list(g.tests), guard_markers(g), limits.of(g))
            phase = "guard"
    else:
        # no test runs these lines by the map; the guards still run, so that a hole in
        # the map (a process that died unsaved) cannot make a survivor on its own
        run = s.run_tests(list(g.tests), guard_markers(g), limits.of(g))
        phase = "guard" if run.status != SURVIVED else "uncovered"
    return Outcome(m, run.status, phase, round(time.monotonic() - t0, 1), len(tests),
                   run.killer)


def run_all(mutants: list[Mutant], jobs: int, limits: Limits, full: bool,
            done: Callable[[Outcome], None], cover: CoverMap | None = None,
            guard: Guard | None = None, stop_at: float | None = None) -> list[Outcome]:
    """Every mutant, ``jobs`` at a time (each a pytest process tree of its own); none
    starts after the monotonic time ``stop_at`` (those running finish: a run cut by a
    signal would count its interrupted pytest as a kill)."""
    files = tree_files()
    outcomes: list[Outcome] = []
    killers = Killers()
    if limits.memory is None:  # the host's memory shared by the runs at once
        limits = dataclasses.replace(limits, memory=memory_per_run(jobs))

    def one(m: Mutant) -> Outcome | None:
        if stop_at is not None and time.monotonic() >= stop_at:
            return None
        return run_mutant(m, files, limits, full, guard, cover, killers)

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for f in as_completed([pool.submit(one, m) for m in mutants]):
            o = f.result()
            if o is not None:
                outcomes.append(o)
                done(o)
    return outcomes


def baseline(files: list[str], guards: Iterable[Guard], full: bool,
             jobs: int) -> dict[str, float]:
    """Run every guard set (and the whole suite) on the unmutated tree: each must pass.
    Returns the seconds each took, keyed by the guard's tests (``full`` for the suite)."""
    seconds: dict[str, float] = {}
    with Scratch(files) as s:
        paths = s.import_paths(module_name(f) for f in sorted(TARGETS))
        stray = {n: p for n, p in paths.items() if not p.startswith(str(s.root))}
        if stray:
            raise SystemExit(f"the scratch copy does not shadow the install: {stray}")
        runs = {guard_key(g): (list(g.tests), guard_markers(g)) for g in set(guards)}
        if full:
            runs["full"] = (full_suite_args(), FULL_MARKERS)

        def one(key: str) -> tuple[str, str, float]:
            t0 = time.monotonic()
            args, markers = runs[key]
            return key, s.pytest(args, markers, 3600), round(time.monotonic() - t0, 1)

        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            for key, status, took in pool.map(one, sorted(runs)):
                if status != SURVIVED:
                    raise SystemExit(f"the unmutated tests do not pass ({status}): {key}")
                seconds[key] = took
    return seconds
