"""``hisparse check`` end to end (marker ``tlc``); unit tests of the TLC output and cfg parsers.

The TLC tests never skip: without java, mvn or the pinned jar they fail, because CI
requires the model check to actually run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hisparse.bugs import BUGS, PROTOCOL_BUGS, SUFFIX_BUGS, InjectedBug, get_bug
from hisparse.tlc import TlcChecksumMismatch, TlcError, TlcInstall, TlcUnavailable
from hisparse.tlc import cfg as cfgfile
from hisparse.tlc.acquire import JAR_NAME, JAR_SHA256, require_tool, verify_jar
from hisparse.tlc.output import TEMPORAL, parse_output

# --- end to end (needs Java + TLC) -------------------------------------------------------


def hisparse(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the CLI in a subprocess so the real exit code is observed."""
    return subprocess.run(
        [sys.executable, "-m", "hisparse", *args], capture_output=True, text=True, check=False
    )


def check_json(tmp_path: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    out = tmp_path / "report.json"
    proc = hisparse("check", *args, "--json", str(out))
    assert out.is_file(), f"no JSON report; stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc.returncode, json.loads(out.read_text()), proc.stdout + proc.stderr


@pytest.mark.tlc
def test_check_ci_model_passes(tlc: TlcInstall, tmp_path: Path) -> None:
    code, report, text = check_json(tmp_path, "--model", "ci")
    assert report["result"] == "ok", text
    assert code == 0
    assert report["distinct_states"] > 0
    assert report["states_generated"] >= report["distinct_states"]
    assert report["invariants"], "the ci model checks no invariant"
    assert report["violated"] == []
    assert report["tlc_version"].startswith("2.18")
    assert report["model"] == "ci" and report["injected"] is None
    assert len(report["runs"]) >= 1 and all(r["result"] == "ok" for r in report["runs"])
    # progress: each TLC run is named when it starts and when it ends
    for run in report["runs"]:
        assert f"TLC {run['module']}/{run['cfg']} ..." in text, text
        assert f"TLC {run['module']}/{run['cfg']}: ok," in text, text


@pytest.mark.tlc
def test_list_bugs_matches_registry() -> None:
    proc = hisparse("check", "--list-bugs")
    assert proc.returncode == 0, proc.stderr
    rows = [line.split(None, 2) for line in proc.stdout.splitlines() if line.strip()]
    assert [(r[0], r[1], r[2]) for r in rows] == [(b.name, b.catches, b.summary) for b in BUGS]


# Each property bug, checked one property per run: every property its run refutes.
# An ended request that still holds a lease or an open transfer cannot retire, so the
# bugs that leave one behind for an ended request refute EndedRetired as well.
PROPERTY_BUG_FAILS = {
    "loss_path_ignores_gaps": {
        "TransfersComplete", "LeasesReleased", "AbortedFreed", "EndedRetired"
    },
    "batched_done_before_enqueued": {
        "TransfersComplete", "LeasesReleased", "AbortedFreed", "EndedRetired"
    },
    "abort_keeps_resident_blocks": {"AbortedFreed", "EndedRetired"},
    "retire_waits_for_host_pages": {"EndedRetired"},
    # an import left landing holds its host blocks (leased), and an aborted one its GPU
    # blocks, so that request never retires
    "import_done_unreported": {"ImportsEnd", "LeasesReleased", "AbortedFreed", "EndedRetired"},
}


def test_property_bug_fails_names_every_property_bug() -> None:
    assert set(PROPERTY_BUG_FAILS) == {b.name for b in BUGS if b.kind == "property"}


@pytest.mark.tlc
@pytest.mark.parametrize("bug", BUGS, ids=[b.name for b in BUGS])
def test_injected_bug_is_caught(tlc: TlcInstall, tmp_path: Path, bug: InjectedBug) -> None:
    code, report, text = check_json(tmp_path, "--model", bug.model, "--inject", bug.name)
    assert report["result"] == "violation", text
    assert code == 0, f"caught as expected must exit 0\n{text}"
    assert report["injected"] == bug.name
    assert bug.catches in report["violated"], text
    assert report["caught_expected"] is True
    # the counterexample is printed, not left in a log two folders down
    assert "counterexample (" in text and "State " in text, text
    assert any(r["counterexample"] for r in report["runs"] if r["violated"])
    # exactly the named check fired: a weakened or renamed one cannot hide behind another
    if bug.kind == "invariant":
        assert report["violated"] == [bug.catches], text
        assert [r["violated"] for r in report["runs"]] == [[bug.catches]]
    else:
        own = {r["cfg"]: r["violated"] for r in report["runs"]}
        assert own[f"MCInject_{bug.catches}.cfg"] == [bug.catches], text
        assert set(report["violated"]) == PROPERTY_BUG_FAILS[bug.name], text


@pytest.mark.tlc
def test_pd_model_passes(tlc: TlcInstall, tmp_path: Path) -> None:
    """The P/D import model (docs/pd-import.md): safety and liveness."""
    code, report, text = check_json(tmp_path, "--model", "pd", "--workers", "1")
    assert (code, report["result"]) == (0, "ok"), text
    assert [r["cfg"] for r in report["runs"]] == ["MC_pd.cfg", "MC_pd_live.cfg"]
    assert all(r["distinct_states"] > 0 and r["violated"] == [] for r in report["runs"])
    assert "ImportsEnd" in report["properties"] and "NoImportLeak" in report["invariants"]


@pytest.mark.tlc
@pytest.mark.parametrize("model", ["tp", "tpshared"])
def test_tensor_parallel_models_pass(tlc: TlcInstall, tmp_path: Path, model: str) -> None:
    """Two ranks, private pools (tp) or one shared pool (tpshared): safety and liveness."""
    code, report, text = check_json(tmp_path, "--model", model, "--workers", "1")
    assert (code, report["result"]) == (0, "ok"), text
    cfgs = [r["cfg"] for r in report["runs"]]
    assert cfgs == [f"MC_{model}.cfg", f"MC_{model}_live.cfg"], cfgs
    assert all(r["distinct_states"] > 0 and r["violated"] == [] for r in report["runs"])
    assert report["properties"], "no liveness property checked"


# The tensor-parallel bugs that are wrong with either backing: the shared pool's run
# catches them by the same name as the private one's (bug.model).
EITHER_BACKING = ["release_source_at_first_enqueued", "abort_frees_after_one_rank_done"]


@pytest.mark.tlc
@pytest.mark.parametrize("name", EITHER_BACKING)
def test_tensor_parallel_bug_caught_with_a_shared_pool_too(
    tlc: TlcInstall, tmp_path: Path, name: str
) -> None:
    bug = get_bug(name)
    assert bug.model == "tp"
    code, report, text = check_json(tmp_path, "--model", "tpshared", "--inject", name)
    assert (code, report["violated"], report["caught_expected"]) == (0, [bug.catches], True), text


def test_tensor_parallel_bugs_run_on_a_two_rank_model() -> None:
    tp = {b.name: b.model for b in PROTOCOL_BUGS if b.model not in ("small", "ci", "pd")}
    assert tp == {
        "release_source_at_first_enqueued": "tp",
        "publish_after_one_rank_done": "tp",
        "abort_frees_after_one_rank_done": "tp",
        "reader_skips_writer_event": "tpshared",
        "writer_skips_reader_done": "tpshared",
    }


# --- registry ----------------------------------------------------------------------------


def test_bug_registry_is_well_formed() -> None:
    names = [b.name for b in BUGS]
    # main's 16, five tensor-parallel bugs, four of the faulty channels (model ci), four
    # of the suffix rule's companion spec (model suffix), six of the P/D import (pd)
    assert len(names) == len(set(names)) == 35
    assert {b.name for b in BUGS if b.model == "pd"} == {
        "staging_unbounded", "retarget_on_retry", "release_before_mirror",
        "report_partial_page", "fail_keeps_host_blocks", "import_done_unreported",
    }
    assert {b.name for b in BUGS if b.model == "ci"} == {
        "worker_applies_replay", "worker_forgets_published", "worker_skips_gap",
        "loss_path_ignores_gaps",
    }
    assert {b.model for b in SUFFIX_BUGS} == {"suffix"}
    assert BUGS == PROTOCOL_BUGS + SUFFIX_BUGS
    assert all(b.kind in ("invariant", "property") for b in BUGS)


# --- acquisition errors ------------------------------------------------------------------


def test_missing_tool_is_typed_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "")
    with pytest.raises(TlcUnavailable, match="apt-get install openjdk-17-jre-headless maven"):
        require_tool("java")


def test_checksum_mismatch_is_typed_error(tmp_path: Path) -> None:
    jar = tmp_path / JAR_NAME
    jar.write_bytes(b"not a jar")
    with pytest.raises(TlcChecksumMismatch, match=JAR_SHA256):
        verify_jar(jar)


# --- output parser -----------------------------------------------------------------------

HEADER = """TLC2 Version 2.18 of 20 March 2023
Running breadth-first search Model-Checking with fp 1 and seed 2 with 2 workers on 2 cores.
Parsing file /w/MC_small.tla
Semantic processing of module MC_small
Starting... (2026-01-01 00:00:00)
Computing initial states...
"""

OK = (
    HEADER
    + """Finished computing initial states: 2 distinct states generated at 2026-01-01.
Model checking completed. No error has been found.
  Estimates of the probability that TLC did not check all reachable states
  calculated (optimistic):  val = 6.5E-19
1,234,567 states generated, 98,765 distinct states found, 0 states left on queue.
The depth of the complete state graph search is 17.
Finished in 03s at (2026-01-01 00:00:03)
"""
)

INVARIANT = (
    HEADER
    + """Error: Invariant NoDoubleOwnership is violated.
Error: The behavior up to this point is:
State 1: <Initial predicate>
/\\ x = 0

6 states generated, 5 distinct states found, 1 states left on queue.
The depth of the complete state graph search is 4.
"""
)

TEMPORAL_OUT = (
    HEADER
    + """Progress(4) at 2026-01-01: 16 states generated, 10 distinct states found, 0 states left on queue.
Checking temporal properties for the complete state space with 10 total distinct states
Error: Temporal properties were violated.

Error: The following behavior constitutes a counter-example:

State 1: <Initial predicate>
/\\ x = 0
16 states generated, 10 distinct states found, 0 states left on queue.
"""
)

PARSE_ERROR = """TLC2 Version 2.18 of 20 March 2023
***Parse Error***
Was expecting "Expression or Instance"
Encountered "Beginning of definition" at line 4, column 9 and token "=="

Residual stack trace follows:
Definition starting at line 4, column 1.

Fatal errors while parsing TLA+ spec in file Bad
"""

DEADLOCK = (
    HEADER
    + """Error: Deadlock reached.
Error: The behavior up to this point is:
State 1: <Initial predicate>
3 states generated, 3 distinct states found, 0 states left on queue.
"""
)


def test_parse_ok() -> None:
    out = parse_output(OK, 0)
    assert out.result == "ok"
    assert out.tlc_version == "2.18 of 20 March 2023"
    assert (out.states_generated, out.distinct_states, out.states_left) == (1234567, 98765, 0)
    assert out.depth == 17
    assert out.violated == []
    assert not out.parse_error  # only exit 150 or the parser's text says so (127:cmp:3)
    assert not parse_output(INVARIANT, 12).parse_error


def test_parse_invariant_violation() -> None:
    out = parse_output(INVARIANT, 12)
    assert out.result == "violation"
    assert out.violated == ["NoDoubleOwnership"]
    assert (out.states_generated, out.distinct_states, out.states_left) == (6, 5, 1)
    assert "NoDoubleOwnership" in out.reason


def test_parse_temporal_violation() -> None:
    out = parse_output(TEMPORAL_OUT, 13)
    assert out.result == "violation"
    assert out.violated == [TEMPORAL]
    assert out.distinct_states == 10


def test_parse_parse_error() -> None:
    out = parse_output(PARSE_ERROR, 150)
    assert out.result == "error"
    assert out.parse_error
    assert "line 4, column 9" in out.reason


def test_a_parse_error_is_quoted_without_its_stack_and_blank_lines() -> None:
    # the first lines of the complaint, "***" and "Residual stack" lines and blanks left
    # out (tlc/output.py:77:var:1 quoted them)
    out = parse_output(PARSE_ERROR, 150)
    assert out.messages[0] == (
        'Was expecting "Expression or Instance" | Encountered "Beginning of definition" at '
        'line 4, column 9 and token "==" | Definition starting at line 4, column 1. | '
        "Fatal errors while parsing TLA+ spec in file Bad")


def test_parse_exit_150_without_the_parsers_complaint() -> None:
    # exit 150 alone says parse error; with no parser text to quote, the reason is TLC's
    # own error line (tlc/output.py:75:reorder:0 read the complaint before finding it)
    out = parse_output("TLC2 Version 2.18\nError: something odd\n", 150)
    assert (out.result, out.parse_error, out.messages) == ("error", True, ["something odd"])
    assert out.reason == "TLA+ parse or semantic error: something odd"


def test_parse_deadlock() -> None:
    out = parse_output(DEADLOCK, 11)
    assert out.result == "violation"
    assert out.violated == ["Deadlock"]


def test_unknown_exit_code_is_error() -> None:
    assert parse_output("", 1).result == "error"
    assert parse_output(OK, 137).result == "error"
    # a shell reports a signal as 128+N; 128 itself is no signal (output.py:81:cmp:2)
    assert parse_output("", 137).reason.endswith("TLC was killed by signal 9")
    assert parse_output("", -15).reason.endswith("TLC was killed by signal 15")
    assert parse_output("", 128).reason.endswith("unexpected TLC exit code 128")
    assert parse_output("", 129).reason.endswith("TLC was killed by signal 1")


def test_killed_run_keeps_progress_figures() -> None:
    text = HEADER + (
        "Progress(17) at 2026-11-29 14:49:51: 4,786,823 states generated (822,629 s/min), "
        "1,348,235 distinct states found (223,636 ds/min), 644,509 states left on queue.\n"
    )
    out = parse_output(text, -15)
    assert out.result == "error" and "signal 15" in out.reason
    assert (out.states_generated, out.distinct_states, out.states_left) == (
        4786823,
        1348235,
        644509,
    )


def test_exit_zero_with_violation_text_is_not_ok() -> None:
    assert parse_output(INVARIANT, 0).result == "error"


# --- cfg parser --------------------------------------------------------------------------

CFG = """\\* safety model
CONSTANTS
    Bug <- MCBug
    Name = "INVARIANT in a string"
    Pages <- MCPages
SPECIFICATION Spec
SYMMETRY Sym
(* a block comment naming INVARIANT Fake *)
INVARIANT TypeOK
INVARIANTS
    NoDoubleOwnership NoLeaseLeaked
    \\* Commented
    HostPoolNotOvercommitted
PROPERTIES TransfersComplete
    LeasesReleased PROPERTY AbortedFreed
CHECK_DEADLOCK FALSE
"""


def test_cfg_sections() -> None:
    keywords = [s.keyword for s in cfgfile.parse_sections(CFG)]
    assert keywords == [
        "CONSTANTS",
        "SPECIFICATION",
        "SYMMETRY",
        "INVARIANT",
        "INVARIANTS",
        "PROPERTIES",
        "PROPERTY",
        "CHECK_DEADLOCK",
    ]


def test_cfg_names() -> None:
    assert cfgfile.invariants(CFG) == [
        "TypeOK",
        "NoDoubleOwnership",
        "NoLeaseLeaked",
        "HostPoolNotOvercommitted",
    ]
    assert cfgfile.properties(CFG) == ["TransfersComplete", "LeasesReleased", "AbortedFreed"]


def test_cfg_single_property_rewrite() -> None:
    text = cfgfile.with_only_property(cfgfile.rebind_bug(CFG, "InjectedBug"), "LeasesReleased")
    assert cfgfile.invariants(text) == []
    assert cfgfile.properties(text) == ["LeasesReleased"]
    assert "Bug <- InjectedBug" in text and "MCBug" not in text
    assert "SYMMETRY" in text and '"INVARIANT in a string"' in text


def test_cfg_rebind_requires_binding() -> None:
    with pytest.raises(TlcError, match="Bug <- MCBug"):
        cfgfile.rebind_bug('CONSTANTS Bug = "none"\n', "InjectedBug")
