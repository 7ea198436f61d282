"""Mutation testing: does the suite notice small semantic edits to the code it guards?

Each mutant is one edit, made by one operator (``tools/mutation/operators.py``) at one
site of one target module (``tools/mutation/targets.py``: every logic module under
``spec/``, ``hisparse/``, ``executor/``), in its own scratch copy of the tree (the working
tree is never touched). The module's guard tests run first with ``-x``; a mutant that
survives them runs the whole non-TLC suite; a failure or a timeout kills it, a green
run of both means it survived. Mutants run ``--jobs`` at a time (default: every core).
Survivors go to ``docs/mutation-survivors.md``: killed by a new test or argued equivalent.

Usage (outside CI; on a shared machine run it under ``nice -n 19``)::

    python tools/mutate.py --jobs 2 --json mutation.json    # every mutant
    python tools/mutate.py --list                           # the mutants, not run
    python tools/mutate.py --only 'spec/machine.py:*'       # a subset (fnmatch on the id)
    python tools/mutate.py --figures mutation.json          # the tables of a run
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import sys
import time
from collections import Counter
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make ``tools.mutation`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tools.mutation import figures
from tools.mutation.mutants import Mutant, interleaved, mutants_of
from tools.mutation.operators import OPERATORS
from tools.mutation.runner import (
    ROOT,
    SURVIVED,
    Limits,
    Outcome,
    baseline,
    run_all,
    tree_files,
)
from tools.mutation.targets import TARGETS


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--only", action="append", default=[], help="fnmatch pattern on mutant ids")
    ap.add_argument("--operator", action="append", default=[], help="only these operators")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--json", type=Path, help="write every outcome here (after each mutant)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                    help="mutants run at once (default: every core, %(default)s here)")
    ap.add_argument("--sample", type=int, default=1,
                    help="keep one mutant in N, chosen by a hash of what it edits (1 = all)")
    ap.add_argument("--no-full", action="store_true",
                    help="decide on the guard tests alone (no whole-suite run for survivors)")
    ap.add_argument("--no-tlc-guards", action="store_true",
                    help="leave out the modules whose only guards model-check (they need TLC)")
    ap.add_argument("--timeout-factor", type=float, default=5.0,
                    help="a run may take this many times its unmutated baseline")
    ap.add_argument("--first", default="reorder,loop,var,collection,none,drop",
                    help="operators run first in each file (comma-separated)")
    ap.add_argument("--baseline-from", type=Path,
                    help="take the baseline seconds from an earlier run's JSON of the same "
                         "tree instead of running the unmutated tests again")
    ap.add_argument("--figures", type=Path, help="print the tables of a run's JSON and exit")
    return ap


def select(args: argparse.Namespace) -> tuple[list[Mutant], list[Mutant]]:
    """(every generated mutant, the selection to run, interleaved over files)."""
    every = [m for f in TARGETS for m in mutants_of(ROOT, f)]
    chosen = [m for m in every if m.sampled(args.sample)]
    if args.only:
        chosen = [m for m in chosen if any(fnmatch.fnmatch(m.id, p) for p in args.only)]
    if args.operator:
        chosen = [m for m in chosen if m.operator in args.operator]
    if args.no_tlc_guards:
        chosen = [m for m in chosen if not TARGETS[m.file].tlc]
    return every, interleaved(chosen, tuple(args.first.split(",")))


def _counts(mutants: list[Mutant], key: str) -> dict[str, int]:
    c = Counter(getattr(m, key) for m in mutants)
    order = [op.name for op in OPERATORS] if key == "operator" else list(TARGETS)
    return {k: c[k] for k in order}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.figures:
        print(figures.main(args.figures))
        return 0
    every, mutants = select(args)
    if args.list:
        for m in mutants:
            print(f"{m.id}\t{m.before}")
        print(f"{len(mutants)} mutants of {len(every)} generated", file=sys.stderr)
        return 0
    files = tree_files()
    full = not args.no_full
    if args.baseline_from:
        seconds = json.loads(args.baseline_from.read_text())["baseline_seconds"]
    else:
        seconds = baseline(files, {TARGETS[m.file] for m in mutants}, full, args.jobs)
    limits = Limits.from_baseline(seconds, args.timeout_factor, floor=60.0)
    print(f"baseline (unmutated, seconds): {seconds}", flush=True)
    doc: dict[str, Any] = {
        "command": " ".join(["python", "tools/mutate.py", *(argv or sys.argv[1:])]),
        "jobs": args.jobs, "cpus": os.cpu_count(), "full_suite": full,
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "baseline_seconds": seconds,
        "generated_by_operator": _counts(every, "operator"),
        "generated_by_file": _counts(every, "file"),
        "selected": len(mutants),
        "selected_by_file": _counts(mutants, "file"),
        "outcomes": [],
    }
    t0 = time.monotonic()

    def done(o: Outcome) -> None:
        doc["outcomes"].append({**asdict(o.mutant), "status": o.status, "phase": o.phase,
                                "seconds": o.seconds})
        doc["seconds"] = round(time.monotonic() - t0, 1)
        n = len(doc["outcomes"])
        print(f"[{n}/{len(mutants)}] {o.status:8} {o.phase:5} {o.seconds:6.1f}s "
              f"{o.mutant.id}  {o.mutant.before}", flush=True)
        if args.json:
            args.json.write_text(json.dumps(doc, indent=1) + "\n")

    outcomes = run_all(mutants, args.jobs, limits, full, done)
    survivors = [o for o in outcomes if o.status == SURVIVED]
    print(f"{len(outcomes) - len(survivors)}/{len(outcomes)} not surviving, "
          f"{len(survivors)} survived in {time.monotonic() - t0:.0f}s")
    for o in survivors:
        print(f"SURVIVED {o.mutant.id}  {o.mutant.before}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
