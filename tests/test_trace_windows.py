"""A long trace replayed in windows (marker ``tlc``): same verdict, same step, as whole.

Each window starts from the recorded state before its first step and must end on the
state the next one starts from (``TrHandoff``); ``hisparse/tracecheck/window.py`` says
why the verdicts agree. The traces are ``long_run``'s 56 steps (seven eight-step
cycles over every action kind a bug-free run takes), cut into windows of 20 steps.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hisparse.spec.trace import FORMAT
from hisparse.tlc import TlcInstall
from hisparse.tracecheck import check_traces, window
from tests.test_trace_check import hisparse, long_run

pytestmark = pytest.mark.tlc

WINDOW = 20  # 56 steps: windows 1-20, 21-40, 41-56


def doctored(tmp_path: Path, at: int = 30) -> Path:
    """Step ``at`` (a ConsumeMeta) claims g's bytes survived."""
    run = long_run(seed=4)
    step = run.steps[at - 1]
    assert step["action"] == "ConsumeMeta" and set(step["post"]["gpuData"].values()) == {
        "garbage"
    }
    step["post"]["gpuData"] = dict.fromkeys(step["post"]["gpuData"], "k1")
    return run.write(tmp_path / "doctored.jsonl")


def test_windows_accept_and_hand_off(tlc: TlcInstall, tmp_path: Path) -> None:
    path = long_run(seed=4).write(tmp_path / "long.jsonl")
    result = check_traces([path], install=tlc, jobs=2, window=WINDOW)
    assert result.accepted, result
    # three windows, no whole replay after them: every handoff state matched
    assert result.tlc_runs == 3
    assert [(f.verdict, f.steps) for f in result.files] == [("accepted", 56)]


@pytest.mark.parametrize(("at", "size"), [(30, WINDOW), (54, 10)])
def test_a_rejection_is_the_same_with_windows(
    tlc: TlcInstall, tmp_path: Path, at: int, size: int
) -> None:
    """The step finds no successor, so its window is replayed again to say why, from
    that window's first state (``_Group.alone``): the same reason as the whole trace's.
    Step 54 is in the last of windows of 10 steps, which starts mid-cycle (step 51),
    from a state that is not ``Init``.
    (kills hisparse/tracecheck/check.py:146:var:53, which re-ran the window from its last
    state: from ``Init`` in the last window, where step 51 has no successor)"""
    path = doctored(tmp_path, at)
    whole = check_traces([path], install=tlc, jobs=2, window=0)
    split = check_traces([path], install=tlc, jobs=2, window=size)
    (w,), (s,) = whole.files, split.files
    assert (w.verdict, w.step, w.action) == ("rejected", at, "ConsumeMeta"), w
    assert (s.verdict, s.step, s.action, s.reason, s.steps) == (
        w.verdict, w.step, w.action, w.reason, w.steps,
    )
    assert w.reason is not None and "gpuData" in w.reason
    assert s.line() == w.line() == f"rejected: {path} at step {at} (action ConsumeMeta)"


def test_a_failed_handoff_replays_the_trace_whole(
    tlc: TlcInstall, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If the recorded state at a cut were not TLC's (here: srcPin changes dropped), the
    first window's TrHandoff fails and the trace is replayed whole, as without windows."""
    apply = window.States.apply

    def lossy(self: window.States, step: object) -> None:
        apply(self, step)  # type: ignore[arg-type]
        self.flat["srcPin"] = ["FALSE"] * len(self.flat["srcPin"])

    monkeypatch.setattr(window.States, "apply", lossy)
    path = long_run(seed=4).write(tmp_path / "long.jsonl")
    result = check_traces([path], install=tlc, jobs=2, window=WINDOW)
    assert result.accepted, result
    assert result.tlc_runs > 3  # the windows, then the whole trace


def test_cli_jobs_checks_traces_in_parallel(tlc: TlcInstall, tmp_path: Path) -> None:
    a = long_run(seed=1, requests=3).write(tmp_path / "a.jsonl")
    b = long_run(seed=2, requests=4).write(tmp_path / "b.jsonl")
    report = tmp_path / "r.json"
    proc = hisparse("check", "--trace", str(a), str(b), "--jobs", "2", "--json", str(report))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(report.read_text())
    assert doc["result"] == "accepted" and doc["tlc_runs"] == 2  # two headers, two runs


def test_window_size() -> None:
    from hisparse.tracecheck.check import MIN_WINDOW, window_size

    assert window_size(2333, 2, None) == 1167  # one window per job
    assert window_size(2 * MIN_WINDOW, 2, None) == MIN_WINDOW
    assert window_size(2 * MIN_WINDOW - 2, 2, None) == 2 * MIN_WINDOW - 2  # too short: whole
    assert window_size(2333, 1, None) == 2333  # one job: whole
    assert window_size(56, 2, 0) == 56 and window_size(56, 2, 20) == 20


def test_integer_identities_are_one_to_one() -> None:
    """Pages, requests and keys get distinct numbers from 1; a page the header does not
    declare gets a number no page has (so a step reporting it matches nothing)."""
    from hisparse.spec.trace import TraceHeader
    from hisparse.tracecheck.ints import UNKNOWN_PAGE, Ids

    h = TraceHeader.model_validate(
        {"kind": "header", "format": FORMAT, "requests": {"a": ["k1", "k2"], "b": ["k2"]},
         "gpu_blocks": 1, "host_blocks": 1, "host_pool_bytes": 1, "host_block_bytes": 1}
    )
    ids = Ids(h)
    pages = [ids.page(r, i) for r, i in h.pages()]
    assert pages == [1, 2, 3] and ids.pages == 3
    assert [ids.request(r) for r in h.requests] == [1, 2]
    assert ids.page_keys == [[1, 2], [2]]
    assert ids.page("a", 3) == ids.page("c", 1) == UNKNOWN_PAGE < 0
    assert (ids.data("empty"), ids.data("garbage"), ids.data("k2")) == ("Empty", "Garbage", "2")
