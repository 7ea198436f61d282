"""Rule: a trace's header and steps are read exactly (``spec/trace.py``).

- its ``writer`` is a rank of the header's own ``ranks`` (a header naming rank 2 of two
  ranks is refused, whatever the pool sizes: mutant ``var`` compared it with
  ``gpu_blocks``);
- two headers are checked in one TLC run only when every constant agrees: each field
  changed alone gives another ``same_constants`` key (mutant ``var`` put ``gpu_blocks``
  where ``host_block_bytes`` belongs, so traces of two block sizes shared one run);
- a validation message is quoted whole up to ``MAX_QUOTE`` characters, cut past it
  (mutant ``cmp``: ``>`` -> ``>=`` cut one of exactly that length);
- every action naming a host block refuses one past the pool (mutant ``drop`` left
  ``HostBlockArgs`` out of the union: an eviction of block 4 of 4 passed);
- a step's per-rank ``copying`` and ``hostData`` name host blocks of the pool (mutant
  ``call`` dropped that check).
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from hisparse.spec.catalogue import ACTIONS, CATALOGUE
from hisparse.spec.trace import (
    FORMAT,
    MAX_QUOTE,
    WRITES,
    TraceHeader,
    TraceStep,
    _first_error,
    step_problem,
)

BASE: dict[str, Any] = {
    "kind": "header",
    "format": FORMAT,
    "requests": {"r1": ["k1"], "r2": ["k1", "k2"]},
    "gpu_blocks": 8,
    "host_blocks": 4,
    "host_pool_bytes": 9,
    "host_block_bytes": 2,
    "ranks": 2,
    "backing": "shared",
    "writer": 1,
    "bug": "none",
}


def header(**changes: Any) -> TraceHeader:
    return TraceHeader.model_validate({**BASE, **changes})


@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_the_writer_is_a_rank_of_the_header(ranks: int) -> None:
    assert header(ranks=ranks, writer=ranks - 1).writer == ranks - 1
    for writer in (ranks, ranks + 1):  # (gpu_blocks is 8: more than either)
        with pytest.raises(ValidationError, match=f"writer {writer} is not a rank of 0..{ranks - 1}"):
            header(ranks=ranks, writer=writer)


# one other valid value per constant
OTHER: dict[str, Any] = {
    "requests": {"r1": ["k1"], "r2": ["k1", "k3"]},
    "gpu_blocks": 9,
    "host_blocks": 5,
    "host_pool_bytes": 11,
    "host_block_bytes": 3,
    "ranks": 3,
    "backing": "private",
    "writer": 0,
    "bug": "round_up_pool",
    "imports": ["r2"],
    "chunks": 2,
    "staging_slots": 3,
}
# what a field's other value needs of the rest (imports are modelled on one rank)
NEEDS: dict[str, dict[str, Any]] = {"imports": {"ranks": 1, "writer": 0}}


def test_every_constant_is_named() -> None:
    assert set(OTHER) == set(TraceHeader.model_fields) - {"kind", "format"}


@pytest.mark.parametrize("field", sorted(OTHER))
def test_headers_differing_in_one_constant_are_not_grouped(field: str) -> None:
    need = NEEDS.get(field, {})
    a, b = header(**need), header(**need, **{field: OTHER[field]})
    assert getattr(a, field) != getattr(b, field)
    assert a.same_constants() != b.same_constants()


def test_equal_headers_share_their_constants() -> None:
    # the same requests listed in another order are the same constants
    swapped = dict(reversed(list(BASE["requests"].items())))
    assert header().same_constants() == header(requests=swapped).same_constants()


def _error_of_length(n: int) -> ValidationError:
    """A validation error whose first message, as the reader quotes it, is ``n`` long."""

    class M(BaseModel):
        x: dict[str, int]

    def quoted(key: str) -> str:
        try:
            M.model_validate({"x": {key: "a"}})
        except ValidationError as exc:
            return _first_error(exc)
        raise AssertionError("no error")

    pad = n - len(quoted(""))
    assert pad >= 0
    try:
        M.model_validate({"x": {"k" * pad: "a"}})
    except ValidationError as exc:
        return exc
    raise AssertionError("no error")


def test_a_quoted_message_is_cut_only_past_its_limit() -> None:
    # (the reader quotes a file's names and keys: bounded, but whole when they fit)
    for n in (MAX_QUOTE - 1, MAX_QUOTE, MAX_QUOTE + 1, MAX_QUOTE + 50):
        err = _error_of_length(n).errors()[0]
        full = f"{'.'.join(str(x) for x in err['loc'])}: {err['msg']}"
        assert len(full) == n
        expected = full if n <= MAX_QUOTE else full[:MAX_QUOTE] + "..."
        assert _first_error(_error_of_length(n)) == expected, n


def _complete(post: dict[str, Any]) -> TraceStep:
    return TraceStep.model_validate({
        "kind": "step", "index": 1, "action": "WorkerComplete",
        "args": {"rank": 0, "host_block": 0},
        "post": {"copying": {"0": {}}, "waits": {"0": []}, "wDone": {"0": []},
                 "hostData": {"0": {}}, **post},
    })


@pytest.mark.parametrize("var", ["copying", "hostData"])
def test_a_per_rank_host_block_past_the_pool_is_refused(var: str) -> None:
    """``copying`` and ``hostData`` name host blocks per rank: each must be in the pool."""
    h = header(ranks=1, writer=0, backing="private")  # host_blocks 4
    last = str(h.host_blocks - 1)
    assert step_problem(h, _complete({var: {"0": {last: "k1"}}})) is None
    past = _complete({var: {"0": {str(h.host_blocks): "k1"}}})
    assert step_problem(h, past) == f"{var} has {h.host_blocks} blocks"


HOST_BLOCK_ACTIONS = sorted(a.name for a in CATALOGUE if "host_block" in a.args.model_fields)


def _step(action: str, host_block: int) -> TraceStep:
    """A step of ``action`` naming ``host_block``, reporting its writes as no change."""
    values = {"page": ["r1", 1], "host_block": host_block, "rank": 0, "request": "r1"}
    fields = ACTIONS[action].args.model_fields
    post: dict[str, Any] = {v: [] if v == "loc" else {} for v in WRITES[action]}
    return TraceStep.model_validate({"kind": "step", "index": 1, "action": action,
                                     "args": {f: values[f] for f in fields}, "post": post})


@pytest.mark.parametrize("action", HOST_BLOCK_ACTIONS)
def test_every_action_naming_a_host_block_refuses_one_past_the_pool(action: str) -> None:
    h = header(ranks=1, writer=0, backing="private")
    assert step_problem(h, _step(action, h.host_blocks - 1)) is None
    n = h.host_blocks
    assert step_problem(h, _step(action, n)) == f"host block {n} out of range"


def test_the_host_block_actions_are_of_each_kind() -> None:
    # (a spill, a host block alone, a host block of a rank: every argument model)
    assert {"StartSpill", "EvictHost", "WorkerComplete"} <= set(HOST_BLOCK_ACTIONS)


@pytest.mark.parametrize(("backing", "writer", "copiers"),
                         [("private", 0, [0, 1]), ("shared", 1, [1])])
def test_the_copiers_are_every_rank_or_the_writer(backing: str, writer: int,
                                                  copiers: list[int]) -> None:
    # three GPU blocks, two ranks: a count of anything else than ranks shows
    h = TraceHeader(kind="header", format="hisparse-trace/3", requests={"r0": ["k0"]},
                    gpu_blocks=3, host_blocks=4, host_pool_bytes=8, host_block_bytes=2,
                    ranks=2, backing=backing, writer=writer)  # type: ignore[arg-type]
    assert h.copiers() == copiers


def test_a_rank_reading_a_host_block_past_the_pool_is_refused() -> None:
    """``reading`` names host blocks per rank: a block of the pool passes, one past it is
    named (trace.py:355:cmp:34 inverted the test: refused every read of the pool and
    passed one outside it)."""
    h = header()  # shared backing, two ranks, host_blocks 4

    def read(blocks: list[int]) -> TraceStep:
        return TraceStep.model_validate({"kind": "step", "index": 1, "action": "WorkerRead",
                                         "args": {"rank": 0}, "post": {"reading": {"0": blocks}}})
    assert step_problem(h, read([0, h.host_blocks - 1])) is None
    assert step_problem(h, read([h.host_blocks])) == f"reading has {h.host_blocks} blocks"
