"""Read TLA+ values as TLC prints them (states in error traces and ``-dump dot`` files).

Functions and records become ``Fn`` (a hashable dict), sequences tuples, sets
frozensets; model values become ``ModelValue`` (a ``str`` that is not a TLA+ string),
so ``g1`` and ``"g1"`` stay apart. Only what TLC prints for this project's variables is supported.
"""

from __future__ import annotations

import re
from typing import Any

_TOKEN = re.compile(
    r'\s*(?:(?P<str>"(?:[^"\\]|\\.)*")|(?P<int>-?\d+)|(?P<op><<|>>|\|->|:>|@@|[{}\[\](),])'
    r"|(?P<id>[A-Za-z_][A-Za-z0-9_]*))"
)


class ModelValue(str):
    """A TLC model value (an unquoted constant such as ``g1``)."""

    __slots__ = ()


class Fn(dict[Any, Any]):
    """A function or record: a dict that can sit in a set (TLC values are immutable)."""

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))


class ValueSyntaxError(ValueError):
    """The text is not a TLA+ value in TLC's printed form."""


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise ValueSyntaxError(f"unexpected text at {pos}: {text[pos:pos + 30]!r}")
        kind = m.lastgroup
        assert kind is not None
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.i = 0

    def peek(self) -> str | None:
        return self.toks[self.i][1] if self.i < len(self.toks) else None

    def take(self, want: str | None = None) -> tuple[str, str]:
        if self.i >= len(self.toks):
            raise ValueSyntaxError("unexpected end of value")
        tok = self.toks[self.i]
        if want is not None and tok[1] != want:
            raise ValueSyntaxError(f"expected {want!r}, got {tok[1]!r}")
        self.i += 1
        return tok

    def items(self, close: str) -> list[Any]:
        out: list[Any] = []
        while self.peek() != close:
            out.append(self.expr())
            if self.peek() == ",":
                self.take(",")
        self.take(close)
        return out

    def expr(self) -> Any:
        """A value, or a function ``a :> x @@ b :> y`` built from singletons."""
        first = self.primary()
        if self.peek() != ":>":
            return first
        out = Fn()
        key = first
        while True:
            self.take(":>")
            out[key] = self.primary()
            if self.peek() != "@@":
                return out
            self.take("@@")
            key = self.primary()

    def primary(self) -> Any:
        kind, tok = self.take()
        if kind == "str":
            return tok[1:-1].replace('\\"', '"').replace("\\\\", "\\")
        if kind == "int":
            return int(tok)
        if kind == "id":
            return {"TRUE": True, "FALSE": False}.get(tok, ModelValue(tok))
        if tok == "<<":
            return tuple(self.items(">>"))
        if tok == "{":
            return frozenset(self.items("}"))
        if tok == "(":
            inner = self.expr()
            self.take(")")
            return inner
        if tok == "[":
            return self.record()
        raise ValueSyntaxError(f"unexpected {tok!r}")

    def record(self) -> Fn:
        out = Fn()
        while self.peek() != "]":
            _, name = self.take()
            self.take("|->")
            out[name] = self.expr()
            if self.peek() == ",":
                self.take(",")
        self.take("]")
        return out


def parse_value(text: str) -> Any:
    """One TLA+ value."""
    p = _Parser(text)
    value = p.expr()
    if p.peek() is not None:
        raise ValueSyntaxError(f"trailing text after the value: {p.peek()!r}")
    return value


_CONJUNCT = re.compile(r"^/\\ (\w+) = ", re.M)


def parse_state(text: str) -> dict[str, Any]:
    """A state printed as ``/\\ var = value`` conjuncts (values may span lines)."""
    heads = list(_CONJUNCT.finditer(text))
    if not heads:
        raise ValueSyntaxError("no `/\\ var = value` conjunct in the state")
    out: dict[str, Any] = {}
    for m, nxt in zip(heads, [*heads[1:], None], strict=True):
        end = nxt.start() if nxt is not None else len(text)
        out[m.group(1)] = parse_value(text[m.end() : end])
    return out
