"""The lines a mutant edits, and whether they run at import or only when called.

A line-coverage map can stand for the whole suite only for an edit inside a function
body: such an edit changes behaviour only in a test that runs its lines. An edit outside
every body (a constant, a default, a decorator, a class body) runs at import, under no
test, so its tests cannot be read off the map.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cache

from tools.mutation.mutants import Mutant
from tools.mutation.operators import Site, sites


def _function_bodies(tree: ast.Module) -> list[tuple[int, int]]:
    """Line ranges that run when called, not at import: function and lambda bodies."""
    spans: list[tuple[int, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            spans.append((node.body[0].lineno, node.body[-1].end_lineno or node.lineno))
        elif isinstance(node, ast.Lambda):
            spans.append((node.body.lineno, node.body.end_lineno or node.body.lineno))
    return spans


def _headers(tree: ast.Module, first: int, last: int) -> set[int]:
    """The first lines of the statements that hold lines ``first..last``: a line-coverage
    tool may record a multi-line statement at its first line only, so those are lines whose
    tests run the edit. A compound statement counts only when the edit is in its header
    (an ``if``'s test, a ``for``'s iterable), not in its body."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt) or node.lineno > last or \
                (node.end_lineno or node.lineno) < first:
            continue
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.stmt) and \
                first >= body[0].lineno:
            continue  # the edit is inside this statement's body, not its header
        out.add(node.lineno)
    return out


@dataclass(frozen=True)
class Reach:
    """The lines a mutant's edit touches, and whether they all run only when called."""

    lines: set[int]
    runtime: bool


@cache  # the run visits files round-robin
def _sites(source: str, operator: str) -> list[Site]:
    return sites(source, operator)


@cache
def _tree(source: str) -> ast.Module:
    return ast.parse(source)


def reach(m: Mutant, source: str) -> Reach:
    site = _sites(source, m.operator)[m.index]
    first, last = site.start[0], site.end[0]
    tree = _tree(source)
    lines = set(range(first, last + 1)) | _headers(tree, first, last)
    bodies = _function_bodies(tree)
    runtime = any(lo <= first and last <= hi for lo, hi in bodies)
    return Reach(lines, runtime)
