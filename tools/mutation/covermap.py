"""Which tests run each line: the map that lets a mutant run only the tests that can see it.

A mutant whose edit lies in a function body can change a test's outcome only if that
test runs the edited lines, in the pytest process or in any process it starts. The map
records, for every line of every target, the non-TLC tests that ran it (one measured run
of the whole non-TLC suite, every process under coverage, each under the test that started
it: ``covhook/sitecustomize.py`` and ``covplugin.py``). Running those tests is then the
whole suite for that mutant, in a fraction of its time. An edit outside every function
body (a constant, a default, a decorator, a class body) runs at import, under no test: the
map cannot narrow it, and such a mutant keeps the guards-then-whole-suite order.

Build it once per tree (the tests and the code it was made from must not change since):

    python -m tools.mutation.covermap --out /tmp/covmap.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tools.mutation.runner import FULL_MARKERS, ROOT, full_suite_args, tree_files
from tools.mutation.targets import FULL_SUITE_IGNORES, SOURCE_DIRS

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
    it; ``tree`` is the commit and dirty-file digest the map was made from."""

    tests: list[str]
    seconds: list[float]
    lines: dict[str, dict[int, list[int]]]
    tree: str

    @classmethod
    def load(cls, path: Path) -> CoverMap:
        doc = json.loads(path.read_text())
        lines = {f: {int(k): v for k, v in by.items()} for f, by in doc["lines"].items()}
        return cls(doc["tests"], doc["seconds"], lines, doc["tree"])

    def dump(self, path: Path) -> None:
        path.write_text(json.dumps({"tree": self.tree, "tests": self.tests,
                                    "seconds": self.seconds, "lines": self.lines}))

    def tests_of(self, file: str, lines: set[int]) -> list[str]:
        """The tests that ran any of ``lines`` of ``file``, the quickest first (with
        ``-x`` the first failure ends the run, so a killed mutant is told soonest)."""
        by = self.lines.get(file, {})
        found = {i for n in lines for i in by.get(n, ())}
        return [self.tests[i] for i in sorted(found, key=lambda i: (self.seconds[i], i))]

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


def build(out: Path, tests: list[str] | None = None) -> CoverMap:
    """Run the whole non-TLC suite (or ``tests``) once, every process measured; write and
    return the map."""
    digest = tree_digest()
    with tempfile.TemporaryDirectory(prefix="hisparse-covmap-") as tmp:
        t = Path(tmp)
        rc = t / "coveragerc"
        sources = "\n".join(f"    {ROOT / d}" for d in SOURCE_DIRS)
        rc.write_text(_RC.format(data=t / "cov", sources=sources))
        seconds_file = t / "seconds.json"
        env = {**os.environ, "HISPARSE_COVMAP_RC": str(rc),
               "HISPARSE_COVMAP_SECONDS": str(seconds_file),
               "PYTHONPATH": os.pathsep.join([str(HOOK), str(ROOT),
                                              os.environ.get("PYTHONPATH", "")]).rstrip(":")}
        env.pop("CI", None)
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               "-p", "tools.mutation.covplugin", "-m", FULL_MARKERS,
               "--hypothesis-seed=0", *(tests or full_suite_args())]
        t0 = time.monotonic()
        proc = subprocess.run(cmd, cwd=ROOT, env=env, check=False)
        took = time.monotonic() - t0
        timing = json.loads(seconds_file.read_text())
        if proc.returncode != 0 or timing["not_passed"]:
            raise SystemExit(f"the unmutated suite did not pass under coverage "
                             f"(exit {proc.returncode}): {timing['not_passed']}")
        subprocess.run([sys.executable, "-m", "coverage", "combine", "-q",
                        f"--rcfile={rc}", f"--data-file={t / 'cov'}"],
                       cwd=t, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True)
        cmap = _read(t / "cov", timing["seconds"], digest)
    cmap.dump(out)
    print(f"coverage map of {len(cmap.tests)} tests in {took:.0f} s written to {out}",
          file=sys.stderr)
    return cmap


def _read(data_file: Path, seconds: dict[str, float], digest: str) -> CoverMap:
    from coverage import CoverageData

    data = CoverageData(basename=str(data_file))
    data.read()
    tests = sorted(seconds)
    index = {t: i for i, t in enumerate(tests)}
    lines: dict[str, dict[int, list[int]]] = {}
    for path in data.measured_files():
        rel = Path(path).resolve().relative_to(ROOT.resolve()).as_posix()
        by: dict[int, list[int]] = {}
        for line, contexts in data.contexts_by_lineno(path).items():
            ran = sorted({index[c] for c in contexts if c in index})
            if ran:
                by[line] = ran
        lines[rel] = by
    return CoverMap(tests, [seconds[t] for t in tests], lines, digest)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="where the map's JSON goes")
    args = ap.parse_args(argv)
    build(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
