"""The public trace format (spec/trace.py) and the generated docs, without TLC."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hisparse import docs
from hisparse.spec.trace import (
    FORMAT,
    OLD_FORMATS,
    SpillArgs,
    TraceFormatError,
    TraceVersionError,
    read_trace,
    trace_json_schema,
    write_trace,
)

JSON = dict[str, Any]

HEADER: JSON = {
    "kind": "header",
    "format": FORMAT,
    "requests": {"r1": ["k1"], "r2": ["k1"]},
    "gpu_blocks": 2,
    "host_blocks": 2,
    "host_pool_bytes": 5,
    "host_block_bytes": 2,
}

ARRIVE: JSON = {
    "kind": "step",
    "index": 1,
    "action": "Arrive",
    "args": {"request": "r1"},
    "post": {
        "req": {"r1": "running"},
        "loc": [[["r1", 1], ["gpu", 0]]],
        "gpuOwner": {"0": ["r1", 1]},
        "gpuData": {"0": "k1"},
    },
}

SPILL: JSON = {
    "kind": "step",
    "index": 2,
    "action": "StartSpill",
    "args": {"page": ["r1", 1], "host_block": 0},
    "post": {
        "hostState": {"0": "leased"},
        "hostKey": {"0": "k1"},
        "spill": {"0": {"src": 0, "page": ["r1", 1], "phase": "sent", "enq": [], "need": [0]}},
        "down": {"0": [{"src": 0, "dst": 0}]},
        "srcPin": {"0": True},
    },
}


def write_lines(path: Path, *lines: JSON | str) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def with_(base: JSON, **changes: Any) -> JSON:
    return {**json.loads(json.dumps(base)), **changes}


def test_round_trip(tmp_path: Path) -> None:
    trace = read_trace(write_lines(tmp_path / "t.jsonl", HEADER, ARRIVE, SPILL))
    assert [s.action for s in trace.steps] == ["Arrive", "StartSpill"]
    assert isinstance(trace.steps[1].args, SpillArgs)
    assert trace.steps[1].post.reported() == ["srcPin", "hostState", "hostKey", "spill", "down"]
    write_trace(tmp_path / "copy.jsonl", trace)
    assert read_trace(tmp_path / "copy.jsonl") == trace
    # unset post fields are left out, sentinels stay null
    line = json.loads((tmp_path / "copy.jsonl").read_text().splitlines()[1])
    assert line["post"] == ARRIVE["post"]


@pytest.mark.parametrize(
    ("lines", "line", "message"),
    [
        ([HEADER, "{not json"], 2, "not JSON"),
        ([ARRIVE], 1, "first line must be the header"),
        ([HEADER, with_(ARRIVE, action="Jump")], 2, "action"),
        ([HEADER, with_(ARRIVE, index=2)], 2, "step index 2, expected 1"),
        ([HEADER, ARRIVE, with_(SPILL, index=3)], 3, "step index 3, expected 2"),
        ([HEADER, with_(ARRIVE, args={"host_block": 0})], 2, "Arrive takes args"),
        ([HEADER, with_(ARRIVE, args={"request": "r9"})], 2, "unknown request"),
        ([HEADER, with_(ARRIVE, post={"req": ARRIVE["post"]["req"]})], 2, "must report"),
        (
            [HEADER, ARRIVE, with_(SPILL, args={"page": ["r1", 1], "host_block": 5})],
            3,
            "out of range",
        ),
        ([HEADER, with_(ARRIVE, extra=1)], 2, "extra"),
        ([HEADER, HEADER], 2, "second header"),
        ([with_(HEADER, requests={"none": ["k1"]})], 1, "sentinel"),
        ([with_(HEADER, requests={"r1": ["k 1"]})], 1, "pattern"),
        ([with_(HEADER, requests={"r1": []})], 1, "at least 1"),
        (
            [HEADER, with_(ARRIVE, post={**ARRIVE["post"], "gpuOwner": {"2": ["r1", 1]}})],
            2,
            "gpuOwner has 2 blocks",
        ),
        (
            [HEADER, with_(ARRIVE, post={**ARRIVE["post"], "gpuData": {"-1": "k1"}})],
            2,
            "greater than or equal to 0",
        ),
        (
            [HEADER, with_(ARRIVE, post={**ARRIVE["post"], "loc": [[["r1", 2], None]]})],
            2,
            "loc names an unknown page",
        ),
        (
            [HEADER, with_(ARRIVE, post={**ARRIVE["post"], "loc": [[["r1", 1], None]] * 2})],
            2,
            "loc lists a page twice",
        ),
        (
            [HEADER, with_(ARRIVE, post={**ARRIVE["post"], "req": {"r9": "running"}})],
            2,
            "req names an unknown request",
        ),
        (
            [HEADER, ARRIVE, with_(SPILL, post={**SPILL["post"], "hostKey": {"1": "k9"}})],
            3,
            "hostKey names an unknown key",
        ),
        (  # (trace.py:387:call:0 dropped this check)
            [HEADER, with_(ARRIVE, post={**ARRIVE["post"], "gpuData": {"0": "k9"}})],
            2,
            "data must be a key, empty or garbage",
        ),
    ],
    ids=[
        "malformed_json",
        "no_header",
        "unknown_action",
        "first_index",
        "gap",
        "wrong_args",
        "unknown_request",
        "missing_written_variable",
        "block_out_of_range",
        "extra_field",
        "two_headers",
        "sentinel_name",
        "bad_name",
        "no_pages",
        "change_block_out_of_range",
        "change_block_negative",
        "change_unknown_page",
        "change_page_twice",
        "change_unknown_request",
        "change_unknown_key",
        "change_unknown_data",
    ],
)
def test_malformed_trace_names_the_line(
    tmp_path: Path, lines: list[JSON | str], line: int, message: str
) -> None:
    path = write_lines(tmp_path / "bad.jsonl", *lines)
    with pytest.raises(TraceFormatError, match=message) as err:
        read_trace(path)
    assert err.value.line == line
    assert str(err.value).startswith(f"{path}:{line}:")


def test_only_changes_are_recorded(tmp_path: Path) -> None:
    # v2 records changed entries: Arrive names one of two GPU blocks, one of two requests
    trace = read_trace(write_lines(tmp_path / "t.jsonl", HEADER, ARRIVE))
    post = trace.steps[0].post
    assert post.gpuOwner == {0: ("r1", 1)} and post.req == {"r1": "running"}
    # an empty change is a report ("unchanged"), not a missing variable
    empty = with_(ARRIVE, post={**ARRIVE["post"], "gpuData": {}})
    assert read_trace(write_lines(tmp_path / "e.jsonl", HEADER, empty)).steps[0].post.gpuData == {}


@pytest.mark.parametrize("old", sorted(OLD_FORMATS))
def test_old_format_is_refused_by_name(tmp_path: Path, old: str) -> None:
    # a v1 trace's step lines no longer validate; the header says why before they are read
    v1_arrive = with_(ARRIVE, post={**ARRIVE["post"], "gpuOwner": [["r1", 1], None]})
    path = write_lines(tmp_path / "old.jsonl", with_(HEADER, format=old), v1_arrive)
    with pytest.raises(TraceVersionError, match="no longer read") as err:
        read_trace(path)
    assert err.value.line == 1
    assert old in str(err.value) and FORMAT in str(err.value)
    assert isinstance(err.value, TraceFormatError)


def test_unknown_format_is_refused(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "future.jsonl", with_(HEADER, format="hisparse-trace/9"))
    with pytest.raises(TraceFormatError, match="format") as err:
        read_trace(path)
    assert not isinstance(err.value, TraceVersionError)


def test_empty_file_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("")
    with pytest.raises(TraceFormatError, match="no header"):
        read_trace(path)


def test_schema_is_a_union_on_kind() -> None:
    schema = trace_json_schema()
    assert schema["discriminator"]["propertyName"] == "kind"
    assert set(schema["discriminator"]["mapping"]) == {"header", "step"}


def test_generated_docs_are_in_sync() -> None:
    assert docs.stale() == [], "run `hisparse docs` and commit docs/"
    committed = json.loads((docs.repo_root() / "docs/trace.schema.json").read_text())
    assert committed == trace_json_schema()


def test_the_docs_command_checks_and_writes_a_checkout_and_refuses_a_wheel(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    # an empty checkout: every generated file is stale, written once, then fresh
    # (cli.py:311:cmp:3 refused every checkout as a wheel; the wheel test ran the other side)
    import hisparse.cli as cli

    monkeypatch.setattr(cli.docs, "checkout_root", lambda: tmp_path)
    files = list(docs.GENERATED)  # (in the order the command goes)
    assert cli.main(["docs", "--check"]) == 1
    assert capsys.readouterr().out.splitlines() == [f"stale: {f}" for f in files]
    assert cli.main(["docs"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"wrote {f}" for f in files]
    for f in files:
        assert (tmp_path / f).read_text(encoding="utf-8") == docs.GENERATED[f]()
    assert cli.main(["docs", "--check"]) == 0 and capsys.readouterr().out == ""
    monkeypatch.setattr(cli.docs, "checkout_root", lambda: None)
    assert cli.main(["docs"]) == 2
    assert "installed from a wheel" in capsys.readouterr().err


@pytest.mark.parametrize(("action", "args", "post"), [
    ("StartSpill", {"page": ["r1", 9], "host_block": 0}, dict(SPILL["post"])),
    ("CopyToHost", {"page": ["r1", 9]}, {"hostData": {}, "pg": []}),
    ("MirrorPage", {"page": ["r2", 2]}, {"gpuData": {}}),
])
def test_a_step_naming_a_page_outside_the_header_is_refused(
        tmp_path: Path, action: str, args: JSON, post: JSON) -> None:
    # every kind of page argument is checked, an import page's too (trace.py:319:drop:1
    # dropped PageArgs from the check)
    step = {"kind": "step", "index": 1, "action": action, "args": args, "post": post}
    path = write_lines(tmp_path / "bad.jsonl", HEADER, step)
    with pytest.raises(TraceFormatError, match=r"unknown page \['r\d', \d\]$") as err:
        read_trace(path)
    assert err.value.line == 2


def test_a_trace_that_is_not_there_cannot_be_read_at_line_0(tmp_path: Path) -> None:
    # (trace.py:401:raise:8: no test read a missing file)
    missing = tmp_path / "missing.jsonl"
    with pytest.raises(TraceFormatError, match=r"cannot read: .*No such file") as err:
        read_trace(missing)
    assert err.value.line == 0 and str(err.value).startswith(f"{missing}: cannot read: ")  # (line 0: no line is named)


def test_a_trace_path_that_cannot_be_opened_is_an_error_not_an_empty_trace(
        tmp_path: Path) -> None:
    # a folder where a file was meant (trace.py:429:raise:9 read no line from it and
    # called the trace empty)
    with pytest.raises(TraceFormatError, match=r"cannot read: .*[Ii]s a directory") as err:
        read_trace(tmp_path)
    assert err.value.line == 0
