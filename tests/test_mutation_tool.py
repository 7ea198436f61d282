"""The mutation tool itself (tools/mutate.py): its operators make the intended edits,
and its runner imports the mutated copy and reports a planted mutant killed.

The full mutation run stays outside CI; these take seconds.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tools.mutation.mutants import Mutant, interleaved, mutants_of, mutated_source
from tools.mutation.operators import OPERATORS, sites, splice
from tools.mutation.runner import (
    KILLED,
    ROOT,
    SURVIVED,
    Limits,
    Scratch,
    module_name,
    run_mutant,
    tree_files,
)
from tools.mutation.targets import Guard


def edits(source: str, operator: str) -> list[str]:
    """Every mutated version of ``source`` one operator makes."""
    src = textwrap.dedent(source)
    return [splice(src, s) for s in sites(src, operator)]


def test_reorder_moves_a_side_effect_before_its_guard() -> None:
    src = """\
    def take(pool, n):
        if n > len(pool):
            raise ValueError(n)
        del pool[:n]
        return n
    """
    assert edits(src, "reorder") == [textwrap.dedent("""\
    def take(pool, n):
        del pool[:n]
        if n > len(pool):
            raise ValueError(n)
        return n
    """)]


def test_reorder_moves_a_call_before_a_check_call() -> None:
    src = """\
    def free(m, blocks):
        m.check_free(blocks)
        m.pool.extend(blocks)
    """
    assert edits(src, "reorder") == [textwrap.dedent("""\
    def free(m, blocks):
        m.pool.extend(blocks)
        m.check_free(blocks)
    """)]


def test_loop_swaps_break_and_continue() -> None:
    src = "def first(xs):\n    for x in xs:\n        if x < 0:\n            continue\n" \
          "        if x > 9:\n            break\n"
    head = "def first(xs):\n    for x in xs:\n        if x < 0:\n"
    assert edits(src, "loop") == [
        head + "            break\n        if x > 9:\n            break\n",
        head + "            continue\n        if x > 9:\n            continue\n",
    ]


def test_var_uses_a_sibling_of_the_same_annotation() -> None:
    src = """\
    def move(src: int, dst: int, n: str) -> int:
        return src - dst
    """
    got = edits(src, "var")
    assert [g.splitlines()[1].strip() for g in got] == ["return dst - dst", "return src - src"]


def test_var_uses_a_sibling_attribute_of_the_same_type() -> None:
    src = """\
    class Pools:
        def __init__(self) -> None:
            self.gpu_free: list[int] = []
            self.host_free: list[int] = []
            self.count = 0

        def give(self, b: int) -> None:
            self.gpu_free.append(b)
    """
    got = edits(src, "var")
    assert len(got) == 1
    assert "self.host_free.append(b)" in got[0]


def test_collection_weakens_set_equality_to_subset_and_all_to_any() -> None:
    src = """\
    def same(a: set[int], b: list[int]) -> bool:
        return a == set(b) and all(x > 0 for x in b)
    """
    got = edits(src, "collection")
    assert [g.splitlines()[1].strip() for g in got] == [
        "return (a <= set(b)) and all(x > 0 for x in b)",
        "return a == set(b) and any(x > 0 for x in b)",
    ]


def test_collection_leaves_non_set_equality_alone() -> None:
    assert edits("def f(a: int, b: int) -> bool:\n    return a == b\n", "collection") == []


def test_none_reads_an_empty_value_as_a_missing_one() -> None:
    src = """\
    def f(x, y):
        return x is not None and y is None
    """
    got = edits(src, "none")
    assert [g.splitlines()[1].strip() for g in got] == [
        "return x and y is None",
        "return x is not None and (not y)",
    ]


def test_drop_removes_one_case_of_a_literal() -> None:
    src = """\
    FORBIDDEN = (1, 2)


    def f(x):
        return x in ("a", "b") or isinstance(x, int | float)
    """
    got = edits(src, "drop")
    lines = {g.splitlines()[4].strip() for g in got} | {g.splitlines()[0] for g in got}
    assert "return x in (('b',)) or isinstance(x, int | float)" in lines
    assert "return x in (('a',)) or isinstance(x, int | float)" in lines
    assert 'return x in ("a", "b") or isinstance(x, float)' in lines
    assert 'return x in ("a", "b") or isinstance(x, int)' in lines
    assert "FORBIDDEN = ((2,))" in lines
    assert "FORBIDDEN = ((1,))" in lines
    assert len(got) == 6


def test_the_first_seven_operators_still_make_their_edits() -> None:
    src = "def f(a, b):\n    if not a < 3 and b:\n        raise ValueError\n    g(a + b)\n"
    assert edits(src, "cmp") == [src.replace("a < 3", "(a <= 3)")]
    assert edits(src, "bool") == [src.replace("not a < 3 and b", "(not a < 3 or b)")]
    assert edits(src, "not") == [src.replace("not a < 3", "(a < 3)")]
    assert edits(src, "arith") == [src.replace("a + b", "(a - b)")]
    assert edits(src, "int") == [src.replace("3", "4")]
    assert edits(src, "raise") == [src.replace("raise ValueError", "pass")]
    assert edits(src, "call") == [src.replace("g(a + b)", "pass")]


def test_messages_docstrings_and_asserts_are_never_mutated() -> None:
    src = '"""doc a < b"""\n\ndef f(a):\n    assert a < 1\n    raise ValueError(f"{a < 2}")\n'
    assert {op.name: len(edits(src, op.name)) for op in OPERATORS}["cmp"] == 0


def test_a_splice_that_does_not_compile_is_no_mutant() -> None:
    # `continue` outside a loop is a syntax error: a break in a loop's else is kept
    src = "def f(xs):\n    for x in xs:\n        pass\n    else:\n        pass\n"
    assert edits(src, "loop") == []


def test_interleaving_reaches_every_file_and_operator_first() -> None:
    ms = [Mutant(f"{f}:1:{op}:{i}", f, 1, op, i, "") for f in "ab" for op in ("x", "y")
          for i in range(2)]
    assert [(m.file, m.operator) for m in interleaved(ms)[:4]] == [
        ("a", "x"), ("b", "x"), ("a", "y"), ("b", "y")]


def test_module_names_follow_the_installed_layout() -> None:
    assert module_name("spec/machine.py") == "hisparse.spec.machine"
    assert module_name("executor/reference.py") == "hisparse.executor.reference"
    assert module_name("hisparse/tp/run.py") == "hisparse.tp.run"


def test_the_scratch_copy_is_what_is_imported() -> None:
    with Scratch(tree_files()) as s:
        s.write("hisparse/config.py", (ROOT / "hisparse/config.py").read_text()
                + "\nPLANTED = 'scratch'\n")
        paths = s.import_paths(["hisparse.config", "hisparse.spec.machine",
                                "hisparse.executor.reference"])
        assert all(p.startswith(str(s.root)) for p in paths.values()), paths
        assert paths["hisparse.config"] == str(s.root / "hisparse" / "config.py")
        planted = subprocess.run(
            [sys.executable, "-c", "import hisparse.config as c; print(c.PLANTED)"],
            cwd=s.root, env=s.env, capture_output=True, text=True, check=True,
        ).stdout.strip()
        assert planted == "scratch"  # the edited copy, not the editable install, ran


@pytest.fixture(scope="module")
def planted() -> Mutant:
    """The first ``raise`` of the config's validation: a bad config no longer refused."""
    ms = [m for m in mutants_of(ROOT, "hisparse/config.py") if m.operator == "raise"]
    assert ms and "raise" in ms[0].before
    return ms[0]


GUARD = Guard(("tests/test_config.py",))
LIMITS = Limits({}, full=300.0, default=300.0)


def test_a_planted_mutant_is_reported_killed(planted: Mutant) -> None:
    mutated = mutated_source(planted, (ROOT / planted.file).read_text())
    assert "raise ValueError(\"give exactly one" not in mutated
    o = run_mutant(planted, tree_files(), LIMITS, full=False, guard=GUARD)
    assert (o.status, o.phase) == (KILLED, "guard")


def test_the_unmutated_guard_passes_in_a_scratch_copy(planted: Mutant) -> None:
    # the same run with an edit that changes nothing: green, so the kill above is the
    # mutant's doing, not a broken copy
    noop = Mutant(planted.id, planted.file, planted.line, "none", 10_000, planted.before)
    with Scratch(tree_files()) as s:
        assert s.pytest(list(GUARD.tests), "not tlc and not gpu", 300) == SURVIVED
    with pytest.raises(ValueError, match="no longer matches"):
        mutated_source(noop, (ROOT / noop.file).read_text())
