"""The mutation tool itself (tools/mutate.py): its operators make the intended edits,
and its runner imports the mutated copy and reports a planted mutant killed.

The full mutation run stays outside CI; these take seconds.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from tools.mutation import covermap
from tools.mutation.covermap import (
    CoverMap,
    build,
    shards_of,
    shared_files,
    suite_files,
    tree_digest,
)
from tools.mutation.mutants import Mutant, interleaved, mutants_of, mutated_source
from tools.mutation.operators import OPERATORS, sites, splice
from tools.mutation.reach import reach
from tools.mutation.runner import (
    ERROR,
    KILLED,
    MIN_MEMORY,
    ROOT,
    SURVIVED,
    Killers,
    Limits,
    Outcome,
    Scratch,
    first_failure,
    memory_per_run,
    module_name,
    run_mutant,
    tree_files,
    whole_functions,
)
from tools.mutation.targets import FULL_SUITE_IGNORES, Guard


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


def test_reorder_leaves_a_field_store_a_raising_init_never_shows() -> None:
    # the object a raising __init__ built is never handed out: these moves are unseen
    unseen = """\
    class Pool:
        def __init__(self, n: int, name: str) -> None:
            if n < 1:
                raise ValueError(n)
            self.n, self.name = n, name
            check_name(name)
            self.label = "pool"
    """
    assert edits(unseen, "reorder") == []
    head = "class P:\n    def __init__(self, n):\n"
    seen = {  # each of these can be told apart, so each is a mutant
        "a __del__ sees the half-built object":
            "        if n < 1:\n            raise ValueError(n)\n        self.n = n\n"
            "    def __del__(self):\n        pass\n",
        "the check can leave by return":
            "        if n < 1:\n            return\n        self.n = n\n",
        "the check reads the object":
            "        if n < 1:\n            raise ValueError(self)\n        self.n = n\n",
        "the check rebinds what is stored":
            "        if n < 1:\n            n = abs(n)\n            if n > 5:\n"
            "                raise ValueError(n)\n        self.n = n\n",
        "the stored value is computed":
            "        if n < 1:\n            raise ValueError(n)\n        self.n = n + 1\n",
        "a try inside __init__ catches the raise":
            "        try:\n            if n < 1:\n                raise ValueError(n)\n"
            "            self.n = n\n        except ValueError:\n            pass\n",
    }
    for why, body in seen.items():
        assert len(edits(head + body, "reorder")) == 1, why


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


def test_the_scratch_copy_goes_before_an_outside_pythonpath(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # dependencies installed with ``pip --target`` stay importable, behind the copy
    monkeypatch.setenv("PYTHONPATH", "/opt/deps")
    with Scratch(["hisparse/config.py"]) as s:
        assert s.env["PYTHONPATH"] == f"{s.root}{os.pathsep}/opt/deps"
    monkeypatch.delenv("PYTHONPATH")
    with Scratch(["hisparse/config.py"]) as s:
        assert s.env["PYTHONPATH"] == str(s.root)


def test_a_run_that_allocates_without_end_is_killed_by_its_test() -> None:
    # spec/machine.py:465:var:30 appended to the list it walked: its pytest run took the
    # host's memory until the kernel killed it (an error, never a verdict, run again on
    # every resume); under the run's data limit its test fails with a MemoryError
    hog = "def test_hog():\n    xs = []\n    while True:\n        xs.append(bytearray(1 << 20))\n"
    with Scratch(["hisparse/config.py", "pyproject.toml"], memory=MIN_MEMORY) as s:
        (s.root / "tests").mkdir()
        s.write("tests/test_hog.py", hog)
        s.write("tests/test_fine.py", "def test_fine():\n    assert bytearray(1 << 20)\n")
        assert s.run_tests(["tests/test_fine.py"], "not tlc", 120).status == SURVIVED
        run = s.run_tests(["tests/test_hog.py"], "not tlc", 120)
    assert (run.status, run.killer) == (KILLED, "tests/test_hog.py::test_hog")


def test_the_runs_at_once_share_the_hosts_memory() -> None:
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert memory_per_run(1) == max(MIN_MEMORY, total // 2)
    assert memory_per_run(total) == MIN_MEMORY  # never below the floor
    with Scratch(["hisparse/config.py"], memory=123) as s:
        assert s.memory == 123


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


def test_a_kill_stands_when_its_killer_passes_on_the_unmutated_tree(planted: Mutant) -> None:
    o = run_mutant(planted, tree_files(), LIMITS, full=False, guard=GUARD, killers=Killers())
    assert (o.status, o.phase) == (KILLED, "guard")
    assert o.killer.startswith("tests/test_config.py::")


def test_a_kill_by_a_test_that_fails_unmutated_too_is_no_verdict(
        planted: Mutant, monkeypatch: pytest.MonkeyPatch) -> None:
    # a lent host without Java once "killed" 23 mutants with a test that needs it
    from tools.mutation import runner

    def decide(s: Scratch, m: Mutant, *a: object) -> Outcome:
        return Outcome(m, KILLED, "full", 1.0, killer="tests/test_config.py::test_not_here")

    monkeypatch.setattr(runner, "_decide", decide)
    o = run_mutant(planted, tree_files(), LIMITS, full=False, guard=GUARD, killers=Killers())
    assert (o.status, o.killer) == (ERROR, "tests/test_config.py::test_not_here fails unmutated")
    # without the check the same run is a kill
    o = run_mutant(planted, tree_files(), LIMITS, full=False, guard=GUARD)
    assert o.status == KILLED


def test_each_killer_is_run_once_per_run_as_the_scratch_holds_it() -> None:
    class FakeScratch:
        def __init__(self) -> None:
            self.text = "mutated"
            self.runs: list[tuple[str, str]] = []

        def write(self, file: str, text: str) -> None:
            self.text = text

        def pytest(self, args: list[str], markers: str, timeout: float) -> str:
            self.runs.append((args[0], self.text))
            return SURVIVED if args[0] == "t::good" else KILLED

    k, s = Killers(), FakeScratch()
    got = [k.passes(s, t, 60.0)  # type: ignore[arg-type]
           for t in ("t::good", "t::bad", "t::good", "t::bad")]
    assert got == [True, False, True, False]
    assert s.runs == [("t::good", "mutated"), ("t::bad", "mutated")]


def test_the_unmutated_guard_passes_in_a_scratch_copy(planted: Mutant) -> None:
    # the same run with an edit that changes nothing: green, so the kill above is the
    # mutant's doing, not a broken copy
    noop = Mutant(planted.id, planted.file, planted.line, "none", 10_000, planted.before)
    with Scratch(tree_files()) as s:
        assert s.pytest(list(GUARD.tests), "not tlc and not gpu", 300) == SURVIVED
    with pytest.raises(ValueError, match="no longer matches"):
        mutated_source(noop, (ROOT / noop.file).read_text())


# ---------------------------------------------------------------- the coverage map


def _mutants(tmp_path: Path, source: str, operator: str) -> tuple[str, list[Mutant]]:
    src = textwrap.dedent(source)
    (tmp_path / "m.py").write_text(src)
    return src, [m for m in mutants_of(tmp_path, "m.py") if m.operator == operator]


def test_an_edit_in_a_function_body_runs_when_called(tmp_path: Path) -> None:
    src, ms = _mutants(tmp_path, """\
    LIMIT = 3


    def f(x):
        if x > LIMIT:
            return (x +
                    1)
        return x
    """, "arith")
    assert len(ms) == 1
    r = reach(ms[0], src)
    # the edit is on the statement's second line; coverage may record its first only
    assert r.runtime and {6, 7} <= r.lines
    assert 5 not in r.lines  # the enclosing if's header is not the edit's line


def test_an_edit_in_an_if_test_reaches_the_if_line(tmp_path: Path) -> None:
    src, ms = _mutants(tmp_path, "def f(x):\n    if x > 3:\n        return 1\n    return 0\n",
                       "cmp")
    r = reach(ms[0], src)
    assert r.runtime and r.lines == {2}


def test_constants_defaults_and_class_bodies_run_at_import(tmp_path: Path) -> None:
    src, ms = _mutants(tmp_path, """\
    FORBIDDEN = (1, 2)


    class C:
        n: int = 4 + 1


    def f(x=2 + 3):
        return x
    """, "drop")
    assert ms and not any(reach(m, src).runtime for m in ms)
    src, ms = _mutants(tmp_path, (tmp_path / "m.py").read_text(), "arith")
    assert len(ms) == 2 and not any(reach(m, src).runtime for m in ms)


def test_a_lambda_body_runs_when_called(tmp_path: Path) -> None:
    src, ms = _mutants(tmp_path, "KEY = lambda x: x + 1\n", "arith")
    assert reach(ms[0], src).runtime


def test_the_first_failure_is_read_off_the_short_summary() -> None:
    out = ("..F\n=== short test summary info ===\n"
           "FAILED tests/test_a.py::test_b[x - y] - AssertionError: 1 - 2\n"
           "ERROR tests/test_c.py::test_d\n")
    assert first_failure(out) == "tests/test_a.py::test_b[x"
    assert first_failure("ERROR tests/test_c.py::test_d\n") == "tests/test_c.py::test_d"
    assert first_failure("1 passed\n") == ""


def test_the_map_selects_the_tests_of_any_edited_line_quickest_first() -> None:
    cmap = CoverMap(["t::slow", "t::quick", "t::other"], [9.0, 1.0, 2.0],
                    {"m.py": {3: [0, 1], 4: [1], 9: [2]}}, "tree")
    assert cmap.tests_of("m.py", {3, 4}) == ["t::quick", "t::slow"]
    assert cmap.tests_of("m.py", {5}) == [] and cmap.tests_of("n.py", {3}) == []
    assert cmap.seconds_of(["t::slow", "t::other"]) == 11.0


@pytest.fixture(scope="module")
def child_map(tmp_path_factory: pytest.TempPathFactory) -> CoverMap:
    """A map of one test file whose tests start worker processes (spawn)."""
    out = tmp_path_factory.mktemp("covmap") / "map.json"
    built = build(out, ["tests/test_workerproc.py"])
    assert CoverMap.load(out) == built
    return built


def test_the_map_records_lines_run_in_a_child_process_under_its_test(
        child_map: CoverMap) -> None:
    # serve() runs only in the worker process a test spawns, never in pytest's own
    source = (ROOT / "hisparse/workerproc.py").read_text().splitlines()
    first = next(i for i, line in enumerate(source, 1) if line.startswith("def serve("))
    body = {n for n in child_map.lines["hisparse/workerproc.py"] if first < n < first + 20}
    assert body, "no line of serve() was recorded"
    tests = child_map.tests_of("hisparse/workerproc.py", body)
    assert tests and all(t.startswith("tests/test_workerproc.py::") for t in tests)
    assert child_map.tree == tree_digest()
    assert child_map.tests and all(t.startswith("tests/test_workerproc.py::")
                                   for t in child_map.tests)
    assert len(child_map.seconds) == len(child_map.tests)
    # ...and a line run at import is known as one, a function called at import included
    models = (ROOT / "hisparse/models.py").read_text().splitlines()
    called = next(i for i, line in enumerate(models, 1) if "full = [i < 3" in line)
    assert child_map.at_import("hisparse/models.py", {called})
    assert not child_map.at_import("hisparse/workerproc.py", body)


def test_a_mutant_in_a_body_is_decided_by_the_tests_that_run_it(planted: Mutant) -> None:
    src = (ROOT / planted.file).read_text()
    r = reach(planted, src)
    assert r.runtime
    test = "tests/test_config.py::test_host_pool_in_blocks_or_gib_but_not_both"
    cmap = CoverMap([test], [1.0], {planted.file: {n: [0] for n in r.lines}}, "tree")
    o = run_mutant(planted, tree_files(), LIMITS, cover=cmap)
    assert (o.status, o.phase, o.tests, o.killer) == (KILLED, "cover", 1, test)


def test_a_mutant_no_test_runs_falls_back_to_its_guards(planted: Mutant) -> None:
    empty = CoverMap([], [], {}, "tree")
    o = run_mutant(planted, tree_files(), LIMITS, guard=GUARD, cover=empty)
    assert (o.status, o.phase, o.tests) == (KILLED, "guard", 0)
    assert o.killer.startswith("tests/test_config.py::")


def test_a_map_of_another_tree_is_refused(tmp_path: Path) -> None:
    stale = tmp_path / "map.json"
    CoverMap([], [], {}, "another tree").dump(stale)
    proc = subprocess.run([sys.executable, "tools/mutate.py", "--cover-map", str(stale),
                           "--list"], cwd=ROOT, capture_output=True, text=True, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"mutate: {stale} was made from another tree (tests or code changed since): "
        "build it again"]
    assert proc.stdout == ""


def test_a_selected_test_that_is_not_there_decides_nothing() -> None:
    # a mutant that renames a parametrized test must not count as killed by the rename
    with Scratch(tree_files()) as s:
        run = s.run_tests(["tests/test_config.py::test_no_such_test"], "not tlc and not gpu", 120)
    assert run.status == ERROR
    assert run.killer.startswith("not found: ")
    assert run.killer.endswith("/tests/test_config.py::test_no_such_test")


def test_a_parametrized_id_that_is_not_there_runs_its_whole_function() -> None:
    # another pytest (the GPU machine's) may spell a map's parametrized ids differently:
    # the function's every case decides the mutant instead of none
    with Scratch(tree_files()) as s:
        ids = ["tests/test_config.py::test_invalid_configs_say_what_to_change[no-such-case]",
               "tests/test_config.py::test_followers"]
        assert s.run_tests(ids, "not tlc and not gpu", 120).status == SURVIVED
        s.write("hisparse/config.py", (ROOT / "hisparse/config.py").read_text().replace(
            "give one leader per layer", "give a leader per layer"))
        run = s.run_tests(ids, "not tlc and not gpu", 120)
    assert run.status == KILLED
    assert run.killer.startswith("tests/test_config.py::test_invalid_configs_say_what_to_change[")


def test_whole_functions_strips_parameters_once_each() -> None:
    assert whole_functions(["t.py::f[a-b]", "t.py::f[c d]", "t.py::g", "-k", "x[y]"]) == [
        "t.py::f", "t.py::g", "-k", "x[y]"]


def test_two_maps_of_one_tree_merge_into_the_union_of_their_tests() -> None:
    a = CoverMap(["t::a", "t::b"], [1.0, 2.0], {"m.py": {3: [0], 4: [1]}}, "tree")
    b = CoverMap(["t::c", "t::a"], [3.0, 9.0], {"m.py": {3: [0, 1]}, "n.py": {1: [0]}},
                 "tree", "tlc and not gpu")
    m = a.merged(b)
    assert m.tests == ["t::a", "t::b", "t::c"] and m.seconds == [1.0, 2.0, 3.0]
    assert m.lines == {"m.py": {3: [0, 2], 4: [1]}, "n.py": {1: [2]}}
    assert m.markers == "(not tlc and not gpu) or (tlc and not gpu)"
    with pytest.raises(ValueError, match="different trees"):
        a.merged(CoverMap([], [], {}, "another"))


def test_a_test_of_a_file_that_shares_state_brings_its_whole_file() -> None:
    # t.py's tests share a cached run: only the first recorded the lines it ran
    cmap = CoverMap(["t.py::first", "t.py::later", "u.py::alone", "u.py::other"],
                    [2.0, 1.0, 1.0, 1.0], {"m.py": {3: [0, 2]}}, "tree", shared=frozenset({"t.py"}))
    assert cmap.tests_of("m.py", {3}) == ["u.py::alone", "t.py::first", "t.py::later"]


def test_test_files_that_share_state_are_found_by_their_source(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    sources = {
        "a": '@pytest.fixture(scope="module")\ndef run(): ...\n',
        "b": "@lru_cache\ndef run(): ...\n",
        "c": "@functools.cache\ndef run(): ...\n",
        "d": "@pytest.fixture\ndef run(): ...\n",  # function scope: rebuilt per test
    }
    for name, text in sources.items():
        (tmp_path / "tests" / f"test_{name}.py").write_text(text)
    tests = [f"tests/test_{n}.py::t" for n in sources]
    assert shared_files(tests, tmp_path) == {"tests/test_a.py", "tests/test_b.py",
                                             "tests/test_c.py"}


def test_a_survivor_killed_when_run_again_counts_as_killed_later() -> None:
    from tools.mutation import figures

    def o(id_: str, status: str, of: str | None = None) -> dict[str, object]:
        return {"id": id_, "status": status, **({"of": of} if of else {})}

    equivalent = next(iter(figures.EQUIVALENT))
    run = {"outcomes": [o("a.py:3:cmp:0", KILLED), o("a.py:9:cmp:1", SURVIVED),
                        o("a.py:12:cmp:2", SURVIVED), o(equivalent, SURVIVED)]}
    # the file moved two lines down since: the re-run names what it re-ran
    rerun = {"outcomes": [o("a.py:11:cmp:1", KILLED, "a.py:9:cmp:1"),
                          o("a.py:14:cmp:2", SURVIVED, "a.py:12:cmp:2")]}
    assert figures.statuses(run, rerun) == [KILLED, figures.LATER, SURVIVED, "equivalent"]
    assert figures.statuses(run) == [KILLED, SURVIVED, SURVIVED, "equivalent"]


def test_survivors_of_an_earlier_run_are_found_in_an_edited_file() -> None:
    import tools.mutate as mutate

    now = [Mutant(f"a.py:{n}:cmp:{i}", "a.py", n, "cmp", i, "x < 1") for i, n in
           enumerate((5, 11, 14))] + [Mutant("a.py:20:bool:0", "a.py", 20, "bool", 0, "a or b")]
    earlier = [{"id": "a.py:9:cmp:1", "file": "a.py", "line": 9, "operator": "cmp",
                "before": "x < 1", "status": SURVIVED},
               {"id": "a.py:3:cmp:0", "file": "a.py", "line": 3, "operator": "cmp",
                "before": "x < 1", "status": KILLED},
               {"id": "a.py:7:not:0", "file": "a.py", "line": 7, "operator": "not",
                "before": "not y", "status": SURVIVED}]  # edited away since
    assert mutate.map_survivors(earlier, now) == {"a.py:11:cmp:1": "a.py:9:cmp:1"}


def test_the_survivors_table_says_what_became_of_each() -> None:
    from tools.mutation import figures

    equivalent = next(iter(figures.EQUIVALENT))
    run = {"outcomes": [
        {"id": "a.py:9:cmp:1", "status": SURVIVED, "before": "x < 1 | y"},
        {"id": "a.py:3:cmp:0", "status": KILLED, "before": "x < 0"},
        {"id": equivalent, "status": SURVIVED, "before": "z"},
        {"id": "a.py:20:not:0", "status": SURVIVED, "before": "not w"}]}
    rerun = {"outcomes": [{"id": "a.py:11:cmp:1", "of": "a.py:9:cmp:1", "status": KILLED,
                           "killer": "tests/t.py::test_x"}]}
    assert figures.survivors(run, rerun).splitlines() == [
        "| mutant | edited line | now |", "|---|---|---|",
        "| `a.py:9:cmp:1` | `x < 1 \\| y` | killed by `tests/t.py::test_x` |",
        f"| `{equivalent}` | `z` | equivalent: {figures.EQUIVALENT[equivalent]} |",
        "| `a.py:20:not:0` | `not w` | **survives** |"]


def test_shards_hold_every_suite_file_once_in_groups_of_about_equal_size() -> None:
    files = suite_files()
    assert files and not set(files) & set(FULL_SUITE_IGNORES)
    assert all(f.startswith("tests/test_") for f in files)
    groups = shards_of(files, 4)
    assert len(groups) == 4 and sorted(f for g in groups for f in g) == files
    size = {f: (ROOT / f).stat().st_size for f in files}
    loads = [sum(size[f] for f in g) for g in groups]
    # greedy onto the lightest: no group exceeds the lightest by more than one file
    assert max(loads) - min(loads) <= max(size.values())
    assert shards_of(files[:2], 5) == [[files[0]], [files[1]]] or \
        shards_of(files[:2], 5) == [[files[1]], [files[0]]]
    with pytest.raises(ValueError, match="at least 1"):
        shards_of(files, 0)


def test_a_sharded_map_merges_each_groups_map_under_the_one_marker_expression(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[tuple[list[str], str]] = []

    def fake_build(out: Path, tests: list[str] | None = None,
                   markers: str = "") -> CoverMap:
        assert tests is not None
        built.append((tests, markers))
        return CoverMap([f"{t}::x" for t in tests], [1.0] * len(tests),
                        {"m.py": {len(built): list(range(len(tests)))}}, "tree", markers)

    monkeypatch.setattr(covermap, "build", fake_build)
    cmap = covermap.build_sharded(tmp_path / "map.json", 3, "not gpu")
    assert sorted(f for tests, _ in built for f in tests) == suite_files()
    assert {m for _, m in built} == {"not gpu"} and cmap.markers == "not gpu"
    assert sorted(cmap.tests) == sorted(f"{f}::x" for f in suite_files())
    assert sorted(i for by in cmap.lines.values() for ran in by.values() for i in ran) == \
        list(range(len(cmap.tests)))
    assert CoverMap.load(tmp_path / "map.json") == cmap


def test_a_run_stopped_while_writing_its_json_keeps_what_it_held(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a timeout that killed the run mid-write left an empty JSON, and --resume nothing
    from tools.mutate import write_atomically

    out = tmp_path / "run.json"
    write_atomically(out, '{"outcomes": [1]}\n')
    real = Path.write_text

    def interrupted(self: Path, text: str, *a: object, **k: object) -> int:
        real(self, text[:5])
        raise KeyboardInterrupt

    monkeypatch.setattr(Path, "write_text", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_atomically(out, '{"outcomes": [1, 2]}\n')
    monkeypatch.undo()
    assert out.read_text() == '{"outcomes": [1]}\n'
    write_atomically(out, '{"outcomes": [1, 2]}\n')
    assert out.read_text() == '{"outcomes": [1, 2]}\n'


def test_a_resumed_run_keeps_a_verdict_on_an_edit_still_made_under_its_id_now() -> None:
    # a whole run spans sessions; an edited file or operator renumbers mutants
    from tools.mutate import kept

    ms = mutants_of(ROOT, "hisparse/config.py")
    assert len({m.edit for m in ms}) == len(ms)  # one hash per distinct mutated file
    src = (ROOT / "hisparse/config.py").read_text()
    assert all(m.edit == hashlib.sha256(mutated_source(m, src).encode()).hexdigest()[:16]
               for m in ms[:20])
    a, b = ms[0], ms[1]
    runs: list[dict[str, Any]] = [
        {"id": a.id, "line": 1, "edit": a.edit, "status": "killed"},
        {"id": "renumbered", "line": 7, "edit": b.edit, "status": "survived"},
        {"id": a.id, "edit": "0" * 16, "status": "killed"},  # an edit no longer made
        {"id": b.id, "edit": b.edit, "status": "error"},  # not a verdict
        {"id": a.id, "status": "killed"},  # a JSON from before edits were recorded
    ]
    assert kept(runs, ms) == [{**runs[0], **asdict(a)}, {**runs[1], **asdict(b)}]


def test_a_resumed_call_keeps_the_outcomes_of_files_it_does_not_select() -> None:
    # kill proofs accumulate over calls that each --only other files
    from tools.mutate import kept, unselected

    config, metrics = (mutants_of(ROOT, f)[0] for f in ("hisparse/config.py",
                                                        "hisparse/metrics.py"))
    runs = [{**asdict(m), "status": "killed"} for m in (config, metrics)]
    every = mutants_of(ROOT, "hisparse/config.py")
    assert {m.file for m in unselected(runs, every)} == {"hisparse/metrics.py"}
    assert kept(runs, every + unselected(runs, every)) == runs


def test_no_mutant_starts_after_the_stop_time_and_those_started_are_recorded(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # a capped call on a lent machine ends by --stop-after, not by a signal that would
    # interrupt pytest (exit 2) and record the mutant killed
    from tools.mutation import runner

    started: list[str] = []
    clock = iter([0.0, 0.0, 5.0])  # the third mutant asks after the stop time

    def fake_run(m: Mutant, *a: object) -> runner.Outcome:
        started.append(m.id)
        return runner.Outcome(m, runner.KILLED, "cover", 1.0, 1, "t")

    monkeypatch.setattr(runner, "run_mutant", fake_run)
    monkeypatch.setattr(runner.time, "monotonic", lambda: next(clock))
    ms = mutants_of(ROOT, "hisparse/config.py")[:3]
    seen: list[str] = []
    out = runner.run_all(ms, 1, Limits.from_baseline({"full": 1.0}, 1.0, 1.0), True,
                         lambda o: seen.append(o.mutant.id), stop_at=1.0)
    assert started == seen == [o.mutant.id for o in out] == [m.id for m in ms[:2]]


def test_longest_first_orders_by_the_seconds_of_the_tests_that_run_each_mutants_lines(
) -> None:
    # a capped call on a lent machine then ends on short mutants, not 300 s survivors
    from tools.mutate import expected_seconds

    f = "hisparse/config.py"
    src = (ROOT / f).read_text()
    ms = mutants_of(ROOT, f)
    runtime = [m for m in ms if reach(m, src).runtime]
    a, b, c = runtime[0], runtime[-1], next(m for m in ms if not reach(m, src).runtime)
    la, lb = reach(a, src).lines, reach(b, src).lines
    assert la.isdisjoint(lb)
    lines = {f: {**{n: [0] for n in la}, **{n: [0, 1] for n in lb}}}
    cmap = CoverMap(["t0", "t1"], [1.0, 10.0], lines, "tree")
    cost = expected_seconds([a, b, c], cmap)
    assert (cost[a.id], cost[b.id], cost[c.id]) == (1.0, 11.0, float("inf"))
    others = [m for m in runtime if reach(m, src).lines.isdisjoint(la | lb)]
    assert others and all(v == 0.0 for v in expected_seconds(others, cmap).values())
    from tools.mutate import _parser, select

    args = _parser().parse_args(["--only", f"{f}:*", "--longest-first"])
    _, order = select(args, cmap)
    got = expected_seconds(order, cmap)
    assert [got[m.id] for m in order] == sorted(got.values(), reverse=True)
    assert order.index(b) < order.index(a) and order[0].id in {m.id for m in ms
                                                               if m not in runtime}


def test_shortest_first_and_at_import_split_one_selection_between_two_machines() -> None:
    # a small machine takes the cheap edits first, a capped large one skips the edits at
    # import (minutes each), an uncapped one runs them alone: together, the whole selection
    from tools.mutate import _parser, expected_seconds, main, select

    f = "hisparse/config.py"
    src = (ROOT / f).read_text()
    ms = mutants_of(ROOT, f)
    runtime = [m for m in ms if reach(m, src).runtime]
    lb = reach(runtime[-1], src).lines
    cmap = CoverMap(["t0"], [10.0], {f: {n: [0] for n in lb}}, "tree")

    def order(*flags: str) -> list[Mutant]:
        return select(_parser().parse_args(["--only", f"{f}:*", *flags]), cmap)[1]

    every = order()
    short = order("--shortest-first")
    cost = expected_seconds(short, cmap)
    assert [cost[m.id] for m in short] == sorted(cost.values())
    assert sorted(m.id for m in short) == sorted(m.id for m in every)
    skip, only = order("--at-import", "skip"), order("--at-import", "only")
    assert skip and only and all(cost[m.id] == float("inf") for m in only)
    assert all(cost[m.id] != float("inf") for m in skip)
    assert sorted(m.id for m in skip + only) == sorted(m.id for m in every)
    assert main(["--list", "--at-import", "skip"]) == 2  # no map: nothing says which
    assert main(["--list", "--longest-first", "--shortest-first"]) == 2
