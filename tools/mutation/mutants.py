"""Mutants: one operator's edit at one site of one target file, named stably."""

from __future__ import annotations

import hashlib
import zlib
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path

from tools.mutation.operators import OPERATORS, sites, splice, spliced


@dataclass(frozen=True)
class Mutant:
    """One edit; ``id`` is ``file:line:operator:n`` (n counts sites of that operator);
    ``edit`` a hash of the mutated file: one id names one edit only while it is the same."""

    id: str
    file: str
    line: int
    operator: str
    index: int
    before: str
    edit: str = ""

    def sampled(self, one_in: int) -> bool:
        """A stable 1-in-N choice that survives edits elsewhere in the file (no line)."""
        what = f"{self.file}:{self.operator}:{self.index}:{self.before}"
        return zlib.crc32(what.encode()) % max(1, one_in) == 0


def mutants_of(root: Path, file: str) -> list[Mutant]:
    """Every mutant of one target file, operator by operator, in a stable order."""
    source = (root / file).read_text()
    lines = source.splitlines()
    out: list[Mutant] = []
    for op in OPERATORS:
        for n, (site, mutated) in enumerate(spliced(source, op.name)):
            text = lines[site.line - 1].strip()
            edit = hashlib.sha256(mutated.encode()).hexdigest()[:16]
            out.append(Mutant(f"{file}:{site.line}:{op.name}:{n}", file, site.line, op.name,
                              n, text, edit))
    return out


def mutated_source(m: Mutant, source: str) -> str:
    """``source`` with ``m``'s edit; refuses a file that has changed under the mutant."""
    found = sites(source, m.operator)
    if m.index >= len(found) or found[m.index].line != m.line:
        raise ValueError(f"mutant {m.id} no longer matches its file")
    return splice(source, found[m.index])


def _round_robin(groups: list[list[Mutant]]) -> list[Mutant]:
    return [m for row in zip_longest(*groups) for m in row if m is not None]


def interleaved(mutants: list[Mutant], first: tuple[str, ...] = ()) -> list[Mutant]:
    """Round-robin over files, and within a file over operators (those in ``first``
    first), so a run cut short has reached every file and every operator a little."""
    by_file: dict[str, dict[str, list[Mutant]]] = {}
    for m in mutants:
        by_file.setdefault(m.file, {}).setdefault(m.operator, []).append(m)
    rank = {name: i for i, name in enumerate(first)}
    return _round_robin([
        _round_robin([ops[k] for k in sorted(ops, key=lambda k: rank.get(k, len(rank)))])
        for ops in by_file.values()
    ])
