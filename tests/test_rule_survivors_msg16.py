"""Message-shape rules met by the whole mutation run's sixteenth pass
(docs/mutation-survivors.md): a connector metadata's numbering is all or nothing."""

from __future__ import annotations

from typing import Any

import pytest

from hisparse.msgshape import connector_metadata_problem, worker_meta_imports
from hisparse.spec.errors import MalformedMessage
from tests.test_rule_msgshape_imports import _ack, _meta


@pytest.mark.parametrize(("numbers", "why"), [
    # seq 0 is a number: only all three absent means "unsequenced" (msgshape.py:85:none:3
    # took seq 0 for absent, and passed a metadata numbered by half)
    ({"seq": 0}, "since is None (NoneType), not a tuple of non-negative ints"),
    ({"seq": 1}, "since is None (NoneType), not a tuple of non-negative ints"),
    ({"seq": 0, "since": (0,)}, "epoch is None (NoneType), not a tuple of non-negative ints"),
    ({"since": ()}, "seq is None (NoneType), not a non-negative int"),
    ({"epoch": ()}, "seq is None (NoneType), not a non-negative int"),
])
def test_a_metadata_numbered_by_half_is_refused_by_the_missing_number(
    numbers: dict[str, Any], why: str,
) -> None:
    assert connector_metadata_problem(_meta(**numbers)) == why


@pytest.mark.parametrize("numbers", [{}, {"seq": 0, "since": (0,), "epoch": (0,)}])
def test_an_unsequenced_or_a_wholly_numbered_metadata_is_well_shaped(
    numbers: dict[str, Any],
) -> None:
    assert connector_metadata_problem(_meta(**numbers)) is None


@pytest.mark.parametrize("field", ["imports_landed", "imports_failed"])
@pytest.mark.parametrize("value", [None, set(), frozenset(), "", {}])
def test_import_acks_that_are_not_a_tuple_are_refused_by_their_shape(field: str,
                                                                   value: Any) -> None:
    # each list is checked for its shape before any entry is read: an empty set is no
    # tuple, and None is not iterable (msgshape.py:194:var:41 checked imports_landed
    # twice, so an empty set of failures passed and None escaped as a TypeError)
    with pytest.raises(MalformedMessage,
                       match=r"^worker meta imports_landed and imports_failed must be tuples$"):
        worker_meta_imports(_ack(**{field: value}))
