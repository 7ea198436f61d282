"""Mutation testing: does the suite notice small semantic edits to the code it guards?

Each mutant is one edit, made by one operator of ``OPERATORS`` at one point of one file
of ``TARGETS``, in a scratch copy of the checkout (the working tree is never touched).
The copy's tests for that file (``TARGETS``) run with ``-x``; a failure or a timeout kills
the mutant, a green run means it survived. Survivors are listed for
``docs/mutation-survivors.md``, where each is killed by a new test or argued equivalent.

Usage (outside CI, a few tens of minutes on 2 cores)::

    python tools/mutate.py --json mutation.json            # every mutant
    python tools/mutate.py --list                          # the mutants, not run
    python tools/mutate.py --only 'spec/machine.py:*'      # a subset (fnmatch on the id)
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The files under test and the tests that guard each (fast ones: no TLC, no GPU, no
# whole-system Hypothesis run). Globs are expanded in the scratch copy.
SPEC_TESTS = [
    "tests/test_invariants_alone.py",
    "tests/test_boundaries_machine.py",
    "tests/test_protocol_bugs.py",
    "tests/test_protocol_sync.py",
    "tests/test_protocol_stateful.py",
]
SYSTEM_TESTS = [
    "tests/test_boundaries_system.py",
    "tests/test_coordinator_lifecycle.py",
    "tests/test_connector.py",
    "tests/test_config.py",
    "tests/test_messages.py",
    "tests/test_boundaries_pool.py",
]
EXECUTOR_TESTS = ["tests/test_boundaries_executor.py", "tests/test_executor_reference.py"]
TARGETS: dict[str, list[str]] = {
    "spec/machine.py": SPEC_TESTS,
    "spec/invariants.py": SPEC_TESTS,
    "spec/state.py": SPEC_TESTS,
    "hisparse/blockpool.py": SYSTEM_TESTS,
    "hisparse/config.py": SYSTEM_TESTS,
    "hisparse/coordinator.py": SYSTEM_TESTS,
    "hisparse/connector.py": SYSTEM_TESTS,
    "hisparse/worker.py": SYSTEM_TESTS,
    "executor/reference.py": EXECUTOR_TESTS,
    "executor/validate.py": EXECUTOR_TESTS,
}

_CMP_SWAP: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}
_ARITH_SWAP: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.FloorDiv: ast.Mult,
    ast.Mod: ast.FloorDiv,
}


BOUND_KEYWORDS = frozenset({"ge", "gt", "le", "lt", "min_length", "max_length"})


def _mark_bounds(tree: ast.AST) -> None:
    """Tag the integer literals that are limits: compared against, or a Field bound."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
        elif isinstance(node, ast.keyword) and node.arg in BOUND_KEYWORDS:
            operands = [node.value]
        else:
            continue
        for o in operands:
            o._bound = True  # type: ignore[attr-defined]


def _bound(node: ast.AST) -> bool:
    return getattr(node, "_bound", False)


def _is_call_stmt(node: ast.AST) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)


@dataclass(frozen=True)
class Operator:
    """One kind of edit: ``applies`` picks the nodes, ``apply`` edits one in place."""

    name: str
    summary: str
    applies: Callable[[ast.AST], bool]
    apply: Callable[[ast.AST], None]


def _swap_cmp(node: ast.AST) -> None:
    assert isinstance(node, ast.Compare)
    node.ops[0] = _CMP_SWAP[type(node.ops[0])]()


def _swap_bool(node: ast.AST) -> None:
    assert isinstance(node, ast.BoolOp)
    node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()


def _swap_arith(node: ast.AST) -> None:
    assert isinstance(node, ast.BinOp | ast.AugAssign)
    node.op = _ARITH_SWAP[type(node.op)]()


def _bump_int(node: ast.AST) -> None:
    assert isinstance(node, ast.Constant) and isinstance(node.value, int)
    node.value = node.value + 1


def _to_pass(node: ast.AST) -> None:
    node.__class__ = ast.Pass  # Pass has no fields: the statement's own ones are ignored


def _drop_not(node: ast.AST) -> None:
    assert isinstance(node, ast.UnaryOp)
    node.op = ast.UAdd()  # `+x` of a bool is its int: same truth, the negation is gone


OPERATORS: tuple[Operator, ...] = (
    Operator(
        "cmp",
        "flip one comparison: < <=, > >=, == !=, in / not in, is / is not",
        lambda n: isinstance(n, ast.Compare) and type(n.ops[0]) in _CMP_SWAP,
        _swap_cmp,
    ),
    Operator(
        "bool",
        "and <-> or",
        lambda n: isinstance(n, ast.BoolOp),
        _swap_bool,
    ),
    Operator(
        "not",
        "drop a `not`",
        lambda n: isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not),
        _drop_not,
    ),
    Operator(
        "arith",
        "+ <-> -, // -> *, % -> // (also in augmented assignments)",
        lambda n: isinstance(n, ast.BinOp | ast.AugAssign) and type(n.op) in _ARITH_SWAP,
        _swap_arith,
    ),
    Operator(
        "int",
        "an integer literal n -> n + 1 (bounds, offsets, limits)",
        lambda n: isinstance(n, ast.Constant) and type(n.value) is int and _bound(n),
        _bump_int,
    ),
    Operator(
        "raise",
        "delete a `raise` (a refusal that no longer refuses)",
        lambda n: isinstance(n, ast.Raise),
        _to_pass,
    ),
    Operator(
        "call",
        "delete a call statement (a release, an append, a free that no longer happens)",
        _is_call_stmt,
        _to_pass,
    ),
)
BY_NAME = {op.name: op for op in OPERATORS}


def _skipped_subtrees(tree: ast.AST) -> set[int]:
    """Nodes no mutant touches: messages, annotations, asserts, docstrings, type guards."""
    skip: set[int] = set()

    def mark(node: ast.AST | None) -> None:
        if node is not None:
            skip.update(id(n) for n in ast.walk(node))

    for node in ast.walk(tree):
        if isinstance(node, ast.Raise):
            mark(node.exc)
            mark(node.cause)
        elif isinstance(node, ast.JoinedStr | ast.Assert):
            mark(node)
        elif isinstance(node, ast.AnnAssign | ast.arg):
            mark(node.annotation)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            mark(node.returns)
        elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            mark(node)
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            mark(node)  # docstrings
        elif isinstance(node, ast.Call) and ast.unparse(node.func).endswith("append"):
            # problem lists of invariants: the message arguments are not semantics
            for arg in node.args:
                if isinstance(arg, ast.JoinedStr):
                    mark(arg)
    return skip


@dataclass(frozen=True)
class Mutant:
    """One edit; ``id`` is ``file:line:operator:n`` (n counts points of that operator)."""

    id: str
    file: str
    line: int
    operator: str
    index: int
    before: str

    def sampled(self, one_in: int) -> bool:
        """A stable 1-in-N choice that survives edits elsewhere in the file (no line)."""
        what = f"{self.file}:{self.operator}:{self.index}:{self.before}"
        return zlib.crc32(what.encode()) % max(1, one_in) == 0


def _points(tree: ast.AST, op: Operator) -> Iterator[ast.AST]:
    skip = _skipped_subtrees(tree)
    _mark_bounds(tree)
    for node in ast.walk(tree):
        if id(node) not in skip and op.applies(node):
            yield node


def mutants_of(file: str) -> list[Mutant]:
    """Every mutant of one target file, in a stable order."""
    source = (ROOT / file).read_text()
    out: list[Mutant] = []
    for op in OPERATORS:
        for n, node in enumerate(_points(ast.parse(source), op)):
            line = getattr(node, "lineno", 0)
            text = source.splitlines()[line - 1].strip() if line else ""
            out.append(Mutant(f"{file}:{line}:{op.name}:{n}", file, line, op.name, n, text))
    return out


def mutated_source(m: Mutant, source: str) -> str:
    tree = ast.parse(source)
    op = BY_NAME[m.operator]
    for n, node in enumerate(_points(tree, op)):
        if n == m.index:
            op.apply(node)
            return ast.unparse(ast.fix_missing_locations(tree)) + "\n"
    raise ValueError(f"mutant {m.id} no longer matches its file")


@dataclass
class Outcome:
    mutant: Mutant
    status: str  # killed | survived | timeout | error
    seconds: float


class Scratch:
    """A copy of the checkout that imports as ``hisparse`` ahead of the editable install."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="hisparse-mutate-"))
        ignore = shutil.ignore_patterns(".git", ".venv", "__pycache__", ".hypothesis", "*.pyc")
        for name in ("hisparse", "spec", "executor", "tests", "tla", "docs", "pyproject.toml"):
            src = ROOT / name
            if src.is_dir():
                shutil.copytree(src, self.root / name, ignore=ignore)
            else:
                shutil.copy2(src, self.root / name)
        # the installed layout: hisparse.spec and hisparse.executor are sub-packages
        (self.root / "hisparse" / "spec").symlink_to("../spec")
        (self.root / "hisparse" / "executor").symlink_to("../executor")
        self.env = {**os.environ, "PYTHONPATH": str(self.root), "PYTHONDONTWRITEBYTECODE": "1"}
        self.env.pop("CI", None)

    def tests(self, file: str) -> list[str]:
        return [t for t in TARGETS[file] if (self.root / t).is_file()]

    def pytest(self, tests: list[str], timeout: float) -> str:
        cmd = [
            sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
            "-m", "not tlc and not gpu", "--hypothesis-seed=0", *tests,
        ]
        try:
            proc = subprocess.run(
                cmd, cwd=self.root, env=self.env, capture_output=True, text=True,
                timeout=timeout, check=False,
            )
        except subprocess.TimeoutExpired:
            return "timeout"
        if proc.returncode == 0:
            return "survived"
        if proc.returncode == 1:
            return "killed"
        return "error"  # collection/import failure: the mutant broke the module

    def check_import_path(self) -> None:
        probe = (
            "import hisparse.spec.machine as m, hisparse.executor.reference as r; "
            "print(m.__file__, r.__file__)"
        )
        out = subprocess.run(
            [sys.executable, "-c", probe], cwd=self.root, env=self.env,
            capture_output=True, text=True, check=True,
        ).stdout
        if str(self.root) not in out.split()[0] or str(self.root) not in out.split()[1]:
            raise SystemExit(f"scratch copy does not shadow the install: {out}")

    def run(self, m: Mutant, timeout: float) -> Outcome:
        path = self.root / m.file
        original = path.read_text()
        path.write_text(mutated_source(m, original))
        t0 = time.monotonic()
        try:
            status = self.pytest(self.tests(m.file), timeout)
        finally:
            path.write_text(original)
        return Outcome(m, status, round(time.monotonic() - t0, 2))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--only", action="append", default=[], help="fnmatch pattern on mutant ids")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--json", type=Path, help="write every outcome here")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per mutant")
    ap.add_argument(
        "--sample", type=int, default=2,
        help="keep one mutant in N, chosen by a hash of what it edits (1 = all)",
    )
    args = ap.parse_args(argv)
    mutants = [m for f in TARGETS for m in mutants_of(f) if m.sampled(args.sample)]
    if args.only:
        mutants = [m for m in mutants if any(fnmatch.fnmatch(m.id, p) for p in args.only)]
    if args.list:
        for m in mutants:
            print(f"{m.id}\t{m.before}")
        print(f"{len(mutants)} mutants", file=sys.stderr)
        return 0
    scratch = Scratch()
    scratch.check_import_path()
    files = {m.file for m in mutants}
    baseline = {f: scratch.pytest(scratch.tests(f), args.timeout) for f in files}
    broken = [f for f, s in baseline.items() if s != "survived"]
    if broken:
        raise SystemExit(f"the unmutated tests do not pass for {broken}: fix them first")
    outcomes: list[Outcome] = []
    t0 = time.monotonic()
    for i, m in enumerate(mutants, 1):
        o = scratch.run(m, args.timeout)
        outcomes.append(o)
        print(f"[{i}/{len(mutants)}] {o.status:8} {o.seconds:6.1f}s {m.id}  {m.before}", flush=True)
        if args.json:
            _write(args.json, outcomes, time.monotonic() - t0)
    survivors = [o for o in outcomes if o.status == "survived"]
    killed = len(outcomes) - len(survivors)
    print(f"{killed}/{len(outcomes)} killed, {len(survivors)} survived "
          f"in {time.monotonic() - t0:.0f}s")
    for o in survivors:
        print(f"SURVIVED {o.mutant.id}  {o.mutant.before}")
    shutil.rmtree(scratch.root, ignore_errors=True)
    return 0


def _write(path: Path, outcomes: list[Outcome], seconds: float) -> None:
    doc = {
        "seconds": round(seconds, 1),
        "total": len(outcomes),
        "killed": sum(o.status != "survived" for o in outcomes),
        "outcomes": [
            {**asdict(o.mutant), "status": o.status, "seconds": o.seconds} for o in outcomes
        ],
    }
    path.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
