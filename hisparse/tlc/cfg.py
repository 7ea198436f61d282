"""Read and rewrite TLC ``.cfg`` files at the section level.

We need the invariant/property names (to report what was checked) and small rewrites
(swap the ``Bug`` binding, keep one PROPERTY) without a TLA+ parser. A cfg file is a
sequence of keyword sections; a section's body runs until the next keyword.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from hisparse.tlc.errors import ModelError

KEYWORDS = frozenset(
    """CONSTANT CONSTANTS INIT NEXT SPECIFICATION INVARIANT INVARIANTS PROPERTY PROPERTIES
    CONSTRAINT CONSTRAINTS ACTION_CONSTRAINT ACTION_CONSTRAINTS SYMMETRY VIEW CHECK_DEADLOCK
    TYPE TYPE_CONSTRAINT ALIAS POSTCONDITION""".split()  # noqa: SIM905 (reads like a cfg)
)
INVARIANT_KEYS = frozenset({"INVARIANT", "INVARIANTS"})
PROPERTY_KEYS = frozenset({"PROPERTY", "PROPERTIES"})

_COMMENT = re.compile(r"\(\*.*?\*\)|\\\*[^\n]*", re.S)
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[A-Za-z_][A-Za-z0-9_]*')
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class CfgSection:
    """One ``KEYWORD body`` section; ``body`` is the raw text with comments removed."""

    keyword: str
    body: str

    def names(self) -> list[str]:
        """Identifiers in the body (meaningful for INVARIANT/PROPERTY-like sections)."""
        return _NAME.findall(self.body)

    def render(self) -> str:
        """Back to cfg text."""
        return f"{self.keyword}\n    {self.body.strip()}\n"


def strip_comments(text: str) -> str:
    """Remove ``\\*`` line comments and ``(* *)`` block comments (cfg files allow both)."""
    return _COMMENT.sub(" ", text)


def parse_sections(text: str) -> list[CfgSection]:
    """Split cfg text into keyword sections, in file order."""
    clean = strip_comments(text)
    # Strings are tokens too, so a keyword inside a string literal never starts a section.
    starts = [m for m in _TOKEN.finditer(clean) if m.group(0) in KEYWORDS]
    sections = []
    for i, m in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(clean)
        sections.append(CfgSection(m.group(0), clean[m.end() : end]))
    return sections


def names_in(sections: Iterable[CfgSection], keywords: frozenset[str]) -> list[str]:
    """All names listed under any of ``keywords``, de-duplicated, in order."""
    seen: list[str] = []
    for section in sections:
        if section.keyword in keywords:
            seen += [n for n in section.names() if n not in seen]
    return seen


def invariants(text: str) -> list[str]:
    """Names under INVARIANT/INVARIANTS."""
    return names_in(parse_sections(text), INVARIANT_KEYS)


def properties(text: str) -> list[str]:
    """Names under PROPERTY/PROPERTIES."""
    return names_in(parse_sections(text), PROPERTY_KEYS)


def render(sections: Iterable[CfgSection]) -> str:
    """Serialize sections back to a cfg file."""
    return "".join(s.render() for s in sections)


def with_only_property(text: str, prop: str) -> str:
    """The same cfg with all INVARIANTs and PROPERTIES dropped except ``PROPERTY prop``."""
    kept = [s for s in parse_sections(text) if s.keyword not in INVARIANT_KEYS | PROPERTY_KEYS]
    return render([*kept, CfgSection("PROPERTY", prop)])


_BUG_BINDING = re.compile(r"\bBug\s*<-\s*MCBug\b")


def rebind_bug(text: str, operator: str) -> str:
    """Replace ``Bug <- MCBug`` with ``Bug <- operator``; the binding must be there."""
    new, count = _BUG_BINDING.subn(f"Bug <- {operator}", strip_comments(text))
    if count != 1:
        raise ModelError(f"expected exactly one `Bug <- MCBug` line in the cfg, found {count}")
    return new
