"""Mutation operators: the edit shapes real bugs take, as text splices of one source file.

Each operator walks a parsed module and yields ``Site``s: a span of the source and the
text that replaces it. The edit is a splice, so comments and formatting elsewhere stay
as they were (tests that read source see the same file but for the one edit). A site
whose spliced source does not compile is dropped, so every mutant imports or fails for
a semantic reason, never a syntax one.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import pairwise

Pos = tuple[int, int]  # (line from 1, column as a UTF-8 byte offset), as ast reports them


@dataclass(frozen=True)
class Site:
    """One edit: replace source ``start``..``end`` by ``text``; ``line`` names it."""

    line: int
    start: Pos
    end: Pos
    text: str


@dataclass(frozen=True)
class Operator:
    """One kind of edit: ``sites`` lists every place it applies, in a stable order."""

    name: str
    summary: str
    sites: Callable[[ast.Module, set[int]], Iterator[Site]]


# ---------------------------------------------------------------- helpers


def _start(node: ast.AST) -> Pos:
    return (node.lineno, node.col_offset)  # type: ignore[attr-defined]


def _end(node: ast.AST) -> Pos:
    return (node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]


def _expr_site(node: ast.expr, new: ast.expr) -> Site:
    """Replace expression ``node`` by ``new``, parenthesised (safe in any context)."""
    text = ast.unparse(new)
    if not isinstance(new, ast.Name | ast.Attribute | ast.Constant):
        text = f"({text})"
    return Site(node.lineno, _start(node), _end(node), text)


def _stmt_site(node: ast.stmt, text: str) -> Site:
    return Site(node.lineno, _start(node), _end(node), text)


def _walk(tree: ast.AST, skip: set[int]) -> Iterator[ast.AST]:
    for node in ast.walk(tree):
        if id(node) not in skip:
            yield node


def skipped_subtrees(tree: ast.AST) -> set[int]:
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


# ---------------------------------------------------------------- the seven first operators

_CMP_SWAP: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In,
    ast.Is: ast.IsNot, ast.IsNot: ast.Is,
}
_ARITH_SWAP: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub, ast.Sub: ast.Add, ast.FloorDiv: ast.Mult, ast.Mod: ast.FloorDiv,
}
BOUND_KEYWORDS = frozenset({"ge", "gt", "le", "lt", "min_length", "max_length"})


def _bounds(tree: ast.AST) -> set[int]:
    """The integer literals that are limits: compared against, or a Field bound."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            out.update(id(o) for o in (node.left, *node.comparators))
        elif isinstance(node, ast.keyword) and node.arg in BOUND_KEYWORDS:
            out.add(id(node.value))
    return out


def _cmp(tree: ast.Module, skip: set[int]) -> Iterator[Site]:
    for node in _walk(tree, skip):
        if isinstance(node, ast.Compare) and type(node.ops[0]) in _CMP_SWAP:
            new = copy.deepcopy(node)
            new.ops[0] = _CMP_SWAP[type(node.ops[0])]()
            yield _expr_site(node, new)


def _bool(tree: ast.Module, skip: set[int]) -> Iterator[Site]:
    for node in _walk(tree, skip):
        if isinstance(node, ast.BoolOp):
            new = copy.deepcopy(node)
            new.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
            yield _expr_site(node, new)


def _not(tree: ast.Module, skip: set[int]) -> Iterator[Site]:
    for node in _walk(tree, skip):
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            yield _expr_site(node, node.operand)


def _arith(tree: ast.Module, skip: set[int]) -> Iterator[Site]:
    for node in _walk(tree, skip):
        if isinstance(node, ast.BinOp) and type(node.op) in _ARITH_SWAP:
            new = copy.deepcopy(node)
            new.op = _ARITH_SWAP[type(node.op)]()
            yield _expr_site(node, new)
        elif isinstance(node, ast.AugAssign) and type(node.op) in _ARITH_SWAP:
            aug = copy.deepcopy(node)
            aug.op = _ARITH_SWAP[type(node.op)]()
            yield _stmt_site(node, ast.unparse(aug))


def _int(tree: ast.Module, skip: set[int]) -> Iterator[Site]:
    bounds = _bounds(tree)
    for node in _walk(tree, skip):
        if isinstance(node, ast.Constant) and type(node.value) is int and id(node) in bounds:
            yield _expr_site(node, ast.Constant(node.value + 1))


def _raise(tree: ast.Module, skip: set[int]) -> Iterator[Site]:
    for node in _walk(tree, skip):
        if isinstance(node, ast.Raise):
            yield _stmt_site(node, "pass")


def _is_call_stmt(node: ast.AST) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)


def _call(tree: ast.Module, skip: set[int]) -> Iterator[Site]:
    for node in _walk(tree, skip):
        if _is_call_stmt(node):
            assert isinstance(node, ast.Expr)
            yield _stmt_site(node, "pass")


# ---------------------------------------------------------------- the shapes they could not make

_CHECK_WORDS = ("check", "valid", "require", "ensure", "refus", "guard", "admit")
_MOVABLE = (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)


def _is_check(stmt: ast.stmt) -> bool:
    """A guard: an ``if``, or a call whose name says it checks."""
    if isinstance(stmt, ast.If):
        return True
    if _is_call_stmt(stmt):
        assert isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
        name = ast.unparse(stmt.value.func).lower()
        return any(w in name for w in _CHECK_WORDS)
    return False


def _blocks(tree: ast.Module) -> Iterator[list[ast.stmt]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.For | ast.While
                      | ast.If | ast.With | ast.Try | ast.ExceptHandler):
            for field in ("body", "orelse", "finalbody"):
                block = getattr(node, field, None)
                if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                    yield block


def _exits(stmt: ast.If) -> bool:
    return any(isinstance(n, ast.Raise | ast.Return | ast.Break | ast.Continue)
               for n in ast.walk(stmt))


# builtins that neither change state nor fail on the values they get here
_PURE = frozenset({"set", "frozenset", "list", "tuple", "dict", "range", "len", "sorted",
                   "enumerate", "zip", "min", "max", "sum", "any", "all", "isinstance",
                   "reversed", "bool", "abs"})


def _calls(node: ast.AST) -> bool:
    """Whether ``node`` calls anything but a pure builtin."""
    return any(isinstance(n, ast.Call)
               and not (isinstance(n.func, ast.Name) and n.func.id in _PURE)
               for n in ast.walk(node))


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _local(target: ast.expr) -> bool:
    """A target that binds local names only (``x``, ``a, *b``), no attribute or item."""
    if isinstance(target, ast.Starred):
        return _local(target.value)
    if isinstance(target, ast.Tuple | ast.List):
        return all(_local(e) for e in target.elts)
    return isinstance(target, ast.Name)


def _movable(prev: ast.stmt, stmt: ast.stmt) -> bool:
    """Whether moving ``stmt`` before ``prev`` can change anything observable: it must
    call something, write more than a local, or feed the check (a local the check reads);
    a plain ``if`` that cannot leave the block only matters against a call."""
    if not isinstance(stmt, _MOVABLE):
        return False
    if isinstance(stmt, ast.Expr):
        return isinstance(stmt.value, ast.Call)
    if isinstance(prev, ast.If) and not _exits(prev) and not _calls(stmt):
        return False
    targets: list[ast.expr] = (stmt.targets if isinstance(stmt, ast.Assign | ast.Delete)
                               else [stmt.target])
    local = all(_local(t) for t in targets)
    return _calls(stmt) or not local or bool(_names(prev) & set().union(*map(_names, targets)))


def _init_bodies(tree: ast.Module) -> set[int]:
    """The statements directly in the body of an ``__init__`` (no ``try`` around them) of
    a class without ``__del__``: when one raises, nothing ever sees the object."""
    out: set[int] = set()
    for cls in ast.walk(tree):
        if not isinstance(cls, ast.ClassDef):
            continue
        defs = [d for d in cls.body if isinstance(d, ast.FunctionDef)]
        if any(d.name == "__del__" for d in defs):
            continue
        out |= {id(s) for d in defs if d.name == "__init__" for s in d.body}
    return out


def _plain(value: ast.expr) -> bool:
    """Names and constants (tuples of them): a value whose reading cannot fail."""
    if isinstance(value, ast.Tuple):
        return all(_plain(e) for e in value.elts)
    return isinstance(value, ast.Name | ast.Constant)


def _self_field(target: ast.expr) -> bool:
    if isinstance(target, ast.Tuple):
        return all(_self_field(e) for e in target.elts)
    return isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
        and target.value.id == "self"


def _unseen_field(prev: ast.stmt, stmt: ast.stmt) -> bool:
    """Moving ``stmt`` before ``prev`` in an ``__init__`` body cannot be observed: it only
    stores names or constants in fields of the object being built, and ``prev`` does not
    read the object, rebind what the store reads, or leave but by raising (and a raising
    ``__init__`` hands out no object)."""
    value = stmt.value if isinstance(stmt, ast.Assign | ast.AnnAssign) else None
    targets = stmt.targets if isinstance(stmt, ast.Assign) else \
        [stmt.target] if isinstance(stmt, ast.AnnAssign) else []
    if value is None or not _plain(value) or not all(_self_field(t) for t in targets):
        return False
    stored = {n.id for n in ast.walk(prev) if isinstance(n, ast.Name)
              and isinstance(n.ctx, ast.Store)}
    return "self" not in _names(prev) and not stored & _names(value) and not any(
        isinstance(n, ast.Return | ast.Break | ast.Continue) for n in ast.walk(prev))


def _reorder(tree: ast.Module, skip: set[int]) -> Iterator[Site]:
    """Move a call or assignment before the check that precedes it (a side effect that
    no longer waits for its guard); not a store into an object that a failed check
    leaves unseen (``_unseen_field``)."""
    inits = _init_bodies(tree)
    for block in _blocks(tree):
        for prev, stmt in pairwise(block):
            if id(stmt) in skip or id(prev) in skip or not _is_check(prev):
                continue
            if id(stmt) in inits and _unseen_field(prev, stmt):
                continue
            if _movable(prev, stmt):
                yield Site(stmt.lineno, _start(prev), _end(stmt), _SWAP_MARK)


_SWAP_MARK = "\0swap"  # resolved by ``splice``: the two statements trade places


def _loop(tree: ast.Module, skip: set[int]) -> Iterator[Site]:
    for node in _walk(tree, skip):
        if isinstance(node, ast.Break):
            yield _stmt_site(node, "continue")
        elif isinstance(node, ast.Continue):
            yield _stmt_site(node, "break")


def _annotation_groups(names: dict[str, str]) -> dict[str, list[str]]:
    """Each name's siblings: the other names with the same annotation, in order."""
    by_type: dict[str, list[str]] = {}
    for name, ann in names.items():
        by_type.setdefault(ann, []).append(name)
    return {n: [s for s in by_type[a] if s != n] for n, a in names.items() if len(by_type[a]) > 1}


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, str]:
    args = fn.args
    return {a.arg: ast.unparse(a.annotation)
            for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)
            if a.annotation is not None and a.arg not in ("self", "cls")}


def _value_type(value: ast.expr, params: dict[str, str]) -> str | None:
    """A type for an unannotated assignment, read off its value's shape: a constant's
    type, an annotated parameter's annotation, the callee, or the literal's kind."""
    if isinstance(value, ast.Constant) and value.value is not None:
        return type(value.value).__name__
    if isinstance(value, ast.Name):
        return params.get(value.id)
    if isinstance(value, ast.Call):
        return "call " + ast.unparse(value.func)
    kinds = {ast.List: "list", ast.ListComp: "list", ast.Dict: "dict", ast.DictComp: "dict",
             ast.Set: "set", ast.SetComp: "set", ast.Tuple: "tuple"}
    return kinds.get(type(value))


def _assignments(scope: ast.AST) -> Iterator[tuple[ast.expr, str | None, ast.expr | None]]:
    """(target, annotation text or None, value) of each assignment in ``scope``."""
    for node in ast.walk(scope):
        if isinstance(node, ast.AnnAssign):
            yield node.target, ast.unparse(node.annotation), node.value
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            yield node.targets[0], None, node.value


def _function_names(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, str]:
    params = _params(fn)
    names = dict(params)
    for target, ann, value in _assignments(fn):
        if isinstance(target, ast.Name) and target.id not in names:
            t = ann or (_value_type(value, params) if value is not None else None)
            if t is not None:
                names[target.id] = t
    return names


def _class_attrs(cls: ast.ClassDef) -> dict[str, str]:
    attrs: dict[str, str] = {}
    for stmt in cls.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            attrs.setdefault(stmt.target.id, ast.unparse(stmt.annotation))
    for fn in cls.body:
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        params = _params(fn)
        for target, ann, value in _assignments(fn):
            if (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                    and target.value.id == "self" and target.attr not in attrs):
                t = ann or (_value_type(value, params) if value is not None else None)
                if t is not None:
                    attrs[target.attr] = t
    return attrs


def _var(tree: ast.Module, skip: set[int]) -> Iterator[Site]:
    """Use a sibling where a name was meant: another parameter or local of the same
    annotation, or another ``self.`` attribute of the same declared type."""
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        siblings = _annotation_groups(_function_names(fn))
        for stmt in fn.body:
            for node in _walk(stmt, skip):
                if (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
                        and node.id in siblings):
                    yield _expr_site(node, ast.Name(siblings[node.id][0]))
    for cls in ast.walk(tree):
        if not isinstance(cls, ast.ClassDef):
            continue
        siblings = _annotation_groups(_class_attrs(cls))
        for node in _walk(cls, skip):
            if (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load)
                    and isinstance(node.value, ast.Name) and node.value.id == "self"
                    and node.attr in siblings):
                yield _expr_site(node, ast.Attribute(ast.Name("self"), siblings[node.attr][0]))


_SET_TYPES = ("set[", "frozenset[", "Set[", "AbstractSet[", "set", "frozenset")


def _set_names(tree: ast.Module) -> set[str]:
    """Names and ``self.`` attributes annotated as sets anywhere in the module."""
    out: set[str] = set()
    for node in ast.walk(tree):
        ann: ast.expr | None = None
        target = ""
        if isinstance(node, ast.AnnAssign):
            ann = node.annotation
            t = node.target
            if isinstance(t, ast.Name | ast.Attribute):
                target = t.id if isinstance(t, ast.Name) else t.attr
        elif isinstance(node, ast.arg) and node.annotation is not None:
            ann, target = node.annotation, node.arg
        if ann is not None and target and ast.unparse(ann).startswith(_SET_TYPES):
            out.add(target)
    return out


def _is_set(node: ast.expr, names: set[str]) -> bool:
    if isinstance(node, ast.Set | ast.SetComp):
        return True
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return node.func.id in ("set", "frozenset")
    if isinstance(node, ast.Name):
        return node.id in names
    if isinstance(node, ast.Attribute):
        return node.attr in names
    return False


def _collection(tree: ast.Module, skip: set[int]) -> Iterator[Site]:
    """Weaken a collection check: set ``==`` to ``<=``, set ``!=`` to ``not <=``,
    ``all(...)`` to ``any(...)``."""
    names = _set_names(tree)
    for node in _walk(tree, skip):
        if (isinstance(node, ast.Compare) and len(node.ops) == 1
                and isinstance(node.ops[0], ast.Eq | ast.NotEq)
                and (_is_set(node.left, names) or _is_set(node.comparators[0], names))):
            sub = ast.Compare(node.left, [ast.LtE()], node.comparators)
            new: ast.expr = sub if isinstance(node.ops[0], ast.Eq) else ast.UnaryOp(ast.Not(), sub)
            yield _expr_site(node, new)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id == "all"):
            yield _expr_site(node.func, ast.Name("any"))


def _none(tree: ast.Module, skip: set[int]) -> Iterator[Site]:
    """``x is not None`` -> ``x``, ``x is None`` -> ``not x``: an empty value read as a
    missing one."""
    for node in _walk(tree, skip):
        if (isinstance(node, ast.Compare) and len(node.ops) == 1
                and isinstance(node.ops[0], ast.Is | ast.IsNot)
                and isinstance(node.comparators[0], ast.Constant)
                and node.comparators[0].value is None):
            left = node.left
            new = left if isinstance(node.ops[0], ast.IsNot) else ast.UnaryOp(ast.Not(), left)
            yield _expr_site(node, new)


def _union_members(node: ast.expr) -> list[ast.expr]:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return [*_union_members(node.left), *_union_members(node.right)]
    return [node]


def _union(members: list[ast.expr]) -> ast.expr:
    out = members[0]
    for m in members[1:]:
        out = ast.BinOp(out, ast.BitOr(), m)
    return out


def _drop_each(node: ast.expr, members: list[ast.expr],
               build: Callable[[list[ast.expr]], ast.expr]) -> Iterator[Site]:
    for i in range(len(members)):
        yield _expr_site(node, build(members[:i] + members[i + 1:]))


def _like(coll: ast.Tuple | ast.Set | ast.List) -> Callable[[list[ast.expr]], ast.expr]:
    """A builder of the same literal kind as ``coll`` from other elements."""
    if isinstance(coll, ast.Set):
        return lambda e: ast.Set(elts=e)
    if isinstance(coll, ast.List):
        return lambda e: ast.List(elts=e, ctx=ast.Load())
    return lambda e: ast.Tuple(elts=e, ctx=ast.Load())


def _constant_collections(tree: ast.Module) -> Iterator[ast.Tuple | ast.Set | ast.List]:
    """Literal tuples / sets at module or class level bound to an UPPER_CASE name."""
    scopes: list[list[ast.stmt]] = [tree.body]
    scopes += [n.body for n in tree.body if isinstance(n, ast.ClassDef)]
    for body in scopes:
        for stmt in body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                target, value = stmt.targets[0], stmt.value
            elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
                target, value = stmt.target, stmt.value
            else:
                continue
            if not (isinstance(target, ast.Name) and target.id.isupper()) or target.id == "__all__":
                continue
            if (isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
                    and value.func.id == "frozenset" and value.args):
                value = value.args[0]
            if isinstance(value, ast.Tuple | ast.Set | ast.List):
                yield value


def _drop(tree: ast.Module, skip: set[int]) -> Iterator[Site]:
    """Drop one case of a literal collection: ``x in (a, b)``, ``isinstance(x, (A, B))``,
    ``isinstance(x, A | B)``, a module constant such as a tuple of forbidden values."""
    for node in _walk(tree, skip):
        if (isinstance(node, ast.Compare) and len(node.ops) == 1
                and isinstance(node.ops[0], ast.In | ast.NotIn)):
            coll = node.comparators[0]
            if isinstance(coll, ast.Tuple | ast.Set | ast.List) and len(coll.elts) > 1:
                yield from _drop_each(coll, coll.elts, _like(coll))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("isinstance", "issubclass") and len(node.args) == 2):
            kinds = node.args[1]
            if isinstance(kinds, ast.Tuple) and len(kinds.elts) > 1:
                yield from _drop_each(kinds, kinds.elts, lambda e: ast.Tuple(e, ast.Load()))
            elif len(_union_members(kinds)) > 1:
                yield from _drop_each(kinds, _union_members(kinds), _union)
    for coll in _constant_collections(tree):
        if id(coll) not in skip and len(coll.elts) > 1:
            yield from _drop_each(coll, coll.elts, _like(coll))


OPERATORS: tuple[Operator, ...] = (
    Operator("cmp", "flip one comparison: < <=, > >=, == !=, in / not in, is / is not", _cmp),
    Operator("bool", "and <-> or", _bool),
    Operator("not", "drop a `not`", _not),
    Operator("arith", "+ <-> -, // -> *, % -> // (also in augmented assignments)", _arith),
    Operator("int", "an integer literal n -> n + 1 (bounds, offsets, limits)", _int),
    Operator("raise", "delete a `raise` (a refusal that no longer refuses)", _raise),
    Operator("call", "delete a call statement (a release, an append, a free that no longer "
             "happens)", _call),
    Operator("reorder", "move a call or assignment before the `if` / check call that "
             "precedes it (a side effect before its guard)", _reorder),
    Operator("loop", "break <-> continue (skip an element instead of stopping at it)", _loop),
    Operator("var", "use a sibling name of the same annotation (parameter, local, or "
             "`self.` attribute) where one was meant", _var),
    Operator("collection", "set == -> <=, set != -> not <=, all() -> any()", _collection),
    Operator("none", "`x is not None` -> `x`, `x is None` -> `not x` (empty read as missing)",
             _none),
    Operator("drop", "drop one element of a literal tuple / set / union in `in`, "
             "`isinstance`, or an UPPER_CASE constant", _drop),
)
BY_NAME = {op.name: op for op in OPERATORS}


# ---------------------------------------------------------------- splicing


def _offset(lines: list[bytes], pos: Pos) -> int:
    line, col = pos
    return sum(len(b) for b in lines[: line - 1]) + col


def splice(source: str, site: Site) -> str:
    """The source with ``site`` applied (a swap trades the two statements it spans)."""
    raw = source.encode()
    lines = raw.splitlines(keepends=True)
    a, b = _offset(lines, site.start), _offset(lines, site.end)
    if site.text != _SWAP_MARK:
        return (raw[:a] + site.text.encode() + raw[b:]).decode()
    region = raw[a:b]
    tree = ast.parse(source)
    first = second = None
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and _start(node) == site.start:
            first = node
        if isinstance(node, ast.stmt) and _end(node) == site.end and node.lineno == site.line:
            second = node
    assert first is not None and second is not None
    f_end = _offset(lines, _end(first)) - a
    s_start = _offset(lines, _start(second)) - a
    swapped = region[s_start:] + region[f_end:s_start] + region[:f_end]
    return (raw[:a] + swapped + raw[b:]).decode()


def sites(source: str, operator: str) -> list[Site]:
    """Every site of one operator in ``source`` whose splice compiles, in a stable order."""
    return [site for site, _ in spliced(source, operator)]


def spliced(source: str, operator: str) -> list[tuple[Site, str]]:
    """``sites`` with the mutated source of each (made once: checked, then kept)."""
    tree = ast.parse(source)
    out: list[tuple[Site, str]] = []
    seen: set[tuple[Pos, Pos, str]] = set()
    for site in BY_NAME[operator].sites(tree, skipped_subtrees(tree)):
        key = (site.start, site.end, site.text)
        if key in seen:
            continue  # a nested function is walked with its outer one too
        seen.add(key)
        text = splice(source, site)
        try:
            compile(text, "<mutant>", "exec")
        except SyntaxError:
            continue
        out.append((site, text))
    return out
