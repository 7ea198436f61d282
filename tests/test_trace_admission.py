"""Trace validation that cannot be fooled: the first step, injected bugs, header bounds,
and one verdict per file even when TLC fails on one of them.

Tests that reach TLC carry the ``tlc`` marker; header refusals never start it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from hisparse.spec.record import machine_trace
from hisparse.spec.trace import FORMAT, write_trace
from hisparse.tlc import TlcInstall
from hisparse.tracecheck import check_traces
from hisparse.tracecheck import module as gen
from hisparse.tracecheck.admit import TLC_INT_MAX, HeaderLimits, header_problem
from tests.protocol_helpers import make_machine
from tests.test_trace_check import ONE_PAGE, Run, good_run, header, sent


def hisparse(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hisparse", *args], capture_output=True, text=True, check=False
    )


def bad_first_step() -> Run:
    """Arrive's post claims r1's bytes landed in GPU block 1 while the table says block 0."""
    run = good_run()
    run.steps[0]["post"]["gpuData"] = {"1": "k1"}
    return run


def header_only(tmp_path: Path, name: str, **fields: object) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({**header(ONE_PAGE), **fields}) + "\n")
    return path


def abort_keeps_blocks_trace(tmp_path: Path, declared: str) -> Path:
    """A run recorded with ``abort_keeps_resident_blocks`` on, its header saying ``declared``."""
    m = make_machine("abort_keeps_resident_blocks", record=True)
    m.Arrive("r0")
    m.Abort("r0")
    trace = machine_trace(m)
    path = tmp_path / f"abort-{declared}.jsonl"
    write_trace(
        path,
        trace.model_copy(update={"header": trace.header.model_copy(update={"bug": declared})}),
    )
    return path


# --- the first step --------------------------------------------------------------------------


@pytest.mark.tlc
def test_bad_first_step_is_a_rejection_at_step_one(tlc: TlcInstall, tmp_path: Path) -> None:
    bad = bad_first_step().write(tmp_path / "bad.jsonl")
    good = good_run().write(tmp_path / "good.jsonl")
    result = check_traces([good, bad], install=tlc)
    verdicts = {Path(f.path).name: f for f in result.files}
    assert verdicts["good.jsonl"].verdict == "accepted"
    v = verdicts["bad.jsonl"]
    assert (v.verdict, v.step, v.action) == ("rejected", 1, "Arrive"), v
    assert v.reason is not None and "`gpuData`" in v.reason
    assert result.result == "rejected"


@pytest.mark.tlc
def test_cli_names_step_one(tlc: TlcInstall, tmp_path: Path) -> None:
    bad = bad_first_step().write(tmp_path / "bad.jsonl")
    proc = hisparse("check", "--trace", str(bad))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[0] == f"rejected: {bad} at step 1 (action Arrive)"


# --- injected bugs in the header ---------------------------------------------------------------


def test_bug_header_is_refused_without_the_flag(tmp_path: Path) -> None:
    path = abort_keeps_blocks_trace(tmp_path, "abort_keeps_resident_blocks")
    result = check_traces([path])
    (v,) = result.files
    assert v.verdict == "refused" and v.step is None
    assert v.reason is not None and "abort_keeps_resident_blocks" in v.reason
    assert "--allow-bug" in v.reason
    assert result.tlc_runs == 0 and result.result == "error" and not result.accepted


def test_unknown_bug_is_refused_even_when_bugs_are_allowed(tmp_path: Path) -> None:
    path = header_only(tmp_path, "h.jsonl", bug="no_such_bug")
    (v,) = check_traces([path], allow_bug=True).files
    assert v.verdict == "refused"
    assert v.reason is not None and "unknown bug 'no_such_bug'" in v.reason


@pytest.mark.tlc
def test_bug_header_with_the_flag_is_checked_and_says_so(tlc: TlcInstall, tmp_path: Path) -> None:
    buggy = abort_keeps_blocks_trace(tmp_path, "abort_keeps_resident_blocks")
    result = check_traces([buggy], install=tlc, allow_bug=True)
    (v,) = result.files
    assert (v.verdict, v.bug) == ("accepted", "abort_keeps_resident_blocks")
    assert v.line().endswith("[spec checked with injected bug abort_keeps_resident_blocks]")
    # the same run declared bug-free is not a behaviour of the spec
    honest = abort_keeps_blocks_trace(tmp_path, "none")
    (v,) = check_traces([honest], install=tlc).files
    assert (v.verdict, v.bug) == ("rejected", None)
    assert (v.step, v.action) == (2, "Abort")


@pytest.mark.tlc
def test_cli_allow_bug(tlc: TlcInstall, tmp_path: Path) -> None:
    buggy = abort_keeps_blocks_trace(tmp_path, "abort_keeps_resident_blocks")
    proc = hisparse("check", "--trace", str(buggy))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[0] == f"refused: {buggy}"
    report = tmp_path / "r.json"
    proc = hisparse("check", "--trace", str(buggy), "--allow-bug", "--json", str(report))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines() == [
        "accepted",
        f"accepted: {buggy} [spec checked with injected bug abort_keeps_resident_blocks]",
    ]
    doc = json.loads(report.read_text())
    assert doc["result"] == "accepted" and doc["files"][0]["bug"] == "abort_keeps_resident_blocks"


def test_allow_bug_needs_trace() -> None:
    proc = hisparse("check", "--allow-bug")
    assert proc.returncode == 2 and "--allow-bug only applies to --trace" in proc.stderr


# --- bounded constants -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"gpu_blocks": 10**18}, "gpu_blocks=1000000000000000000 exceeds"),
        ({"host_blocks": (1 << 16) + 1}, "host_blocks=65537 exceeds"),
        ({"host_pool_bytes": TLC_INT_MAX}, "32-bit"),
        ({"host_block_bytes": 2**40}, "32-bit"),
    ],
)
def test_absurd_constants_are_refused_before_tlc(
    tmp_path: Path, fields: dict[str, int], words: str
) -> None:
    path = header_only(tmp_path, "h.jsonl", **fields)
    t0 = time.monotonic()
    result = check_traces([path])
    assert time.monotonic() - t0 < 5  # refused from the header, nothing was built
    (v,) = result.files
    assert v.verdict == "refused" and v.reason is not None and words in v.reason
    assert result.tlc_runs == 0


def test_header_limits_are_inclusive() -> None:
    from hisparse.spec.trace import TraceHeader

    limits = HeaderLimits(blocks=4, requests=2, pages=3, bytes=10)

    def h(**kw: object) -> TraceHeader:
        doc = {**header({"a": ["k"], "b": ["k", "l"]}), **kw}
        return TraceHeader.model_validate(doc)

    assert header_problem(h(gpu_blocks=4, host_blocks=4, host_pool_bytes=8, host_block_bytes=2),
                          allow_bug=False, limits=limits) is None
    for kw in ({"gpu_blocks": 5}, {"host_blocks": 5}, {"host_pool_bytes": 9}):
        assert header_problem(h(**kw), allow_bug=False, limits=limits) is not None
    three = TraceHeader.model_validate({**header({"a": ["k"], "b": ["k"], "c": ["k"]})})
    assert "3 requests" in (header_problem(three, allow_bug=False, limits=limits) or "")
    many = TraceHeader.model_validate({**header({"a": ["k", "l"], "b": ["k", "l"]})})
    assert "4 pages" in (header_problem(many, allow_bug=False, limits=limits) or "")
    assert header_problem(h(bug="round_up_pool"), allow_bug=True, limits=limits) is None
    assert header_problem(h(bug="round_up_pool"), allow_bug=False, limits=limits) is not None


# --- one verdict per file ------------------------------------------------------------------------


@pytest.mark.tlc
def test_tlc_failure_on_one_file_spares_the_others(
    tlc: TlcInstall, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module TLC cannot parse whenever the two-step trace is in it: only that file errs."""
    real = gen.module_text

    def poisoned(traces: list[object], **kw: Any) -> str:
        text = real(traces, **kw)  # type: ignore[arg-type]
        if any(len(t.steps) == 2 for t in traces):  # type: ignore[attr-defined]
            text = text.replace("\n====\n", "\nBroken == (\n====\n")
        return text

    monkeypatch.setattr(gen, "module_text", poisoned)
    good = good_run().write(tmp_path / "good.jsonl")
    poison = sent(Run(ONE_PAGE)).write(tmp_path / "poison.jsonl")
    bad = good_run(consume_gpu_data="k1").write(tmp_path / "bad.jsonl")
    other = abort_keeps_blocks_trace(tmp_path, "round_up_pool")  # refused: not allowed
    result = check_traces([good, poison, bad, other], install=tlc)
    verdicts = {Path(f.path).name: (f.verdict, f.step) for f in result.files}
    assert verdicts == {
        "good.jsonl": ("accepted", None),
        "poison.jsonl": ("error", None),
        "bad.jsonl": ("rejected", 6),
        "abort-round_up_pool.jsonl": ("refused", None),
    }
    err = next(f for f in result.files if f.verdict == "error")
    assert err.reason is not None and "TLC could not replay" in err.reason
    assert result.result == "error"


def test_cli_refuses_an_old_format_trace(tmp_path: Path) -> None:
    # a v1 trace (full post-states) next to a good current one: exit 2 naming the old file and
    # both versions, before TLC starts (no TLC needed)
    good = good_run().write(tmp_path / "good.jsonl")
    old = tmp_path / "old.jsonl"
    lines = good.read_text().splitlines()
    v1 = json.loads(lines[0]) | {"format": "hisparse-trace/1"}
    old.write_text("\n".join([json.dumps(v1), *lines[1:]]) + "\n")
    proc = hisparse("check", "--trace", str(good), str(old))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"{old}:1: trace format 'hisparse-trace/1' is no longer read" in proc.stderr
    assert f"'{FORMAT}'" in proc.stderr and "record the run again" in proc.stderr
