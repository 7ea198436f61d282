"""Run chosen mutants against GPU tests, on the GPU machine (no git there).

``tools/mutate.py`` deselects ``gpu`` tests; the GPU-only survivors (``tp/run.py``'s CUDA /
shared-backing path) are decided here: each mutant in its own scratch copy, the given
tests run with ``-m gpu``. Prints one line per mutant and writes the outcomes as JSON.

    python tools/mutate_gpu.py --tests tests/test_tp_gpu.py --json out.json ID [ID ...]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tools.mutation.mutants import mutants_of, mutated_source
from tools.mutation.runner import ROOT, Scratch

SKIP_DIRS = {".git", ".venv", ".whl", "build", "__pycache__", ".mypy_cache", ".ruff_cache",
             ".pytest_cache", ".hypothesis", "node_modules"}


def walk_files(root: Path) -> list[str]:
    """The tree without git: every file outside build and cache folders."""
    out = []
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x not in SKIP_DIRS and not x.endswith(".egg-info")]
        out += [str(Path(d, f).relative_to(root)) for f in files]
    return sorted(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("ids", nargs="+")
    ap.add_argument("--tests", action="append", required=True)
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=300)
    a = ap.parse_args()
    by_id = {m.id: m for f in {i.split(":")[0] for i in a.ids} for m in mutants_of(ROOT, f)}
    unknown = [i for i in a.ids if i not in by_id]
    if unknown:
        print(f"unknown mutant ids: {unknown}", file=sys.stderr)
        return 2
    files = walk_files(ROOT)
    extra = os.environ.get("PYTHONPATH", "")

    def one(i: str) -> dict[str, str]:
        m = by_id[i]
        with Scratch(files) as s:
            s.write(m.file, mutated_source(m, (ROOT / m.file).read_text()))
            if extra:
                s.env["PYTHONPATH"] += os.pathsep + extra
            status = s.pytest(a.tests, "gpu", a.timeout)
        print(f"{status:8} {i}  {m.before}", flush=True)
        return {"id": i, "before": m.before, "status": status}

    with ThreadPoolExecutor(max_workers=a.jobs) as pool:
        out = list(pool.map(one, a.ids))
    a.json.write_text(json.dumps({"tests": a.tests, "outcomes": out}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
