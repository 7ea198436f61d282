"""Mutation testing: does the suite notice small semantic edits to the code it guards?

Each mutant is one edit, made by one operator (``tools/mutation/operators.py``) at one
site of one target module (``tools/mutation/targets.py``: every logic module under
``spec/``, ``hisparse/``, ``executor/``), in its own scratch copy of the tree (the working
tree is never touched). The module's guard tests run first with ``-x``; a mutant that
survives them runs the whole non-TLC suite; a failure or a timeout kills it, a green
run of both means it survived. Mutants run ``--jobs`` at a time (default: every core).
A kill counts only if its failing test passes alone on the unmutated tree (asked once
per test per run): a test that fails on this host for its own reasons makes no verdict.
Survivors go to ``docs/mutation-survivors.md``: killed by a new test or argued equivalent.

Usage (outside CI; on a shared machine run it under ``nice -n 19``)::

    python tools/mutate.py --jobs 2 --json mutation.json    # every mutant
    python tools/mutate.py --list                           # the mutants, not run
    python tools/mutate.py --only 'spec/machine.py:*'       # a subset (fnmatch on the id)
    python tools/mutate.py --figures mutation.json          # the tables of a run

With a coverage map (``python -m tools.mutation.covermap --out covmap.json``, one run of
the suite), a mutant inside a function body runs exactly the tests that run its lines,
which is the whole suite for it, quickest first:

    python tools/mutate.py --cover-map covmap.json --json mutation.json
    python tools/mutate.py --check-killers mutation.json   # each killer passes unmutated
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
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
from tools.mutation.covermap import CoverMap, tree_digest
from tools.mutation.mutants import Mutant, interleaved, mutants_of
from tools.mutation.operators import OPERATORS
from tools.mutation.reach import reach
from tools.mutation.runner import (
    ERROR,
    ROOT,
    SURVIVED,
    Killers,
    Limits,
    Outcome,
    Scratch,
    baseline,
    run_all,
    tree_files,
)
from tools.mutation.targets import TARGETS, Guard


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
    ap.add_argument("--rerun", type=Path,
                    help="with --figures: a later run of its survivors (tests added since): "
                         "those it kills are counted 'killed later'")
    ap.add_argument("--survivors", action="store_true",
                    help="with --figures: also a table of every survivor and what became of it")
    ap.add_argument("--cover-map", type=Path,
                    help="a coverage map of this tree: a mutant in a function body runs the "
                         "tests that run its lines (its whole suite) instead of guards + suite")
    ap.add_argument("--guard", action="append", default=[],
                    help="run these tests (files or node ids) as every selected mutant's "
                         "guard instead of its own, and decide on them alone (a kill proof)")
    ap.add_argument("--survivors-of", type=Path,
                    help="run again the survivors of this run's JSON (each found in today's "
                         "tree by its file, operator and line; recorded with 'of' its old id)")
    ap.add_argument("--resume", action="store_true",
                    help="keep the outcomes already in --json and run only the mutants "
                         "it does not decide yet: a later tree too (tests added since), "
                         "an outcome being kept while today's tree makes the same edit")
    ap.add_argument("--longest-first", action="store_true",
                    help="with --cover-map: run the mutants whose tests take longest first "
                         "(a capped call then ends on short ones; edits at import first)")
    ap.add_argument("--shortest-first", action="store_true",
                    help="with --cover-map: the mutants whose tests take least time first (a "
                         "small machine decides the most in its time, beside a large one "
                         "running --longest-first)")
    ap.add_argument("--at-import", choices=("run", "skip", "only"), default="run",
                    help="with --cover-map: the edits that run at import (guards, then the "
                         "whole suite when they survive them; minutes each): run them too, "
                         "leave them out (a capped call on many cores), or run them alone "
                         "(an uncapped call)")
    ap.add_argument("--stop-after", type=float,
                    help="start no mutant after this many seconds (those running finish; "
                         "--resume goes on from there)")
    ap.add_argument("--check-killers", type=Path,
                    help="run each test that killed a mutant of this run's JSON alone on the "
                         "unmutated tree (each must pass: else its kills are not kills) and exit")
    return ap


def select(args: argparse.Namespace, cover: CoverMap | None = None,
           again: dict[str, str] | None = None) -> tuple[list[Mutant], list[Mutant]]:
    """(every generated mutant of the files ``--only`` can match, the selection to run,
    interleaved over files); ``again``: filled with the survivors of ``--survivors-of``,
    the current id of each mapped to the id it had in that run."""
    earlier = json.loads(args.survivors_of.read_text())["outcomes"] if args.survivors_of \
        else None
    patterns = args.only or ([f"{o['file']}:*" for o in earlier] if earlier else [])
    files = [f for f in TARGETS
             if not patterns or any(fnmatch.fnmatch(f, p.split(":", 1)[0]) for p in patterns)]
    every = [m for f in files for m in mutants_of(ROOT, f)]
    chosen = [m for m in every if m.sampled(args.sample)]
    if earlier is not None:
        found = map_survivors(earlier, every)
        if again is not None:
            again.update(found)
        chosen = [m for m in every if m.id in found]
    if args.only:
        chosen = [m for m in chosen if any(fnmatch.fnmatch(m.id, p) for p in args.only)]
    if args.operator:
        chosen = [m for m in chosen if m.operator in args.operator]
    if args.no_tlc_guards:
        chosen = [m for m in chosen if not TARGETS[m.file].tlc]
    order = interleaved(chosen, tuple(args.first.split(",")))
    if cover is not None and args.at_import != "run":
        runtime = runtime_ids(order, cover)
        order = [m for m in order if (m.id in runtime) == (args.at_import == "skip")]
    if cover is not None and (args.longest_first or args.shortest_first):
        cost = expected_seconds(order, cover)
        order.sort(key=lambda m: -cost[m.id] if args.longest_first else cost[m.id])
    elif cover is not None:
        # edits that run at import need the whole suite when they survive their guards:
        # the cheap ones (run only when called, decided by the map) go first
        runtime = runtime_ids(order, cover)
        order = [m for m in order if m.id in runtime] + \
                [m for m in order if m.id not in runtime]
    return every, order


def map_survivors(outcomes: list[dict[str, Any]], every: list[Mutant]) -> dict[str, str]:
    """The survivors among ``outcomes`` (an earlier run, its tree since edited), each as
    the current mutant of the same file, operator and edited line nearest its old line."""
    by: dict[tuple[str, str, str], list[Mutant]] = {}
    for m in every:
        by.setdefault((m.file, m.operator, m.before), []).append(m)
    out: dict[str, str] = {}
    for o in outcomes:
        if o["status"] != SURVIVED:
            continue
        same = by.get((o["file"], o["operator"], o["before"]))
        if not same:
            print(f"no longer generated: {o['id']}  {o['before']}", file=sys.stderr)
            continue
        out[min(same, key=lambda m: abs(m.line - o["line"])).id] = o["id"]
    return out


def runtime_ids(mutants: list[Mutant], cover: CoverMap) -> set[str]:
    """The mutants the map decides (their edits run only when called)."""
    return {i for i, cost in expected_seconds(mutants, cover).items() if cost != math.inf}


def expected_seconds(mutants: list[Mutant], cover: CoverMap) -> dict[str, float]:
    """What each mutant may cost at most: the seconds of the tests that run its lines (a
    survivor runs them all), or infinity for an edit at import (guards, then the whole
    suite). Longest first packs the cores, and a capped call ends on the short ones."""
    sources = {f: (ROOT / f).read_text() for f in {m.file for m in mutants}}
    out: dict[str, float] = {}
    for m in mutants:
        r = reach(m, sources[m.file])
        runtime = r.runtime and not cover.at_import(m.file, r.lines)
        out[m.id] = cover.seconds_of(cover.tests_of(m.file, r.lines)) if runtime else math.inf
    return out


def _counts(mutants: list[Mutant], key: str) -> dict[str, int]:
    c = Counter(getattr(m, key) for m in mutants)
    order = [op.name for op in OPERATORS] if key == "operator" else list(TARGETS)
    return {k: c[k] for k in order}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.figures:
        print(figures.main(args.figures, args.rerun, args.survivors))
        return 0
    if args.check_killers:
        return check_killers(args.check_killers, args.jobs)
    cover = None
    if args.longest_first and args.shortest_first:
        print("mutate: --longest-first or --shortest-first, not both", file=sys.stderr)
        return 2
    if args.at_import != "run" and not args.cover_map:
        print("mutate: --at-import needs --cover-map (the map says which edits run at import)",
              file=sys.stderr)
        return 2
    if args.cover_map:
        cover = CoverMap.load(args.cover_map)
        if cover.tree != tree_digest():
            print(f"mutate: {args.cover_map} was made from another tree (tests or code "
                  "changed since): build it again", file=sys.stderr)
            return 2
    again: dict[str, str] = {}
    every, mutants = select(args, cover, again)
    if args.list:
        for m in mutants:
            print(f"{m.id}\t{m.before}")
        print(f"{len(mutants)} mutants of {len(every)} generated", file=sys.stderr)
        return 0
    files = tree_files()
    full = not args.no_full and not args.guard
    guard = Guard(tuple(args.guard)) if args.guard else None
    if args.baseline_from:
        seconds = json.loads(args.baseline_from.read_text())["baseline_seconds"]
    else:
        guards = {guard} if guard else {TARGETS[m.file] for m in mutants}
        seconds = baseline(files, guards, full, args.jobs)
    limits = Limits.from_baseline(seconds, args.timeout_factor, floor=60.0)
    print(f"baseline (unmutated, seconds): {seconds}", flush=True)
    doc: dict[str, Any] = {
        "command": " ".join(["python", "tools/mutate.py", *(argv or sys.argv[1:])]),
        "jobs": args.jobs, "cpus": os.cpu_count(), "full_suite": full,
        "cover_map": cover.tree if cover else None,
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "baseline_seconds": seconds,
        "generated_by_operator": _counts(every, "operator"),
        "generated_by_file": _counts(every, "file"),
        "selected": len(mutants),
        "selected_by_file": _counts(mutants, "file"),
        "outcomes": [],
    }
    if args.resume and args.json and args.json.exists():
        old = json.loads(args.json.read_text())
        doc["outcomes"] = kept(old["outcomes"], every + unselected(old["outcomes"], every))
        doc["resumed"] = [*old.get("resumed", []), old["started"]]
        decided = {o["id"] for o in doc["outcomes"]}
        mutants = [m for m in mutants if m.id not in decided]
        print(f"resuming: {len(decided)} decided ({len(old['outcomes']) - len(decided)} "
              f"dropped: errors or edits changed since), {len(mutants)} to run", flush=True)
    t0 = time.monotonic()
    stop_at = t0 + args.stop_after if args.stop_after is not None else None

    def done(o: Outcome) -> None:
        doc["outcomes"].append({**asdict(o.mutant), "status": o.status, "phase": o.phase,
                                "seconds": o.seconds, "tests": o.tests, "killer": o.killer,
                                "tree": doc["cover_map"],
                                **({"of": again[o.mutant.id]} if o.mutant.id in again else {})})
        doc["seconds"] = round(time.monotonic() - t0, 1)
        n = len(doc["outcomes"])
        print(f"[{n}/{doc['selected']}] {o.status:8} {o.phase:5} {o.seconds:6.1f}s "
              f"{o.mutant.id}  {o.mutant.before}", flush=True)
        if args.json:
            write_atomically(args.json, json.dumps(doc, indent=1) + "\n")

    outcomes = run_all(mutants, args.jobs, limits, full, done, None if guard else cover, guard,
                       stop_at)
    survivors = [o for o in outcomes if o.status == SURVIVED]
    print(f"{len(outcomes) - len(survivors)}/{len(outcomes)} not surviving, "
          f"{len(survivors)} survived in {time.monotonic() - t0:.0f}s")
    for o in survivors:
        print(f"SURVIVED {o.mutant.id}  {o.mutant.before}")
    return 0


def kept(outcomes: list[dict[str, Any]], every: list[Mutant]) -> list[dict[str, Any]]:
    """The outcomes a resumed run keeps: verdicts on edits made today, each under the id
    its edit has now (an edit elsewhere in the file, or an operator that makes fewer
    sites, renumbers ids; the hash of the mutated file does not change). A kill stands
    while its killer does (``--check-killers``); a test added since can only kill more."""
    now = {m.edit: m for m in every}
    return [{**o, **asdict(now[o["edit"]])} for o in outcomes
            if o["status"] != ERROR and o.get("edit") in now]


def unselected(outcomes: list[dict[str, Any]], every: list[Mutant]) -> list[Mutant]:
    """The mutants of the files ``outcomes`` holds that ``every`` does not: a resumed call
    that selects other files (``--only``) keeps their outcomes, each checked on its file."""
    others = sorted({o["file"] for o in outcomes} - {m.file for m in every})
    return [m for f in others if f in TARGETS for m in mutants_of(ROOT, f)]


def write_atomically(path: Path, text: str) -> None:
    """``path`` holds ``text`` or what it held before, never a part: a run stopped while
    it writes (a timeout, Ctrl-C) keeps every outcome decided so far for ``--resume``."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def check_killers(path: Path, jobs: int) -> int:
    """Each test named as a killer in a run's JSON, alone on the unmutated tree: a test
    that fails there too (it needs another test first, or is broken) made false kills."""
    doc = json.loads(path.read_text())
    killers = sorted({o["killer"] for o in doc["outcomes"] if o.get("killer")})
    files = tree_files()
    bad = []
    check = Killers()
    with Scratch(files) as s:
        for n, test in enumerate(killers, 1):
            ok = check.passes(s, test, 1800)
            print(f"[{n}/{len(killers)}] {'passes' if ok else 'FAILS':8} {test}", flush=True)
            if not ok:
                bad.append(test)
    print(f"{len(killers) - len(bad)}/{len(killers)} killers pass alone on the unmutated tree")
    for t in bad:
        print(f"FAILS UNMUTATED {t}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
