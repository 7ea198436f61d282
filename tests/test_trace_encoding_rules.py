"""What ``hisparse/tracecheck`` writes for TLC, checked without Java (no ``tlc`` marker).

- Golden cases (``tests/data/trace_golden/``): for each stored trace, today's replay
  module and cfg equal the stored text exactly. The stored text is what TLC checked:
  ``tests/test_trace_golden_tlc.py`` model-checks each (two ranks over a shared pool,
  P/D imports, a window between two recorded states: accepted; an injected bug's trace:
  rejected by its invariant). To regenerate after an intended change of the encoding::

      python -m tests.trace_golden --regenerate

  then run both files (the tests themselves never regenerate).
- Rules a snapshot states poorly: the value encoders, the integer numbering, the delta
  invariant names, header admission, reading TLC's error trace, window cutting and the
  verdict bookkeeping of ``check``.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any, cast

import pytest

from hisparse.spec.catalogue import ACTIONS
from hisparse.spec.trace import (
    FORMAT,
    POST_FIELDS,
    Trace,
    TraceHeader,
    TracePost,
    TraceStep,
    read_trace,
    write_trace,
)
from hisparse.tlc import TlcInstall
from hisparse.tlc.errors import ModelError
from hisparse.tlc.output import parse_output
from hisparse.tlc.runner import TlcResult
from hisparse.tracecheck import check, delta, encode, ints
from hisparse.tracecheck import module as gen
from hisparse.tracecheck.admit import TLC_INT_MAX, HeaderLimits, header_problem
from hisparse.tracecheck.errtrace import StopPoint, stop_point
from hisparse.tracecheck.ints import Ids
from hisparse.tracecheck.window import HANDOFF_INVARIANT, States
from tests.trace_golden import CASES, WINDOW_HI, WINDOW_LO, WINDOW_OF, Case, generate

# --- golden cases --------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_generated_module_and_cfg_are_the_golden_text(case: Case) -> None:
    module_text, cfg_text = generate(case)
    assert module_text == case.module_path.read_text(), (
        f"{case.name}: the replay module changed; if intended, regenerate "
        "(python -m tests.trace_golden --regenerate) and run tests/test_trace_golden_tlc.py"
    )
    assert cfg_text == case.cfg_path.read_text(), case.name


@pytest.mark.parametrize("name", sorted({c.trace_name for c in CASES}))
def test_golden_traces_are_stored_as_write_trace_writes_them(name: str, tmp_path: Path) -> None:
    stored = next(c for c in CASES if c.trace_name == name).trace_path
    again = tmp_path / "again.jsonl"
    write_trace(again, read_trace(stored))
    assert again.read_bytes() == stored.read_bytes()


def test_golden_cases_cover_ranks_imports_and_a_window() -> None:
    shared = read_trace(next(c for c in CASES if c.name == "shared").trace_path)
    assert (shared.header.ranks, shared.header.backing, shared.header.writer) == (2, "shared", 1)
    ranked = {s.args.rank for s in shared.steps if hasattr(s.args, "rank")}
    assert ranked == {0, 1}
    imports = read_trace(next(c for c in CASES if c.name == "imports").trace_path)
    targets = {x.target for s in imports.steps for x in (s.post.imp or {}).values()}
    assert {"device", "host"} <= targets and imports.header.chunks == 2
    assert 0 < WINDOW_LO < WINDOW_HI < len(read_trace(Path(
        next(c for c in CASES if c.trace_name == WINDOW_OF).trace_path)).steps)


def test_check_cuts_the_same_window_as_the_golden_one() -> None:
    """``check._windows`` with the golden window's size: its middle window is the golden
    window (same steps, same start and end states), the first starts at Init and the
    last ends anywhere."""
    case = next(c for c in CASES if c.name == "window")
    trace = read_trace(case.trace_path)
    size = WINDOW_HI - WINDOW_LO
    assert size == WINDOW_LO  # the golden window is the second of equal windows
    groups = check._windows(7, case.trace_path, trace, size)
    whole = len(trace.steps)
    assert [(g.number, g.offset, g.whole, len(g.traces[0].steps)) for g in groups] == [
        (7 + n, lo, whole, min(size, whole - lo)) for n, lo in enumerate(range(0, whole, size))
    ]
    assert all(g.paths == [case.trace_path] for g in groups)
    assert groups[0].start is None and groups[-1].end is None
    assert all(g.start is not None for g in groups[1:])
    assert all(g.end is not None for g in groups[:-1])
    mid = groups[1]
    text = gen.module_text(mid.traces, start=mid.start, end=mid.end)
    assert text == case.module_path.read_text()
    # each window starts where the one before must end (same state, its own names)
    for before, after in itertools.pairwise(groups):
        assert before.end is not None and after.start is not None
        assert before.end.predicate.replace("TrLast_", "TrFirst_") == after.start.predicate


# --- value encoders ------------------------------------------------------------------


def header(**kw: Any) -> TraceHeader:
    doc: dict[str, Any] = {
        "kind": "header", "format": FORMAT, "requests": {"a": ["k1", "k2"], "b": ["k2", "k3"]},
        "gpu_blocks": 3, "host_blocks": 4, "host_pool_bytes": 8, "host_block_bytes": 2,
    }
    doc.update(kw)
    return TraceHeader.model_validate(doc)


def test_containers() -> None:
    assert encode.function([]) == "<<>>"
    assert encode.function([]) == encode.record([]) == encode.tup([]) == encode.pairs([])
    assert encode.function([("1", "a"), ("2", "b")]) == (
        "[x \\in {1, 2} |-> CASE x = 1 -> a [] x = 2 -> b]"
    )
    assert encode.function([("7", "v")], bound="y") == "[y \\in {7} |-> CASE y = 7 -> v]"
    assert encode.tup(["1", "2"]) == "<<1, 2>>" and encode.tup(["1"]) == "<<1>>"
    assert encode.tla_set([]) == "{}" and encode.tla_set(["1", "2"]) == "{1, 2}"
    assert encode.record([("a", "1"), ("b", "2")]) == "[a |-> 1, b |-> 2]"
    assert encode.pairs([("1", "x"), ("2", "y")]) == "<<<<1, x>>, <<2, y>>>>"
    assert encode.full("TRUE") == "TRUE" and encode.full([("1", "x")]) == "<<<<1, x>>>>"


def test_strings_are_quoted_and_names_need_no_escaping() -> None:
    assert encode.string("free") == '"free"'
    assert encode.string("a.b:c-d_9") == '"a.b:c-d_9"'
    # a name that would need escaping never reaches the encoder: the header refuses it
    with pytest.raises(ValueError, match="pattern"):
        header(requests={'a"b': ["k1"]})
    with pytest.raises(ValueError, match="pattern"):
        header(requests={"a": ["k\\1"]})


def test_scalars() -> None:
    ids = Ids(header())
    assert encode.rank(0) == "1" and encode.rank(3) == "4"
    assert encode.ranks([2, 0]) == "{1, 3}" and encode.ranks([]) == "{}"
    assert encode.gpu(2) == "2"
    assert encode.host(0, ids) == "3" and encode.host(3, ids) == "6"  # after 3 GPU blocks
    assert encode.hosts([2, 0], ids) == "{3, 5}"
    assert encode.boolean(True) == "TRUE" and encode.boolean(False) == "FALSE"
    assert encode.page(None, ids) == "NoPage"
    assert [encode.page(p, ids) for p in (("a", 1), ("a", 2), ("b", 1), ("b", 2))] == [
        "1", "2", "3", "4",
    ]
    assert encode.request("b", ids) == "2"
    assert encode.loc(None, ids) == "NoLoc"
    assert encode.loc(("gpu", 1), ids) == '<<"gpu", 1>>'
    assert encode.loc(("host", 1), ids) == '<<"host", 4>>'
    assert encode.key(None, ids) == "NoKey" and encode.key("k3", ids) == "3"


def test_post_fields_of_an_empty_post_and_of_every_kind_of_change() -> None:
    ids = Ids(header(ranks=2, imports=[], backing="private"))
    assert encode.post_fields(TracePost(), ids) == []
    post = TracePost.model_validate({
        "req": {"b": "running"},
        "loc": [[["a", 2], ["host", 1]], [["b", 1], None]],
        "gpuOwner": {"2": ["b", 2], "0": None},
        "srcPin": {"1": True},
        "hostState": {"3": "valid"},
        "hostKey": {"0": "k2", "1": None},
        "prefix": {"k2": [1, 0]},
        "spill": {"2": {"src": 1, "page": ["a", 1], "phase": "sent", "enq": [1], "need": [1, 0]},
                  "3": None},
        "down": {"1": [{"src": 2, "dst": 0}, {"src": 0, "dst": 3}]},
        "up": {"0": [{"enq": [1], "done": []}]},
        "lost": {"1": True},
        "copying": {"1": {"2": "k1", "0": None}},
        "waits": {"0": [3, 1]},
        "reading": {"1": []},
        "wEnq": {"0": [2]},
        "wDone": {"1": [0]},
        "gpuData": {"1": "garbage", "0": "empty"},
        "hostData": {"0": {"1": "k3"}},
        "imp": {"a": {"target": "host", "phase": "landing"}},
        "pg": [[["a", 1], {"host": 2, "landed": [2, 1], "staged": [], "slot": True}],
               [["a", 2], {"landed": [], "staged": [1], "slot": False}]],
    })
    fields = dict(encode.post_fields(post, ids))
    assert list(fields) == list(POST_FIELDS)  # every one reported, in spec order
    assert fields == {
        "req": [("2", '"running"')],
        "loc": [("2", '<<"host", 4>>'), ("3", "NoLoc")],
        "gpuOwner": [("0", "NoPage"), ("2", "4")],
        "srcPin": [("1", "TRUE")],
        "hostState": [("6", '"valid"')],
        "hostKey": [("3", "2"), ("4", "NoKey")],
        "prefix": [("2", "{3, 4}")],
        "spill": [
            ("5", '[src |-> 1, page |-> 1, phase |-> "sent", enq |-> {2}, need |-> {1, 2}]'),
            ("6", "NoSpill"),
        ],
        "down": [("2", "{[src |-> 0, dst |-> 6], [src |-> 2, dst |-> 3]}")],
        "up": [("1", "<<[enq |-> {4}, done |-> {}]>>")],
        "lost": [("2", "TRUE")],
        "copying": [("2", "<<<<3, Idle>>, <<5, 1>>>>")],
        "waits": [("1", "{4, 6}")],
        "reading": [("2", "{}")],
        "wEnq": [("1", "{5}")],
        "wDone": [("2", "{3}")],
        "gpuData": [("0", "Empty"), ("1", "Garbage")],
        "hostData": [("1", "<<<<4, 3>>>>")],
        "imp": [("1", '[target |-> "host", phase |-> "landing"]')],
        "pg": [
            ("1", '[host |-> <<"host", 5>>, landed |-> {1, 2}, staged |-> {}, slot |-> TRUE]'),
            ("2", "[host |-> NoLoc, landed |-> {}, staged |-> {1}, slot |-> FALSE]"),
        ],
    }
    # empty changes stay reported (an empty change says "unchanged")
    assert encode.post_fields(TracePost(req={}, down={}), ids) == [("req", []), ("down", [])]


def _step(doc: dict[str, Any]) -> TraceStep:
    return TraceStep.model_validate({"kind": "step", "index": 1, **doc})


def _unchanged(action: str) -> dict[str, Any]:
    """A post reporting every variable ``action`` writes, each unchanged."""
    return {v: [] if v in ("loc", "pg") else {} for v in ACTIONS[action].writes}


def test_arrive_witness_names_host_hits_then_gpu_blocks_in_page_order() -> None:
    h = header(requests={"a": ["k1", "k2", "k3"], "b": ["k1"]})
    ids = Ids(h)
    s = _step({"action": "Arrive", "args": {"request": "a"}, "post": {
        "req": {"a": "running"},
        "loc": [[["a", 3], ["gpu", 0]], [["b", 1], ["gpu", 2]], [["a", 2], ["host", 1]],
                [["a", 1], ["host", 3]]],
        "gpuOwner": {}, "gpuData": {},
    }})
    assert encode.args(s, ids) == "[request |-> 1, hosts |-> <<6, 4>>, blocks |-> <<0>>]"
    none = _step({"action": "Arrive", "args": {"request": "b"}, "post": {
        "req": {"b": "running"}, "loc": [[["a", 1], ["gpu", 1]]], "gpuOwner": {}, "gpuData": {},
    }})
    assert encode.args(none, ids) == "[request |-> 2, hosts |-> <<>>, blocks |-> <<>>]"


def test_admit_witness_names_owned_blocks_and_leased_hosts_in_page_order() -> None:
    h = header(requests={"a": ["k1", "k2"], "i": ["k3", "k4"]}, imports=["i"], gpu_blocks=4)
    post = _unchanged("AdmitImport") | {
        "gpuOwner": {"2": ["i", 1], "0": ["i", 2], "1": ["a", 1], "3": None},
        "pg": [[["i", 2], {"host": 1, "landed": [], "staged": [], "slot": False}],
               [["a", 1], {"host": 0, "landed": [], "staged": [], "slot": False}],
               [["i", 1], {"host": 3, "landed": [], "staged": [], "slot": False}]],
    }
    s = _step({"action": "AdmitImport", "args": {"request": "i"}, "post": post})
    assert encode.args(s, Ids(h)) == "[request |-> 2, blocks |-> <<2, 0>>, hosts |-> <<7, 5>>]"
    unleased = post | {"pg": [[["i", 1], {"landed": [], "staged": [], "slot": False}]]}
    s = _step({"action": "AdmitImport", "args": {"request": "i"}, "post": unleased})
    assert encode.args(s, Ids(h)) == "[request |-> 2, blocks |-> <<2, 0>>, hosts |-> <<>>]"


def test_args_of_each_encoding() -> None:
    h = header(ranks=2, chunks=3)
    ids = Ids(h)
    cases = {
        ("WorkerReport", '{"rank": 1}'): "[rank |-> 2]",
        ("ConsumeMeta", '{"rank": 0}'): "[rank |-> 1]",
        ("StartSpill", '{"page": ["b", 2], "host_block": 1}'): "[page |-> 4, host_block |-> 4]",
        ("WorkerEnqueue", '{"src": 2, "dst": 0, "rank": 1}'): "[rank |-> 2, src |-> 2, dst |-> 3]",
        ("Finish", '{"request": "b"}'): "[request |-> 2]",
    }
    for (action, args), expected in cases.items():
        s = _step({"action": action, "args": json.loads(args), "post": _unchanged(action)})
        assert encode.args(s, ids) == expected, action
    chunk = next(a for a in ACTIONS.values() if any(e == "chunk" for _, e in a.tla_args))
    s = _step({"action": chunk.name, "args": {"page": ["a", 2], "chunk": 3},
               "post": _unchanged(chunk.name)})
    assert encode.args(s, ids) == "[page |-> 2, chunk |-> 3]"
    empty = [a for a in ACTIONS.values() if not a.tla_args]
    for a in empty:
        s = _step({"action": a.name, "args": {}, "post": _unchanged(a.name)})
        assert encode.args(s, ids) == "<<>>"


def test_constants() -> None:
    h = header(ranks=3, writer=2, backing="shared", bug="none", chunks=4, staging_slots=2)
    assert dict(encode.constants(h, Ids(h))) == {
        "TrRequests": "1..2", "TrGpuBlocks": "0..2", "TrHostBlocks": "3..6", "TrKeys": "1..3",
        "TrPageKeys": "<<<<1, 2>>, <<2, 3>>>>", "TrHostPoolBytes": "8", "TrHostBlockBytes": "2",
        "TrRanks": "{1, 2, 3}", "TrWriter": "3", "TrBacking": '"shared"', "TrBug": '"none"',
        "TrImports": "{}", "TrChunks": "1..4", "TrStagingSlots": "2",
    }
    i = header(imports=["b", "a"])
    assert dict(encode.constants(i, Ids(i)))["TrImports"] == "{1, 2}"


# --- integer identities --------------------------------------------------------------


def test_ids_number_requests_pages_and_keys_one_to_one_from_one() -> None:
    h = header(requests={"z": ["k9", "k1"], "a": ["k1"], "m": ["k2", "k9", "k3"]})
    ids = Ids(h)
    assert ids.requests == {"z": 1, "a": 2, "m": 3}  # header order, not sorted
    assert ids.keys == {"k9": 1, "k1": 2, "k2": 3, "k3": 4}  # first seen
    pages = [ids.page(r, i) for r, i in h.pages()]
    assert pages == list(range(1, 7)) and ids.pages == 6
    assert (ids.base, ids.length) == ({"z": 0, "a": 2, "m": 3}, {"z": 2, "a": 1, "m": 3})
    assert ids.page_keys == [[1, 2], [2], [3, 1, 4]]
    for bad in (("z", 0), ("z", 3), ("a", 2), ("q", 1)):
        assert ids.page(*bad) == ints.UNKNOWN_PAGE
    assert (ids.host(0), ids.host(3)) == (3, 6)
    assert (ids.data("empty"), ids.data("garbage"), ids.data("k3")) == ("Empty", "Garbage", "4")
    again = Ids(h)  # stable: the same header numbers the same way
    assert (again.requests, again.keys, again.page_keys) == (ids.requests, ids.keys, ids.page_keys)


def test_sentinels_stay_outside_every_numbered_value() -> None:
    assert ints.NO_PAGE == ints.NO_KEY == 0
    assert (ints.EMPTY, ints.GARBAGE, ints.IDLE, ints.NO_BLOCK, ints.UNKNOWN_PAGE) == (
        -1, -2, -3, -1, -4,
    )
    assert len({ints.EMPTY, ints.GARBAGE, ints.IDLE, ints.UNKNOWN_PAGE, ints.NO_PAGE}) == 5


def test_definitions_and_bindings() -> None:
    ids = Ids(header(requests={"a": ["k1", "k2"], "b": ["k2"]}))
    assert ids.definitions() == [
        ("TrBase", "<<0, 2>>"),
        ("TrOwner", "<<1, 1, 2>>"),
        ("TrKeyTab", "<<1, 2, 2>>"),
        ("TrPageReq(p)", "TrOwner[p]"),
        ("TrPageIdx(p)", "p - TrBase[TrOwner[p]]"),
        ("TrPageAt(r, i)", "TrBase[r] + i"),
        ("TrPages", "1..3"),
        ("TrPagesOf(r)", "(TrBase[r] + 1)..(TrBase[r] + Len(PageKeys[r]))"),
        ("TrKeyOf(p)", "TrKeyTab[p]"),
        ("TrNoPage", "0"),
        ("TrNoLoc", '<<"nowhere", -1>>'),
        ("TrNoKey", "0"),
        ("TrIdle", "-3"),
        ("TrEmpty", "-1"),
        ("TrGarbage", "-2"),
        ("TrNoSpill", '[src |-> -1, page |-> 0, phase |-> "none", enq |-> {}, need |-> {}]'),
    ]
    assert ints.bindings() == [(n, f"Tr{n}") for n in (
        "PageReq", "PageIdx", "PageAt", "Pages", "PagesOf", "KeyOf",
        "NoPage", "NoLoc", "NoKey", "Idle", "Empty", "Garbage", "NoSpill",
    )]
    names = {n.split("(")[0] for n, _ in ids.definitions()}
    assert {f"Tr{n}" for n in ints.OVERRIDDEN} <= names


def test_definitions_of_a_header_without_pages_are_empty_sequences() -> None:
    ids = Ids(header())
    ids.requests, ids.page_keys, ids.pages = {}, [], 0
    assert dict(ids.definitions())["TrBase"] == "<<>>"
    assert dict(ids.definitions())["TrOwner"] == "<<>>"
    assert dict(ids.definitions())["TrKeyTab"] == "<<>>"
    assert dict(ids.definitions())["TrPages"] == "1..0"


# --- delta names ---------------------------------------------------------------------


def test_delta_names_round_trip() -> None:
    assert set(delta.SHAPES) == {
        "TypeOK", "NoDoubleOwnership", "PublishedDataCorrect", "RetiredUnreferenced",
        "StagingBounded", "ImportPublishedComplete", "MirrorBeforeRead", "ImportTargetStable",
        "NoImportLeak",
    }
    for name in delta.SHAPES:
        assert delta.cfg_name(name) == "TrDelta_" + name
        assert delta.spec_name(delta.cfg_name(name)) == name
        assert delta.spec_name(name) == name
        assert f"\nTrDelta_{name} ==\n" in delta.TLA
    for other in ("NoLeaseLeaked", "TrHandoff", "Deadlock", "TrDelta_NoLeaseLeaked"):
        assert delta.cfg_name(other) == other and delta.spec_name(other) == other
    assert delta.AUX_VARS == ("trOnGpu", "trOldKey", "trSlots", "trImpHost", "trMirror")
    for var in delta.AUX_VARS:
        assert f"{var} = " in delta.AUX_INIT


# --- admission -----------------------------------------------------------------------

TINY = HeaderLimits(blocks=4, requests=2, pages=4, bytes=10)


def test_admission_accepts_at_every_limit() -> None:
    at = header(gpu_blocks=4, host_blocks=4, host_pool_bytes=8, host_block_bytes=2)
    assert header_problem(at, allow_bug=False, limits=TINY) is None
    assert TLC_INT_MAX == 2**31 - 1 == HeaderLimits().bytes
    assert (HeaderLimits().blocks, HeaderLimits().requests, HeaderLimits().pages) == (
        1 << 16, 1 << 16, 1 << 20,
    )


@pytest.mark.parametrize(
    ("kw", "why"),
    [
        ({"gpu_blocks": 5}, "header gpu_blocks=5 exceeds the limit of 4"),
        ({"host_blocks": 5}, "header host_blocks=5 exceeds the limit of 4"),
        ({"requests": {"a": ["k"], "b": ["k"], "c": ["k"]}},
         "header declares 3 requests, over the limit of 2"),
        ({"requests": {"a": ["k1", "k2", "k3"], "b": ["k1", "k2"]}},
         "header declares 5 pages, over the limit of 4"),
        ({"host_pool_bytes": 9}, "header host_pool_bytes + host_block_bytes = 11 exceeds 10"),
        ({"host_block_bytes": 3}, "header host_pool_bytes + host_block_bytes = 11 exceeds 10"),
    ],
)
def test_admission_refuses_each_limit_by_name(kw: dict[str, Any], why: str) -> None:
    problem = header_problem(header(**kw), allow_bug=False, limits=TINY)
    assert problem is not None and problem.startswith(why), problem


def test_admission_of_bugs() -> None:
    from hisparse.bugs import PROTOCOL_BUGS

    unknown = header_problem(header(bug="no_such_bug"), allow_bug=True, limits=TINY)
    assert unknown is not None and unknown.startswith(
        "header names unknown bug 'no_such_bug'; known: none, "
        + ", ".join(sorted(b.name for b in PROTOCOL_BUGS))
    )
    declared = header_problem(header(bug="double_allocation"), allow_bug=False, limits=TINY)
    assert declared is not None
    assert declared.startswith("header declares injected bug 'double_allocation'")
    assert "--allow-bug" in declared
    assert header_problem(header(bug="double_allocation"), allow_bug=True, limits=TINY) is None
    assert header_problem(header(bug="none"), allow_bug=True, limits=TINY) is None
    # the bug is judged before the sizes
    both = header_problem(header(bug="nope", gpu_blocks=9), allow_bug=False, limits=TINY)
    assert both is not None and "unknown bug" in both


# --- TLC's error trace ---------------------------------------------------------------


def _state(n: int | None, tr: int, cursor: int, label: str = "TraceNext line 9") -> str:
    head = "" if n is None else f"State {n}: <{label}>\n"
    return f"{head}/\\ trOnGpu = << >>\n/\\ cursor = {cursor}\n/\\ req = <<\"new\">>\n/\\ tr = {tr}\n\n"


def _behaviour(*states: tuple[int, int]) -> str:
    body = "".join(
        _state(n, tr, cur, "Initial predicate" if n == 1 else "TraceNext line 9")
        for n, (tr, cur) in enumerate(states, start=1)
    )
    return (
        "TLC2 Version 2.18\nStarting...\nError: Invariant TrDelta_NoDoubleOwnership is violated.\n"
        "Error: The behavior up to this point is:\n" + body
        + "3 states generated, 3 distinct states found, 0 states left on queue.\n"
    )


def test_stop_point_is_the_last_state_of_the_behaviour() -> None:
    assert stop_point(_behaviour((2, 1), (2, 2), (2, 3))) == StopPoint(tr=2, cursor=3, depth=3)
    assert stop_point(_behaviour((12, 1))) == StopPoint(12, 1, 1)
    assert stop_point(_behaviour((1, 1), (1, 2))) == StopPoint(1, 2, 2)


def test_stop_point_of_a_deadlock_with_many_states() -> None:
    text = "Error: Deadlock reached.\nError: The behavior up to this point is:\n" + "".join(
        _state(n, 3, n) for n in range(1, 12)
    )
    assert stop_point(text) == StopPoint(3, 11, 11)


def test_stop_point_without_states_or_without_a_trace_is_none() -> None:
    # the marker with no state after it (a truncated log): no stop point, no IndexError
    assert stop_point("Error: The behavior up to this point is:\n") is None
    assert stop_point("Error: The behavior up to this point is:\nno states\n") is None
    # a state printed before the marker does not count
    assert stop_point(_state(4, 1, 1) + "Error: The behavior up to this point is:\n") is None
    assert stop_point("Model checking completed. No error has been found.\n") is None
    assert stop_point("") is None
    # the marker must start a line
    assert stop_point("x Error: The behavior up to this point is:\n" + _state(1, 1, 1)) is None


def test_stop_point_needs_both_bookkeeping_variables() -> None:
    no_cursor = "Error: The behavior up to this point is:\nState 1: <Init>\n/\\ tr = 1\n\n"
    no_tr = "Error: The behavior up to this point is:\nState 1: <Init>\n/\\ cursor = 1\n\n"
    assert stop_point(no_cursor) is None and stop_point(no_tr) is None
    # values must be whole integers on their own line
    spaced = "Error: The behavior up to this point is:\nState 1: <I>\n/\\ tr = 1x\n/\\ cursor = 1\n"
    assert stop_point(spaced) is None
    negative = "Error: The behavior up to this point is:\nState 2: <I>\n/\\ tr = -1\n/\\ cursor = 0\n"
    assert stop_point(negative) == StopPoint(-1, 0, 2)
    # only the last state counts: an earlier state's values are not read
    partial = (
        "Error: The behavior up to this point is:\n" + _state(1, 1, 1)
        + "State 2: <T>\n/\\ tr = 1\n\n"
    )
    assert stop_point(partial) is None


def test_stop_point_of_an_initial_state_violation() -> None:
    init = (
        "Error: Invariant TraceActionEnabled is violated by the initial state:\n"
        "/\\ cursor = 1\n/\\ tr = 3\n\n"
        "/\\ tr = 9\n/\\ cursor = 9\n"
    )
    assert stop_point(init) == StopPoint(3, 1, 1)  # the bare state, up to its blank line
    at_end = "Error: Invariant X is violated by the initial state:\n/\\ tr = 2\n/\\ cursor = 5"
    assert stop_point(at_end) == StopPoint(2, 5, 1)
    # past the blank line: not this state's
    cut = "Error: Invariant X is violated by the initial state:\n/\\ tr = 2\n\n/\\ cursor = 5\n"
    assert stop_point(cut) is None
    assert stop_point("Error: Invariant X is violated.\n/\\ tr = 2\n/\\ cursor = 5\n") is None


def test_stop_point_prefers_the_behaviour_over_an_initial_state_line() -> None:
    text = (
        "Error: Invariant X is violated by the initial state:\n/\\ tr = 7\n/\\ cursor = 7\n\n"
        + _behaviour((1, 1), (1, 2))
    )
    assert stop_point(text) == StopPoint(1, 2, 2)


# --- the module's parts --------------------------------------------------------------


def test_posted_values() -> None:
    assert gen.posted("copying", "e") == "Nested(e.post.copying, copying)"
    assert gen.posted("hostData", "TrStep") == "Nested(TrStep.post.hostData, hostData)"
    assert gen.posted("req", "e") == "TrApply(req, e.post.req)"
    assert gen.posted("down", "e") == "TrApply(down, e.post.down)"
    assert gen.posted("cursor", "e") == "e.post.cursor"  # not a change: the value


def test_diagnosed() -> None:
    assert gen.diagnosed(None) == "TrDiagnosed == cursor <= Len(Traces[tr])\n"
    assert gen.diagnosed(1) == "TrDiagnosed == cursor = 1\n"
    with pytest.raises(ValueError, match="1 or more, not 0"):
        gen.diagnosed(0)


def test_initial_state_sequences() -> None:
    ids = Ids(header(requests={"a": ["k1", "k2"], "b": ["k1"]}))
    assert gen.initial(ids) == (
        "TrInit ==\n"
        '    /\\ req = <<"new", "new">>\n'
        "    /\\ loc = <<NoLoc, NoLoc, NoLoc>>\n"
        "    /\\ prefix = <<{}, {}>>\n"
        "    /\\ imp = <<NoImp, NoImp>>\n"
        "    /\\ pg = <<NoPg, NoPg, NoPg>>\n"
    )


def test_cfg_options() -> None:
    plain = gen.cfg_text(["TypeOK", "NoLeaseLeaked"])
    assert plain.startswith("CONSTANTS\n    Requests <- TrRequests\n")
    assert plain.endswith(
        "INIT TraceInit\nNEXT TraceNext\nVIEW TrView\nINVARIANTS\n"
        "    TrDelta_TypeOK\n    NoLeaseLeaked\n"
    )
    assert "    NoSpill <- TrNoSpill\n" in plain
    no_view = gen.cfg_text(["TypeOK"], view=False)
    assert "VIEW" not in no_view and "NEXT TraceNext\nINVARIANTS\n" in no_view
    full = gen.cfg_text(["TypeOK"], diagnose=True, handoff=True)
    assert full.endswith(
        "INVARIANTS\n    TrDelta_TypeOK\n    TrHandoff\n"
        + "".join(f"    {n}\n" for n in gen.diagnostic_invariants())
    )
    assert gen.diagnostic_invariants() == [
        "TraceActionEnabled", *(f"TraceMatches_{v}" for v in POST_FIELDS),
    ]


def test_module_of_a_group_holds_every_trace_in_order(tmp_path: Path) -> None:
    case = next(c for c in CASES if c.name == "bug")
    trace = read_trace(case.trace_path)
    one = Trace(header=trace.header, steps=trace.steps[:1])
    text = gen.module_text([trace, one, Trace(header=trace.header, steps=())])
    ids = Ids(trace.header)
    steps = [encode.step(s, ids) for s in trace.steps]
    assert (
        "Traces == <<\n    <<\n        " + ",\n        ".join(steps) + ">>,\n    <<\n        "
        + steps[0] + ">>,\n    <<\n        >>\n>>\n"
    ) in text
    assert text.startswith(
        "---- MODULE HiSparseTrace ----\nEXTENDS HiSparse, TLC, Integers\n"
        "VARIABLES tr, cursor, trOnGpu, trOldKey, trSlots, trImpHost, trMirror\n"
    )
    assert text.endswith("\n====\n")
    assert f"\n{HANDOFF_INVARIANT} ==" not in text and "\nTrStart ==" not in text
    assert "\nTrInit ==\n" in text and "/\\ TrInit /\\ Init /\\ tr \\in" in text


# --- window states -------------------------------------------------------------------


def test_initial_window_state_is_the_spec_init() -> None:
    h = header(ranks=2, backing="shared", writer=1, host_blocks=2, gpu_blocks=2,
               requests={"a": ["k1"]})
    ids = Ids(h)
    state = States(h, ids).state("P")
    defs = dict(state.defs)
    assert defs["P_req"] == '<<"new">>' and defs["P_loc"] == "<<NoLoc>>"
    assert defs["P_gpuOwner"] == "<<NoPage, NoPage>>" and defs["P_hostState"] == '<<"free", "free">>'
    assert defs["P_copying_1"] == defs["P_copying_2"] == "<<Idle, Idle>>"
    assert "P_hostData_1" not in defs and defs["P_hostData_2"] == "<<Empty, Empty>>"
    assert defs["P_hostData"] == (
        "[x \\in {2} |-> CASE x = 2 -> [y \\in HostBlocks |-> P_hostData_2[y + -1]]]"
    )
    assert defs["P_lost"] == "[x \\in {1, 2} |-> CASE x = 1 -> FALSE [] x = 2 -> FALSE]"
    assert defs["P_up"] == "[x \\in {1, 2} |-> CASE x = 1 -> <<>> [] x = 2 -> <<>>]"
    assert state.predicate.startswith("    /\\ req = P_req\n    /\\ loc = P_loc\n")
    lines = state.predicate.removeprefix("    /\\ ").split("\n    /\\ ")
    assert [ln.split(" = ")[0] for ln in lines] == list(POST_FIELDS)
    assert "req = P_req" in lines and "gpuOwner = [x \\in GpuBlocks |-> P_gpuOwner[x + 1]]" in lines
    assert "hostKey = [x \\in HostBlocks |-> P_hostKey[x + -1]]" in lines
    assert "copying = P_copying" in lines and "down = P_down" in lines
    assert defs["P_copying"] == (
        "[x \\in {1, 2} |-> CASE x = 1 -> [y \\in HostBlocks |-> P_copying_1[y + -1]]"
        " [] x = 2 -> [y \\in HostBlocks |-> P_copying_2[y + -1]]]"
    )


def test_window_state_applies_each_change() -> None:
    h = header(ranks=2, backing="private", host_blocks=2, gpu_blocks=2,
               requests={"a": ["k1"], "b": ["k2"]})
    ids = Ids(h)
    states = States(h, ids)
    doc = {"kind": "step", "index": 1, "action": "WorkerComplete",
           "args": {"host_block": 1, "rank": 1},
           "post": {"copying": {"1": {"1": None, "0": "k2"}}, "hostData": {"1": {"1": "k1"}},
                    "wDone": {"1": [1]}, "waits": {}, "req": {"b": "running"}, "gpuOwner": {"1": ["b", 1]},
                    "hostKey": {"1": "k2"}}}
    states.apply(TraceStep.model_validate(doc))
    defs = dict(states.state("S").defs)
    assert defs["S_req"] == '<<"new", "running">>'
    assert defs["S_gpuOwner"] == "<<NoPage, 2>>" and defs["S_hostKey"] == "<<NoKey, 2>>"
    assert defs["S_copying_2"] == "<<2, Idle>>" and defs["S_copying_1"] == "<<Idle, Idle>>"
    assert defs["S_hostData_2"] == "<<Empty, 1>>" and defs["S_hostData_1"] == "<<Empty, Empty>>"
    assert defs["S_wDone"] == "[x \\in {1, 2} |-> CASE x = 1 -> {} [] x = 2 -> {3}]"


# --- check's bookkeeping (no TLC) ----------------------------------------------------


def test_window_size_edges() -> None:
    assert check.MIN_WINDOW == 300
    assert check.window_size(600, 2, None) == 300
    assert check.window_size(598, 2, None) == 598  # 299 a window: too short, whole
    assert check.window_size(599, 2, None) == 300
    assert check.window_size(601, 2, None) == 301
    assert check.window_size(900, 3, None) == 300
    assert check.window_size(10_000, 1, None) == 10_000
    assert check.window_size(10_000, 0, None) == 10_000
    assert check.window_size(56, 2, 0) == 56
    assert check.window_size(56, 2, 56) == 56 and check.window_size(56, 2, 57) == 56
    assert check.window_size(56, 2, 1) == 1
    with pytest.raises(ModelError, match="not -1"):
        check.window_size(56, 2, -1)


def test_reasons() -> None:
    assert check._reason("Deadlock", 3) == "the post-state matches no successor of the spec"
    assert check._reason("TraceActionEnabled", 3) == "the action is not enabled in the spec"
    assert check._reason("TraceMatches_loc", 3) == (
        "post-state of `loc` differs from every successor the spec allows"
    )
    assert check._reason("TypeOK", 0) == "invariant TypeOK is violated in the initial state"
    assert check._reason("TypeOK", 1) == (
        "invariant TypeOK is violated in the state after this step"
    )


def test_verdict_lines_and_results() -> None:
    V = check.FileVerdict
    assert V("t.jsonl", "rejected", 9, 4, "Arrive").line() == (
        "rejected: t.jsonl at step 4 (action Arrive)"
    )
    assert V("t.jsonl", "accepted", 9, bug="b").line() == (
        "accepted: t.jsonl [spec checked with injected bug b]"
    )
    assert V("t.jsonl", "rejected", 9, 1, "X", bug="b").line().endswith(
        "(action X) [spec checked with injected bug b]"
    )
    assert V("t.jsonl", "refused", 9).line() == "refused: t.jsonl"

    def result(*verdicts: Any) -> check.TraceCheckResult:
        files = [V(f"{n}", v, 1) for n, v in enumerate(verdicts)]
        return check.TraceCheckResult(
            all(v == "accepted" for v in verdicts), files, 0.0, 0, 0, 0, []
        )

    assert result("accepted", "accepted").result == "accepted"
    assert result("accepted", "rejected").result == "rejected"
    assert [f.path for f in result("rejected", "accepted", "rejected").rejected] == ["0", "2"]
    for other in ("refused", "error", "unchecked"):
        assert result("rejected", other).result == "error"
    assert result("rejected").to_json()["result"] == "rejected"
    assert result("accepted").to_json()["files"][0]["verdict"] == "accepted"


def test_merge_of_window_verdicts() -> None:
    V = check.FileVerdict
    ok, p = V("w", "accepted", 5), Path("t.jsonl")
    rej = V("w", "rejected", 9, 7, "Arrive", "why")
    assert check._merge(p, 9, [[ok], [ok]]) == V("t.jsonl", "accepted", 9)
    assert check._merge(p, 9, [[ok], [rej], None]) is rej
    assert check._merge(p, 9, [[ok], None, [rej]]) is None
    assert check._merge(p, 9, [[ok], [V("w", "error", 5)], [rej]]) is None
    assert check._merge(p, 9, [[V("w", "unchecked", 5)]]) is None


def test_groups_share_a_run_only_with_the_same_constants(tmp_path: Path) -> None:
    a, b = Trace(header=header()), Trace(header=header(gpu_blocks=4))
    c = Trace(header=header(requests={"b": ["k2", "k3"], "a": ["k1", "k2"]}))  # same, reordered
    groups = check._groups([Path("a"), Path("b"), Path("c")], [a, b, c], first=5)
    assert [(g.number, g.paths) for g in groups] == [
        (5, [Path("a"), Path("c")]), (6, [Path("b")]),
    ]
    assert groups[0].traces == [a, c]
    alone = groups[0].alone(1)
    assert (alone.number, alone.paths, alone.traces) == (5, [Path("c")], [c])
    assert (alone.start, alone.end, alone.offset, alone.whole) == (None, None, 0, 0)


def test_check_traces_refuses_before_tlc(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="no trace files"):
        check.check_traces([])
    path = tmp_path / "t.jsonl"
    write_trace(path, Trace(header=header(bug="double_allocation")))
    with pytest.raises(ModelError, match="jobs must be 1 or more, not 0"):
        check.check_traces([path], jobs=0)
    big = tmp_path / "big.jsonl"
    write_trace(big, Trace(header=header(gpu_blocks=5)))
    res = check.check_traces([path, big], limits=TINY)  # no TLC needed: all refused
    assert not res.accepted and res.result == "error" and res.tlc_runs == 0
    assert [(f.path, f.verdict, f.steps) for f in res.files] == [
        (str(path), "refused", 0), (str(big), "refused", 0),
    ]
    assert res.files[0].reason is not None and "--allow-bug" in res.files[0].reason
    assert res.files[1].reason == "header gpu_blocks=5 exceeds the limit of 4"
    assert (res.steps, res.longest, res.invariants, res.workdir, res.logs) == (0, 0, [], None, [])


# --- check's replay loop, with TLC's answers canned ----------------------------------


class _FakeTlc:
    """Stands in for ``run_tlc``: records what each run was given, answers in turn."""

    def __init__(self, answers: list[tuple[str, int]]) -> None:
        self.answers = answers
        self.seen: list[tuple[str, str, int | str]] = []

    def __call__(self, module: Path, cfg: Path, workdir: Path, workers: int | str,
                 **kw: Any) -> TlcResult:
        assert module.name == "HiSparseTrace.tla" and cfg.name == "HiSparseTrace.cfg"
        assert module.parent == cfg.parent == workdir
        self.seen.append((module.read_text(), cfg.read_text(), workers))
        text, code = self.answers.pop(0)
        log = workdir / "tlc.log"
        return TlcResult(module.name, cfg.name, [], 1.5, log, parse_output(text, code), text)


def _golden_copies(tmp_path: Path, n: int) -> list[Path]:
    src = next(c for c in CASES if c.name == "shared").trace_path
    paths = [tmp_path / f"t{i}.jsonl" for i in range(n)]
    for p in paths:
        p.write_bytes(src.read_bytes())
    return paths


_NO_TLC = cast(TlcInstall, object())  # never used: run_tlc is replaced
OK = ("Model checking completed. No error has been found.\n", 0)


def test_a_group_is_one_run_and_accepted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _FakeTlc([OK])
    monkeypatch.setattr(check, "run_tlc", fake)
    paths = _golden_copies(tmp_path, 2)
    res = check.check_traces(paths, install=_NO_TLC, jobs=1)
    assert res.accepted and res.result == "accepted" and res.tlc_runs == 1
    assert [(f.verdict, f.steps) for f in res.files] == [("accepted", 34)] * 2
    assert (res.steps, res.longest, res.tlc_seconds, res.workdir) == (68, 34, 1.5, None)
    (module, cfg, workers), = fake.seen
    assert workers == "auto"  # a group's traces fan out
    assert "TrDiagnosed == cursor <= Len(Traces[tr])" in module and "TrHandoff" not in cfg
    assert "TraceActionEnabled" not in cfg and "    TrDelta_TypeOK\n" in cfg


def _violation(name: str, tr: int, cursor: int, code: int = 12) -> tuple[str, int]:
    states = "".join(_state(n, tr, c) for n, c in enumerate(range(1, cursor + 1), start=1))
    head = "Error: Deadlock reached.\n" if name == "Deadlock" else (
        f"Error: Invariant {name} is violated.\n")
    return head + "Error: The behavior up to this point is:\n" + states, code


def test_an_invariant_rejects_its_trace_and_the_rest_run_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = _FakeTlc([_violation("TrDelta_NoDoubleOwnership", 2, 5), OK])
    monkeypatch.setattr(check, "run_tlc", fake)
    paths = _golden_copies(tmp_path, 3)
    trace = read_trace(paths[0])
    res = check.check_traces(paths, install=_NO_TLC, jobs=1)
    assert not res.accepted and res.result == "rejected" and res.tlc_runs == 2
    bad = res.files[1]
    assert (bad.path, bad.verdict, bad.step, bad.action, bad.steps) == (
        str(paths[1]), "rejected", 4, trace.steps[3].action, 34,
    )
    assert bad.reason == "invariant NoDoubleOwnership is violated in the state after this step"
    assert [f.verdict for f in res.files] == ["accepted", "rejected", "accepted"]
    assert res.workdir is not None and Path(res.workdir).is_dir()
    assert len(res.logs) == 1
    # the second run replays the two left
    assert fake.seen[1][0].count("\n    <<\n        [action") == 2


def test_a_deadlock_is_diagnosed_at_its_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = _FakeTlc([_violation("Deadlock", 1, 3, 11), _violation("TraceMatches_loc", 1, 3)])
    monkeypatch.setattr(check, "run_tlc", fake)
    (path,) = _golden_copies(tmp_path, 1)
    trace = read_trace(path)
    res = check.check_traces([path], install=_NO_TLC, jobs=1, window=0)
    (bad,) = res.files
    assert (bad.verdict, bad.step, bad.action) == ("rejected", 3, trace.steps[2].action)
    assert bad.reason == "post-state of `loc` differs from every successor the spec allows"
    assert res.tlc_runs == 2
    module, cfg, workers = fake.seen[1]
    assert workers == 1 and "TrDiagnosed == cursor = 3\n" in module
    assert cfg.endswith("".join(f"    {n}\n" for n in gen.diagnostic_invariants()))


def test_an_unexplained_failure_is_an_error_of_that_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = ("Error: TLC threw an unexpected exception.\n", 255)
    fake = _FakeTlc([broken, OK, broken])
    monkeypatch.setattr(check, "run_tlc", fake)
    paths = _golden_copies(tmp_path, 2)
    res = check.check_traces(paths, install=_NO_TLC, jobs=1)
    assert [f.verdict for f in res.files] == ["accepted", "error"]
    assert res.files[1].reason is not None
    assert res.files[1].reason.startswith("TLC could not replay the traces")
    assert res.result == "error" and res.tlc_runs == 3


def test_windows_run_each_and_merge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _FakeTlc([OK, OK, OK])
    monkeypatch.setattr(check, "run_tlc", fake)
    (path,) = _golden_copies(tmp_path, 1)
    res = check.check_traces([path], install=_NO_TLC, jobs=1, window=WINDOW_HI - WINDOW_LO)
    assert res.accepted and res.tlc_runs == 3
    assert [(f.verdict, f.steps) for f in res.files] == [("accepted", 34)]
    window = next(c for c in CASES if c.name == "window")
    assert fake.seen[1][0] == window.module_path.read_text()
    assert fake.seen[1][1] == window.cfg_path.read_text()
    assert all(w == 1 for _, _, w in fake.seen)
    # the first window starts at Init and must hand off; the last starts recorded, ends free
    first, last = fake.seen[0][0], fake.seen[2][0]
    assert "\nTrEnd ==" in first and "\nTrHandoff ==" in first and "\nTrStart ==" not in first
    assert "/\\ TrInit /\\ Init /\\ tr \\in" in first and "\nTrInit ==\n" in first
    assert "\nTrStart ==" in last and "\nTrEnd ==" not in last and "\nTrHandoff ==" not in last
    assert "/\\ TrStart /\\ tr \\in" in last and "\nTrInit ==\n" not in last
    assert "    TrHandoff\n" in fake.seen[0][1] and "TrHandoff" not in fake.seen[2][1]


def test_a_failed_handoff_replays_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _FakeTlc([_violation("TrHandoff", 1, 13), OK, OK, OK])
    monkeypatch.setattr(check, "run_tlc", fake)
    (path,) = _golden_copies(tmp_path, 1)
    res = check.check_traces([path], install=_NO_TLC, jobs=1, window=WINDOW_HI - WINDOW_LO)
    assert res.accepted and res.tlc_runs == 4
    whole = fake.seen[-1][0]
    assert "\nTrStart ==" not in whole and whole.count("[action |->") == 34
