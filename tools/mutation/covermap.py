"""Which tests run each line: the map that lets a mutant run only the tests that can see it.

A mutant whose edit lies in a function body can change a test's outcome only if that
test runs the edited lines, in the pytest process or in any process it starts. The map
records, for every line of every target, the non-TLC tests that ran it (one measured run
of the whole non-TLC suite, every process under coverage, each under the test that started
it: ``covhook/sitecustomize.py`` and ``covplugin.py``). Running those tests is then the
whole suite for that mutant, in a fraction of its time. An edit outside every function
body (a constant, a default, a decorator, a class body), or in a function that runs at
import (``imported``: the lines a fresh import of every target runs), acts before any test
runs: the map cannot narrow it, and such a mutant keeps the guards-then-whole-suite order.
A test file whose tests share state (a fixture above function scope, a cache) comes whole:
coverage records shared lines under the test that ran them first only (``shared``).

Build it once per tree (the tests and the code it was made from must not change since);
the model-checking tests can be mapped apart and merged in:

    python -m tools.mutation.covermap --out /tmp/covmap.json
    python -m tools.mutation.covermap --markers "tlc and not gpu" --out /tmp/tlc.json
    python -m tools.mutation.covermap --merge /tmp/covmap.json /tmp/tlc.json --out all.json

On a machine with many cores, ``--shards N`` maps N groups of test files at once, each in
its own scratch copy, and merges them (a test file is never split, so a file whose tests
share state is measured as one run):

    python -m tools.mutation.covermap --shards 8 --out covmap.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from tools.mutation.runner import (
    FULL_MARKERS,
    ROOT,
    Scratch,
    full_suite_args,
    module_name,
    tree_files,
)
from tools.mutation.targets import FULL_SUITE_IGNORES, SOURCE_DIRS, TARGETS

HOOK = Path(__file__).resolve().parent / "covhook"

_RC = """\
[run]
parallel = true
data_file = {data}
source =
{sources}
sigterm = true
patch = _exit
"""


@dataclass(frozen=True)
class CoverMap:
    """Tests (node ids, each with its seconds) and, per file and line, the tests that ran
    it; ``tree`` is the digest of the tree the map was made from (``tree_digest``);
    ``markers`` the pytest ``-m`` expression that selected its tests (and selects them
    again when a mutant runs them)."""

    tests: list[str]
    seconds: list[float]
    lines: dict[str, dict[int, list[int]]]
    tree: str
    markers: str = FULL_MARKERS
    shared: frozenset[str] = frozenset()
    imported: dict[str, list[int]] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> CoverMap:
        doc = json.loads(path.read_text())
        lines = {f: {int(k): v for k, v in by.items()} for f, by in doc["lines"].items()}
        return cls(doc["tests"], doc["seconds"], lines, doc["tree"],
                   doc.get("markers", FULL_MARKERS), frozenset(doc.get("shared", ())),
                   doc.get("imported", {}))

    def dump(self, path: Path) -> None:
        path.write_text(json.dumps({"tree": self.tree, "markers": self.markers,
                                    "shared": sorted(self.shared), "imported": self.imported,
                                    "tests": self.tests,
                                    "seconds": self.seconds, "lines": self.lines}))

    def merged(self, other: CoverMap) -> CoverMap:
        """One map of both maps' tests (of one tree; a test in both keeps this map's)."""
        if other.tree != self.tree:
            raise ValueError("the two maps were made from different trees")
        tests = [*self.tests, *(t for t in other.tests if t not in set(self.tests))]
        index = {t: i for i, t in enumerate(tests)}
        seconds = dict(zip(other.tests, other.seconds, strict=True))
        seconds.update(zip(self.tests, self.seconds, strict=True))
        lines: dict[str, dict[int, list[int]]] = {}
        for m in (self, other):
            for f, by in m.lines.items():
                out = lines.setdefault(f, {})
                for n, ran in by.items():
                    out[n] = sorted({*out.get(n, ()), *(index[m.tests[i]] for i in ran)})
        return CoverMap(tests, [seconds[t] for t in tests], lines, self.tree,
                        f"({self.markers}) or ({other.markers})", self.shared | other.shared,
                        self.imported)

    def tests_of(self, file: str, lines: set[int]) -> list[str]:
        """The tests that ran any of ``lines`` of ``file``, the quickest first (with
        ``-x`` the first failure ends the run, so a killed mutant is told soonest); then
        every other test of a ``shared`` file among them, the quickest first."""
        by = self.lines.get(file, {})
        found = {i for n in lines for i in by.get(n, ())}
        files = {self.tests[i].split("::", 1)[0] for i in found} & self.shared
        more = {i for i, t in enumerate(self.tests) if t.split("::", 1)[0] in files} - found
        return [self.tests[i] for group in (found, more)
                for i in sorted(group, key=lambda i: (self.seconds[i], i))]

    def at_import(self, file: str, lines: set[int]) -> bool:
        """Whether any of ``lines`` runs when ``file`` is imported (a function called at
        import included): then no map can say which tests see the edit."""
        return not lines.isdisjoint(self.imported.get(file, ()))

    def seconds_of(self, tests: list[str]) -> float:
        index = {t: i for i, t in enumerate(self.tests)}
        return sum(self.seconds[index[t]] for t in tests)


def tree_digest(root: Path = ROOT) -> str:
    """A hash of every file the map depends on (the code, the models and the suite's
    tests, as they are on disk): a map is valid for exactly this tree; the tool's own
    files and the tests left out of the suite may change."""
    h = hashlib.sha256()
    for f in tree_files(root):
        if f.split("/", 1)[0] in (*SOURCE_DIRS, "tests", "tla") and \
                f not in FULL_SUITE_IGNORES:
            h.update(f.encode() + b"\0" + (root / f).read_bytes() + b"\0")
    return h.hexdigest()[:24]


# ---------------------------------------------------------------- building the map


def build(out: Path, tests: list[str] | None = None,
          markers: str = FULL_MARKERS) -> CoverMap:
    """Run the whole non-TLC suite (or ``tests``, or other ``markers``) once, every process
    measured, in a scratch copy of the tree (as the mutants run: the working tree may
    change meanwhile); write and return the map."""
    files = tree_files()
    digest = tree_digest()
    with Scratch(files) as s, tempfile.TemporaryDirectory(prefix="hisparse-covmap-") as tmp:
        t = Path(tmp)
        rc = t / "coveragerc"
        sources = "\n".join(f"    {s.root / d}" for d in SOURCE_DIRS)
        rc.write_text(_RC.format(data=t / "cov", sources=sources))
        seconds_file = t / "seconds.json"
        env = {**s.env, "HISPARSE_COVMAP_RC": str(rc),
               "HISPARSE_COVMAP_SECONDS": str(seconds_file),
               "PYTHONPATH": os.pathsep.join([str(HOOK), s.env["PYTHONPATH"]])}
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               "-p", "tools.mutation.covplugin", "-m", markers,
               "--hypothesis-seed=0", *(tests or full_suite_args())]
        t0 = time.monotonic()
        proc = subprocess.run(cmd, cwd=s.root, env=env, check=False)
        took = time.monotonic() - t0
        timing = json.loads(seconds_file.read_text())
        if proc.returncode != 0 or timing["not_passed"]:
            raise SystemExit(f"the unmutated suite did not pass under coverage "
                             f"(exit {proc.returncode}): {timing['not_passed']}")
        subprocess.run([sys.executable, "-m", "coverage", "combine", "-q",
                        f"--rcfile={rc}", f"--data-file={t / 'cov'}"],
                       cwd=t, env=s.env, check=True)
        cmap = _read(t / "cov", s.root, timing["seconds"], digest, markers,
                     imported_lines(s))
    cmap.dump(out)
    print(f"coverage map of {len(cmap.tests)} tests in {took:.0f} s written to {out}",
          file=sys.stderr)
    return cmap


def shards_of(files: list[str], shards: int, root: Path = ROOT) -> list[list[str]]:
    """``files`` in at most ``shards`` groups of about equal size (bytes, for the time
    their tests take), biggest file first onto the lightest group; no group is empty."""
    if shards < 1:
        raise ValueError(f"shards must be at least 1, not {shards}")
    size = {f: (root / f).stat().st_size for f in files}
    groups: list[list[str]] = [[] for _ in range(min(shards, len(files)))]
    load = [0] * len(groups)
    for f in sorted(files, key=lambda f: (-size[f], f)):
        i = min(range(len(groups)), key=load.__getitem__)
        groups[i].append(f)
        load[i] += size[f]
    return [sorted(g) for g in groups]


def suite_files(root: Path = ROOT) -> list[str]:
    """The test files of the whole non-TLC suite (``full_suite_args``' files)."""
    return sorted(f for f in tree_files(root)
                  if f.startswith("tests/") and Path(f).name.startswith("test_")
                  and f.endswith(".py") and f not in FULL_SUITE_IGNORES)


def build_sharded(out: Path, shards: int, markers: str = FULL_MARKERS) -> CoverMap:
    """``build`` over ``shards`` groups of the suite's test files at once, merged into
    one map (its markers those of every group)."""
    groups = shards_of(suite_files(), shards)
    with tempfile.TemporaryDirectory(prefix="hisparse-covmap-shards-") as tmp, \
            ThreadPoolExecutor(len(groups)) as pool:
        maps = list(pool.map(lambda ig: build(Path(tmp) / f"{ig[0]}.json", ig[1], markers),
                             enumerate(groups)))
    cmap = maps[0]
    for m in maps[1:]:
        cmap = cmap.merged(m)
    cmap = replace(cmap, markers=markers)
    cmap.dump(out)
    print(f"coverage map of {len(cmap.tests)} tests ({len(groups)} shards) written to {out}",
          file=sys.stderr)
    return cmap


_IMPORT_PROBE = """\
import importlib, json, sys
import coverage
cov = coverage.Coverage(data_file=None, source=sys.argv[1].split(","))
cov.start()
for name in sys.argv[2:]:
    importlib.import_module(name)
cov.stop()
data = cov.get_data()
print(json.dumps({f: sorted(data.lines(f) or ()) for f in data.measured_files()}))
"""


def imported_lines(s: Scratch) -> dict[str, list[int]]:
    """The lines of the targets that run when they are imported (in a fresh process):
    module and class bodies, and the bodies of functions called at import. An edit on
    such a line acts before any test runs, so the map cannot narrow its tests."""
    sources = ",".join(str(s.root / d) for d in SOURCE_DIRS)
    names = [module_name(f) for f in sorted(TARGETS)]
    out = subprocess.run([sys.executable, "-c", _IMPORT_PROBE, sources, *names],
                         cwd=s.root, env=s.env, capture_output=True, text=True, check=True)
    return {Path(f).relative_to(s.root).as_posix(): lines
            for f, lines in json.loads(out.stdout).items()}


# a test module whose tests share state: a fixture above function scope, or a cache
_SHARING = re.compile(r"""scope=["'](?:module|class|package|session)["']|lru_cache|"""
                      r"""functools\.cache\b|^@cache\b""", re.M)


def shared_files(tests: list[str], root: Path = ROOT) -> frozenset[str]:
    """The test files whose tests share state across tests (``_SHARING``). Coverage
    records a shared fixture's or cache's lines under the first test that built it
    only; a later test that reads the result ran none of them, so the map alone would
    leave it out. A mutant that selects any test of such a file runs them all."""
    files = {t.split("::", 1)[0] for t in tests}
    return frozenset(f for f in files if _SHARING.search((root / f).read_text()))


def _read(data_file: Path, root: Path, seconds: dict[str, float], digest: str, markers: str,
          imported: dict[str, list[int]]) -> CoverMap:
    from coverage import CoverageData

    data = CoverageData(basename=str(data_file))
    data.read()
    tests = sorted(seconds)
    index = {t: i for i, t in enumerate(tests)}
    lines: dict[str, dict[int, list[int]]] = {}
    for path in data.measured_files():
        rel = Path(path).relative_to(root).as_posix()
        by: dict[int, list[int]] = {}
        for line, contexts in data.contexts_by_lineno(path).items():
            ran = sorted({index[c] for c in contexts if c in index})
            if ran:
                by[line] = ran
        lines[rel] = by
    return CoverMap(tests, [seconds[t] for t in tests], lines, digest, markers,
                    shared_files(tests, root), imported)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="where the map's JSON goes")
    ap.add_argument("--markers", default=FULL_MARKERS,
                    help="the tests to map, as pytest -m (default: %(default)s)")
    ap.add_argument("--merge", type=Path, nargs=2, metavar="MAP",
                    help="write the union of two maps of this tree instead of running tests")
    ap.add_argument("--shards", type=int, default=1,
                    help="map this many groups of test files at once (default: %(default)s)")
    args = ap.parse_args(argv)
    if args.merge:
        a, b = (CoverMap.load(p) for p in args.merge)
        a.merged(b).dump(args.out)
    elif args.shards > 1:
        build_sharded(args.out, args.shards, args.markers)
    else:
        build(args.out, markers=args.markers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
