"""Rule: a prefiller's page arena hands out each of its rows to at most one request at a
time, every row exactly once in all (lowest first from a fresh arena); a put of 1 up to
every free row succeeds, any other put (none, too many, a request already held) is
refused with nothing changed; a drop gives the rows back and is idempotent
(``hisparse/transport/arena.py``).

From the guard survivors of the third guard-phase run (docs/mutation-survivors.md):
``34:reorder:0`` (rows popped before the size check: a refused put took rows, or failed
with ``IndexError``) and ``40:arith:0`` (``+=`` → ``-=``: a drop raised ``TypeError``,
no guard test dropped a held request); the file's other seven mutants (the cap cut the
run after four) are killed here too.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hisparse.transport.arena import PageArena
from hisparse.transport.errors import TransportError


def _state(a: PageArena) -> tuple[int, dict[str, list[int]]]:
    return a.num_free, {k: list(v) for k, v in a.held.items()}


def test_a_fresh_arena_gives_its_lowest_rows_first_and_every_row_once() -> None:
    a = PageArena(5)
    assert a.put("a", 2) == [0, 1]
    assert a.put("b", 3) == [2, 3, 4]
    assert a.num_free == 0


@pytest.mark.parametrize("n", [0, 4, 9])
def test_a_put_of_none_or_too_many_rows_is_refused_changing_nothing(n: int) -> None:
    a = PageArena(4)
    a.put("x", 1)
    before = _state(a)
    with pytest.raises(TransportError, match="free pages of 4"):
        a.put("r", n)
    assert _state(a) == before


def test_a_request_already_held_is_refused_changing_nothing() -> None:
    a = PageArena(4)
    a.put("r", 1)
    before = _state(a)
    with pytest.raises(TransportError, match="already holds request 'r'"):
        a.put("r", 1)
    assert _state(a) == before


def test_a_drop_gives_the_rows_back_and_is_idempotent() -> None:
    a = PageArena(3)
    rows = a.put("r", 3)
    a.drop("r")
    a.drop("r")
    a.drop("never")
    assert a.num_free == 3 and a.held == {}
    assert a.put("s", 3) == rows  # the same rows again, in the same order


@given(ops=st.lists(st.tuples(st.sampled_from(["put", "drop"]), st.integers(0, 3),
                              st.integers(0, 6)), max_size=30),
       pages=st.integers(1, 6))
def test_held_rows_are_disjoint_and_with_the_free_rows_make_the_arena(
    ops: list[tuple[str, int, int]], pages: int
) -> None:
    a = PageArena(pages)
    for kind, who, n in ops:
        req = f"r{who}"
        before = _state(a)
        if kind == "drop":
            a.drop(req)
            assert req not in a.held
            assert a.num_free == before[0] + len(before[1].get(req, []))
        elif req in a.held or not 1 <= n <= a.num_free:
            with pytest.raises(TransportError):
                a.put(req, n)
            assert _state(a) == before
        else:
            rows = a.put(req, n)
            assert len(rows) == n and a.held[req] == rows
            assert a.num_free == before[0] - n
        held = [r for rows in a.held.values() for r in rows]
        assert len(held) == len(set(held)) and all(0 <= r < pages for r in held)
        assert len(held) + a.num_free == pages
