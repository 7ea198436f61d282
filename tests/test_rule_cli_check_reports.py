"""Rule: ``hisparse check`` prints, writes and exits exactly as documented, whatever TLC
answered (``hisparse/cli.py``: the check and trace commands, their reports and exit codes).

TLC is replaced by stand-ins that return fixed reports (the model-checking tests run the
real one): the report's rows in order, the ``caught`` row of an injected bug before the
runs, each run's line, the counterexample and the logs; the JSON document; the exit code
of every verdict (0 ok or caught, 1 violation, rejected or not caught, 2 error); an error
of TLC or of a trace file as one line with an error document; and the flags refused in
combination. Without these, the whole non-TLC suite ran none of it: 67 mutants of
``cli.py`` were run by no test but the model-checking ones (the sampled whole-suite run,
docs/mutation-survivors.md; its survivor ``207:reorder:0`` printed ``runs:`` above the
``caught`` row).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import hisparse.cli as cli
from hisparse.bugs import BUGS
from hisparse.spec.trace import TraceFormatError
from hisparse.tlc import TlcError
from hisparse.tlc.check import CheckReport, RunSummary
from hisparse.tracecheck.check import FileVerdict, TraceCheckResult


def _run(module: str, violated: list[str], counterexample: list[str]) -> RunSummary:
    return RunSummary(module=module, cfg=f"MC_{module}.cfg",
                      result="violation" if violated else "ok", reason="", exit_code=0,
                      distinct_states=1234567, states_generated=9876543, depth=42,
                      seconds=12.34, invariants=["TypeOK"], properties=[],
                      violated=violated, log="", counterexample=counterexample)


def _report(**kw: Any) -> CheckReport:
    doc: dict[str, Any] = dict(
        model="ci", result="ok", reason="", distinct_states=1234567, states_generated=9876543,
        depth=42, seconds=12.34, invariants=["TypeOK", "NoLeak"], properties=["Drains"],
        tlc_version="2.18", violated=[], runs=[_run("HiSparse", [], [])],
    )
    doc.update(kw)
    return CheckReport(**doc)


def _check(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
           argv: list[str], answer: CheckReport | Exception) -> tuple[int, str, str, dict[str, Any]]:
    calls: list[dict[str, Any]] = []

    def check_model(model: str, **kw: Any) -> CheckReport:
        calls.append({"model": model, **kw})
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(cli, "check_model", check_model)
    code = cli.main(["check", *argv])
    out, err = capsys.readouterr()
    assert len(calls) == 1
    return code, out, err, calls[0]


OK_ROWS = """\
model       ci
result      OK
distinct    1,234,567
generated   9,876,543
depth       42
seconds     12.3
invariants  TypeOK, NoLeak
properties  Drains
tlc         2.18
violated    -
runs:
  HiSparse/MC_HiSparse.cfg                 ok           1,234,567 distinct    9,876,543 generated  depth 42      12.3 s
"""


def test_a_clean_check_prints_its_rows_writes_its_report_and_exits_0(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    out_json = tmp_path / "r.json"
    report = _report()
    code, out, err, call = _check(monkeypatch, capsys,
                                  ["--json", str(out_json), "--workers", "3", "--keep"], report)
    assert code == 0
    assert out == OK_ROWS
    assert err == "check: model ci\n"
    assert json.loads(out_json.read_text()) == json.loads(json.dumps(report.to_json()))
    assert (call["model"], call["inject"], call["workers"], call["keep"], call["echo"]) == \
        ("ci", None, 3, True, False)


def test_a_caught_injected_bug_is_said_before_the_runs_and_exits_0(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    bug = BUGS[0].name
    report = _report(result="violation", reason="invariant violated", violated=["NoLeak"],
                     injected=bug, caught_expected=True, workdir="/tmp/hisparse-x/check",
                     runs=[_run("HiSparse", ["NoLeak"], ["/\\ x = 1", "/\\ x = 2\n/\\ y = 3"])])
    code, out, _, call = _check(monkeypatch, capsys, ["--inject", bug, "--model", "small", "-v"],
                                report)
    assert code == 0 and (call["model"], call["inject"], call["echo"]) == ("small", bug, True)
    assert out == (
        f"model       ci (injected: {bug})\n"
        "result      VIOLATION  (invariant violated)\n"
        "distinct    1,234,567\n"
        "generated   9,876,543\n"
        "depth       42\n"
        "seconds     12.3\n"
        "invariants  TypeOK, NoLeak\n"
        "properties  Drains\n"
        "tlc         2.18\n"
        "violated    NoLeak\n"
        "caught      yes, as expected\n"
        "runs:\n"
        "  HiSparse/MC_HiSparse.cfg                 violation    1,234,567 distinct"
        "    9,876,543 generated  depth 42      12.3 s  violated NoLeak\n"
        "counterexample (HiSparse/MC_HiSparse.cfg), last states:\n"
        "  /\\ x = 1\n"
        "  /\\ x = 2\n"
        "  /\\ y = 3\n"
        "logs: /tmp/hisparse-x/check\n"
    )


def test_an_injected_bug_not_caught_is_said_and_exits_1(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    bug = BUGS[-1].name
    report = _report(injected=bug, caught_expected=False, tlc_version=None)
    code, out, _, _ = _check(monkeypatch, capsys, ["--inject", bug], report)
    assert code == 1
    rows = out.splitlines()
    assert rows[8:12] == ["tlc         ?", "violated    -",
                          "caught      NO: the expected check did not fire", "runs:"]


@pytest.mark.parametrize(("result", "code"), [("ok", 0), ("violation", 1), ("error", 2)])
def test_without_an_injected_bug_the_verdict_is_the_exit_code(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        result: str, code: int) -> None:
    reason = "" if result == "ok" else "because"
    got, out, _, _ = _check(monkeypatch, capsys, [], _report(result=result, reason=reason))
    assert got == code
    assert out.splitlines()[1] == ("result      OK" if result == "ok"
                                   else f"result      {result.upper()}  (because)")
    assert "caught" not in out


def test_a_tlc_error_leaves_an_error_document_and_one_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    out_json = tmp_path / "r.json"
    bug = BUGS[0].name
    code, out, err, _ = _check(monkeypatch, capsys,
                               ["--json", str(out_json), "--inject", bug],
                               TlcError("java is missing"))
    assert (code, out) == (2, "")
    assert err.splitlines() == [f"check: model ci with bug {bug}",
                                "hisparse: error: java is missing"]
    assert json.loads(out_json.read_text()) == {
        "result": "error", "reason": "java is missing", "model": "ci", "injected": bug}


def test_the_bug_list_is_one_aligned_line_per_bug(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check", "--list-bugs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(BUGS)
    width = max(len(b.name) for b in BUGS)
    cwidth = max(len(b.catches) for b in BUGS)
    for b, line in zip(BUGS, lines, strict=True):
        assert line == f"{b.name.ljust(width)}  {b.catches.ljust(cwidth)}  {b.summary}"


@pytest.mark.parametrize(("argv", "message"), [
    (["--jobs", "2"], "--jobs and --window only apply to --trace"),
    (["--window", "0"], "--jobs and --window only apply to --trace"),
    (["--allow-bug"], "--allow-bug only applies to --trace"),
])
def test_trace_flags_without_a_trace_are_refused(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        argv: list[str], message: str) -> None:
    monkeypatch.setattr(cli, "check_model", lambda *a, **k: pytest.fail("TLC was started"))
    assert cli.main(["check", *argv]) == 2
    out, err = capsys.readouterr()
    assert (out, err) == ("", f"hisparse: error: {message}\n")


# ---------------------------------------------------------------- check --trace


def _traces(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
            tmp_path: Path, argv: list[str],
            answer: TraceCheckResult | Exception) -> tuple[int, str, str, dict[str, Any]]:
    calls: list[dict[str, Any]] = []
    trace = tmp_path / "t.jsonl"
    trace.write_text("{}\n")

    def check_traces(paths: list[Path], **kw: Any) -> TraceCheckResult:
        calls.append({"paths": paths, **kw})
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(cli, "check_traces", check_traces)
    code = cli.main(["check", "--trace", str(trace), *argv])
    out, err = capsys.readouterr()
    assert len(calls) == 1 and [Path(p) for p in calls[0]["paths"]] == [trace]
    return code, out, err, calls[0]


def _result(files: list[FileVerdict], accepted: bool, workdir: str | None = None
            ) -> TraceCheckResult:
    return TraceCheckResult(accepted=accepted, files=files, tlc_seconds=7.25, tlc_runs=3,
                            steps=sum(f.steps for f in files), longest=max(f.steps for f in files),
                            invariants=["TypeOK"], workdir=workdir)


def test_accepted_traces_print_accepted_and_their_figures(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    out_json = tmp_path / "v.json"
    result = _result([FileVerdict("a.jsonl", "accepted", 40), FileVerdict("b.jsonl", "accepted", 60)],
                     accepted=True)
    code, out, err, call = _traces(monkeypatch, capsys, tmp_path,
                                   ["--jobs", "2", "--window", "0", "--json", str(out_json)],
                                   result)
    assert (code, out) == (0, "accepted\n")
    assert err.splitlines() == ["check: replaying 1 trace(s) through TLC ...",
                                "2 trace(s), 100 steps, longest 60; 3 TLC run(s), 7.2 s"]
    assert (call["jobs"], call["window"], call["keep"], call["allow_bug"]) == (2, 0, False, False)
    assert json.loads(out_json.read_text()) == json.loads(json.dumps(result.to_json()))


def test_a_rejected_trace_is_named_with_its_step_and_reason_and_exits_1(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    bug = BUGS[0].name
    result = _result([
        FileVerdict("a.jsonl", "accepted", 40),
        FileVerdict("b.jsonl", "rejected", 60, step=17, action="Retire", reason="no match"),
        FileVerdict("c.jsonl", "accepted", 10, bug=bug),
    ], accepted=False, workdir="/tmp/hisparse-y")
    code, out, err, call = _traces(monkeypatch, capsys, tmp_path, ["--allow-bug", "--keep"],
                                   result)
    assert code == 1 and (call["allow_bug"], call["keep"]) == (True, True)
    assert out == ("rejected: b.jsonl at step 17 (action Retire)\n"
                   "  reason: no match\n"
                   f"accepted: c.jsonl [spec checked with injected bug {bug}]\n")
    assert err.splitlines()[1:] == ["3 trace(s), 110 steps, longest 60; 3 TLC run(s), 7.2 s",
                                    "logs: /tmp/hisparse-y"]


def test_a_trace_without_a_verdict_exits_2(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    result = _result([FileVerdict("a.jsonl", "refused", 0, reason="declares bug x")],
                     accepted=False)
    code, out, _, _ = _traces(monkeypatch, capsys, tmp_path, [], result)
    assert (code, out) == (2, "refused: a.jsonl\n  reason: declares bug x\n")


@pytest.mark.parametrize("error", [TlcError("TLC died"),
                                   TraceFormatError(Path("t.jsonl"), 3, "bad step")])
def test_a_trace_check_error_is_one_line_and_an_error_document(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path, error: Exception) -> None:
    out_json = tmp_path / "v.json"
    code, out, err, _ = _traces(monkeypatch, capsys, tmp_path, ["--json", str(out_json)], error)
    assert (code, out) == (2, "")
    assert err.splitlines()[1:] == [f"hisparse: error: {error}"]
    assert json.loads(out_json.read_text()) == {"result": "error", "reason": str(error)}


def test_a_trace_with_an_injected_bug_flag_is_refused(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text("{}\n")
    monkeypatch.setattr(cli, "check_traces", lambda *a, **k: pytest.fail("TLC was started"))
    for flag in (["--inject", BUGS[0].name], ["--list-bugs"]):
        assert cli.main(["check", "--trace", str(trace), *flag]) == 2
        assert capsys.readouterr() == (
            "", "hisparse: error: --trace cannot be combined with --inject/--list-bugs\n")


def test_a_command_leaves_no_empty_scratch_folder(monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:
    # every temporary folder of a run lives under one hisparse-* folder, removed when
    # nothing was kept in it (cli.py:670:not:3 removed it only when something was)
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert cli.main(["check", "--list-bugs"]) == 0
    assert list(tmp_path.iterdir()) == []
    assert tempfile.tempdir == str(tmp_path)  # put back as it was


@pytest.mark.parametrize(("error", "code"), [("keyboard", 130), (15, 128 + 15), (2, 128 + 2)])
def test_an_interrupted_command_says_so_and_exits_128_plus_its_signal(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        error: Any, code: int) -> None:
    # a signal seen first by a helper thread is reported as the signal's exit code
    # (cli.py:690:arith:5 subtracted it)
    from hisparse.tlc.signals import Interrupted

    def interrupted(model: str, **kw: Any) -> CheckReport:
        raise KeyboardInterrupt if error == "keyboard" else Interrupted(error)

    monkeypatch.setattr(cli, "check_model", interrupted)
    assert cli.main(["check"]) == code
    assert capsys.readouterr().err.splitlines()[-1] == (
        "hisparse: interrupted; temporary folders removed")
