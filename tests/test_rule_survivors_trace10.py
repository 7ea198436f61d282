"""Rules of the trace reader's per-step domain check (``spec/trace.py`` ``step_problem``)
that survivors of the whole mutation run showed (docs/mutation-run7): each argument a step
names (page, chunk, transfer, rank) is checked against its header, with the exact refusal.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from hisparse.spec.catalogue import (
    ACTIONS,
    CATALOGUE,
    PageChunkArgs,
    RankArgs,
    RankHostBlockArgs,
    TransferArgs,
)
from hisparse.spec.trace import (
    FORMAT,
    WRITES,
    TraceFormatError,
    TraceHeader,
    TraceStep,
    read_trace,
    step_problem,
)

# Two requests, r2 an import of two pages of two chunks each (imports: one rank); four
# GPU blocks, three host blocks (unequal, so a GPU bound and a host bound tell apart).
IMPORT_HEADER: dict[str, Any] = {
    "kind": "header",
    "format": FORMAT,
    "requests": {"r1": ["k1"], "r2": ["k2", "k3"]},
    "gpu_blocks": 4,
    "host_blocks": 3,
    "host_pool_bytes": 6,
    "host_block_bytes": 2,
    "imports": ["r2"],
    "chunks": 2,
}
# Two tensor-parallel ranks, private pools (every rank copies).
TP_HEADER: dict[str, Any] = {
    "kind": "header",
    "format": FORMAT,
    "requests": {"r1": ["k1"]},
    "gpu_blocks": 4,
    "host_blocks": 3,
    "host_pool_bytes": 6,
    "host_block_bytes": 2,
    "ranks": 2,
}
# An argument value of every field name the catalogue's argument models use (in range
# for both headers above).
ARG_VALUES: dict[str, Any] = {
    "request": "r1", "page": ["r1", 1], "host_block": 0, "src": 0, "dst": 0, "rank": 0,
    "chunk": 1,
}


def header(base: dict[str, Any], **changes: Any) -> TraceHeader:
    return TraceHeader.model_validate({**base, **changes})


def step_json(action: str, post: dict[str, Any] | None = None, **args: Any) -> dict[str, Any]:
    """A step of ``action`` (index 1) with ``args`` over ARG_VALUES, reporting every
    variable it writes as unchanged (an empty change), ``post`` over that."""
    fields = ACTIONS[action].args.model_fields
    empty: dict[str, Any] = {v: [] if v in ("loc", "pg") else {} for v in WRITES[action]}
    return {
        "kind": "step", "index": 1, "action": action,
        "args": {f: args.get(f, ARG_VALUES[f]) for f in fields},
        "post": {**empty, **(post or {})},
    }


def step(action: str, post: dict[str, Any] | None = None, **args: Any) -> TraceStep:
    return TraceStep.model_validate(step_json(action, post, **args))


# --- chunks: 1..chunks -------------------------------------------------------------------


@pytest.mark.parametrize("chunks", [1, 2, 3])
def test_a_landed_chunk_is_one_of_1_to_the_headers_chunks(chunks: int) -> None:
    """Chunks are 1-based, 1..chunks (the spec's Chunks: ``{1}`` by default, ``TrChunks ==
    1..chunks`` in trace validation; the machine's ``1 <= c <= chunks``): the last chunk
    is admitted, the one past it is refused by number.
    (kills spec/trace.py:321:cmp:7, ``>`` -> ``>=`` refused the last chunk)"""
    h = header(IMPORT_HEADER, chunks=chunks)
    for c in range(1, chunks + 1):
        assert step_problem(h, step("LandChunk", page=["r2", 2], chunk=c)) is None
    past = step("LandChunk", page=["r2", 2], chunk=chunks + 1)
    assert step_problem(h, past) == f"chunk {chunks + 1} out of range"


def test_chunk_0_is_not_a_chunk_of_the_format() -> None:
    # (the lower bound is the format's: Chunk is ge=1, before the header is consulted)
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        step("LandChunk", page=["r2", 1], chunk=0)


def test_the_reader_reads_the_last_chunk_and_refuses_the_next_at_its_line(
    tmp_path: Path,
) -> None:
    # (kills spec/trace.py:321:cmp:7 through read_trace)
    h = header(IMPORT_HEADER)
    path = tmp_path / "land.jsonl"
    last = step_json("LandChunk", page=["r2", 1], chunk=h.chunks)
    path.write_text(json.dumps(IMPORT_HEADER) + "\n" + json.dumps(last) + "\n")
    trace = read_trace(path)
    assert trace.header == h
    assert [(s.action, s.args) for s in trace.steps] == [
        ("LandChunk", PageChunkArgs(page=("r2", 1), chunk=h.chunks))
    ]
    past = step_json("LandChunk", page=["r2", 1], chunk=h.chunks + 1)
    path.write_text(json.dumps(IMPORT_HEADER) + "\n" + json.dumps(past) + "\n")
    with pytest.raises(TraceFormatError) as err:
        read_trace(path)
    assert (err.value.line, err.value.message) == (2, f"chunk {h.chunks + 1} out of range")
    assert str(err.value) == f"{path}:2: chunk {h.chunks + 1} out of range"


@pytest.mark.parametrize("page", [["r2", 3], ["r1", 2], ["r9", 1]])
def test_a_chunk_of_a_page_outside_the_header_is_refused_by_its_page(page: list[Any]) -> None:
    """A LandChunk names a page of the header, whatever its chunk (a valid one here).
    (kills spec/trace.py:319:drop:2, which left PageChunkArgs out of the page check)"""
    h = header(IMPORT_HEADER)
    assert step_problem(h, step("LandChunk", page=["r2", 2], chunk=1)) is None
    assert step_problem(h, step("LandChunk", page=page, chunk=1)) == f"unknown page {page}"


# --- transfers: a GPU source, a host destination --------------------------------------------

TRANSFER_ACTIONS = sorted(a.name for a in CATALOGUE if a.args is TransferArgs)


def test_the_transfer_actions_are_known() -> None:
    assert TRANSFER_ACTIONS == ["IgnoreReplay", "LoseCommand", "WorkerDrop", "WorkerEnqueue"]


@pytest.mark.parametrize("action", TRANSFER_ACTIONS)
def test_a_transfer_with_either_end_outside_its_pool_is_refused(action: str) -> None:
    """A transfer's source is a GPU block, its destination a host block: each end is
    checked alone (a bad source with a good destination is refused, and the converse).
    (kills spec/trace.py:325:bool:10, ``or`` -> ``and`` passed one bad end)"""
    h = header(TP_HEADER)  # gpu_blocks 4, host_blocks 3
    g, n = h.gpu_blocks, h.host_blocks
    assert step_problem(h, step(action, src=g - 1, dst=n - 1)) is None
    assert step_problem(h, step(action, src=g, dst=0)) == f"transfer {g}->0 out of range"
    assert step_problem(h, step(action, src=0, dst=n)) == f"transfer 0->{n} out of range"
    # a GPU-sized destination is past the host pool (the bounds are not swapped)
    assert step_problem(h, step(action, src=n, dst=g - 1)) == f"transfer {n}->{g - 1} out of range"
    assert step_problem(h, step(action, src=g, dst=n)) == f"transfer {g}->{n} out of range"


# --- ranks: 0..ranks-1 --------------------------------------------------------------------

RANKED_ACTIONS = sorted(a.name for a in CATALOGUE if "rank" in a.args.model_fields)


def test_every_argument_model_with_a_rank_is_checked_here() -> None:
    # (the parametrized test below covers each: a transfer, a host block of a rank, a rank)
    kinds = {ACTIONS[a].args for a in RANKED_ACTIONS}
    assert kinds == {TransferArgs, RankHostBlockArgs, RankArgs}


@pytest.mark.parametrize("ranks", [1, 2])
@pytest.mark.parametrize("action", RANKED_ACTIONS)
def test_a_step_of_a_rank_past_the_headers_ranks_is_refused(action: str, ranks: int) -> None:
    """Ranks are 0-based, 0..ranks-1: every ranked action (a transfer's, a host block's of
    a rank, a rank's alone) admits the last rank and refuses rank ``ranks`` by number.
    (kills spec/trace.py:327:drop:6 / drop:7 / drop:8, each leaving one argument model out
    of the rank check, and spec/trace.py:327:cmp:9, ``>=`` -> ``>`` admitted rank ``ranks``)"""
    h = header(TP_HEADER, ranks=ranks)
    assert step_problem(h, step(action, rank=ranks - 1)) is None
    assert step_problem(h, step(action, rank=ranks)) == f"rank {ranks} out of range"
    assert step_problem(h, step(action, rank=ranks + 1)) == f"rank {ranks + 1} out of range"


# --- what the `none` survivors touch (they are equivalent: see the report) -----------------


@pytest.mark.parametrize(
    ("action", "var", "unknown", "why"),
    [
        ("Arrive", "req", {"r9": "running"}, "req names an unknown request"),
        ("EvictHost", "prefix", {"k9": [0]}, "prefix names an unknown key"),
        ("EvictHost", "hostKey", {"0": "k9"}, "hostKey names an unknown key"),
    ],
)
def test_an_empty_change_is_admitted_and_an_unknown_name_is_refused(
    action: str, var: str, unknown: dict[str, Any], why: str
) -> None:
    """An empty change of ``req``/``prefix``/``hostKey`` says "unchanged" and is admitted
    (it names nothing, so nothing unknown); a change naming what the header lacks is
    refused by variable."""
    h = header(TP_HEADER)
    assert step_problem(h, step(action, {var: {}})) is None
    assert step_problem(h, step(action, {var: unknown})) == why


def test_a_host_key_is_a_name_or_null_never_empty() -> None:
    """``hostKey`` values are Names (``^[A-Za-z0-9_.:-]+$``: one character at least) or
    null (NoKey): no falsy non-null value reaches the reader's check."""
    h = header(TP_HEADER)
    assert step_problem(h, step("EvictHost", {"hostKey": {"0": None, "1": "k1"}})) is None
    with pytest.raises(ValidationError, match="should match pattern"):
        step("EvictHost", {"hostKey": {"0": ""}})


def test_a_recorded_trace_declares_exactly_the_imports_its_machine_declared() -> None:
    # the header's ``imports`` are the requests declared with add_import, sorted, and
    # none for a machine that declared none (kills spec/record.py:35:bool:1, which
    # declared none ever: a trace of an import read back as ordinary requests)
    from hisparse.spec.record import machine_trace
    from tests.protocol_helpers import make_machine

    m = make_machine(record=True, universe={"o1": ("k1",)},
                     imports={"i2": ("k2", "k3"), "i1": ("k1",)})
    header = machine_trace(m).header
    assert header.imports == ["i1", "i2"]
    assert sorted(header.requests) == ["i1", "i2", "o1"]
    plain = make_machine(record=True, universe={"o1": ("k1",)})
    assert machine_trace(plain).header.imports == []
