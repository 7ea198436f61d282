"""Trace validation with TLC (marker ``tlc``): hand-built traces, accepted and doctored.

The post-states below are computed by hand from the action definitions in
``tla/HiSparse.tla``; ``Run`` writes each as the trace format does, as its change from
the state before (changed entries of the function-valued variables, whole sets and
sequences). An accepted trace also shows that the ``:>``/``@@`` encoding of every
variable (``req``, ``prefix``, the block maps, records, sets, sequences) rebuilds the
value the spec builds: ``MatchPost`` compares all fifteen of them with ``=``.
"""

from __future__ import annotations

import copy
import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hisparse.spec.catalogue import ACTIONS
from hisparse.spec.trace import FORMAT, WRITES, Trace, TraceHeader, TraceStep, write_trace
from hisparse.tlc import TlcInstall
from hisparse.tracecheck import check_traces

pytestmark = pytest.mark.tlc

JSON = dict[str, Any]


def header(requests: dict[str, list[str]]) -> JSON:
    return {
        "kind": "header",
        "format": FORMAT,
        "requests": requests,
        "gpu_blocks": 2,
        "host_blocks": 2,
        "host_pool_bytes": 5,
        "host_block_bytes": 2,
    }


BLOCK_MAPS = {"gpuOwner", "srcPin", "hostState", "hostKey", "spill", "gpuData"}
# One rank: the hand-built state holds rank 0's value of each rank-indexed variable.
RANK_BLOCK_MAPS = {"copying", "hostData"}
RANKED = {"down", "up", "waits", "wEnq", "wDone"}


def change(var: str, old: Any, new: Any) -> Any:
    """The trace format's record of ``var`` going from ``old`` to ``new`` (full values)."""
    if var in BLOCK_MAPS:
        return {str(i): v for i, (o, v) in enumerate(zip(old, new, strict=True)) if o != v}
    if var in RANK_BLOCK_MAPS:
        entries = change("gpuOwner", old, new)
        return {"0": entries} if entries else {}
    if var in RANKED:
        return {"0": new} if new != old else {}
    if var in ("req", "prefix"):
        return {k: v for k, v in new.items() if old.get(k) != v}
    if var == "loc":
        before = {tuple(p): w for p, w in old}
        return [[p, w] for p, w in new if before[tuple(p)] != w]
    return new


class Run:
    """A trace being written by hand: each step states the variables it changes.

    The post of a step is every variable the action writes, recorded as its change
    from the previous state; variables the step leaves alone carry over.
    """

    def __init__(self, requests: dict[str, list[str]]) -> None:
        self.header = header(requests)
        pages = [[r, i] for r, ks in requests.items() for i in range(1, len(ks) + 1)]
        keys = dict.fromkeys(k for ks in requests.values() for k in ks)
        self.state: JSON = {
            "req": dict.fromkeys(requests, "new"),
            "loc": [[p, None] for p in pages],
            "gpuOwner": [None, None],
            "srcPin": [False, False],
            "hostState": ["free", "free"],
            "hostKey": [None, None],
            "prefix": {k: [] for k in keys},
            "spill": [None, None],
            "down": [],
            "up": [],
            "copying": [None, None],
            "waits": [],
            "wEnq": [],
            "wDone": [],
            "gpuData": ["empty", "empty"],
            "hostData": ["empty", "empty"],
        }
        self.steps: list[JSON] = []

    def step(self, action: str, args: JSON, **changes: Any) -> Run:
        before = copy.deepcopy(self.state)
        self.state.update(copy.deepcopy(changes))
        post = {
            v: change(v, before[v], copy.deepcopy(self.state[v]))
            for v in WRITES[action] | set(changes)
        }
        index = len(self.steps) + 1
        if ACTIONS[action].ranked and "rank" not in args:
            args = {**args, "rank": 0}
        self.steps.append(
            {"kind": "step", "index": index, "action": action, "args": args, "post": post}
        )
        return self

    def set_loc(self, request: str, where: list[Any] | None) -> list[Any]:
        return [[p, where if p[0] == request else w] for p, w in self.state["loc"]]

    def trace(self) -> Trace:
        return Trace(
            header=TraceHeader.model_validate(self.header),
            steps=tuple(TraceStep.model_validate(s) for s in self.steps),
        )

    def write(self, path: Path) -> Path:
        write_trace(path, self.trace())
        return path


def at(values: list[Any], i: int, value: Any) -> list[Any]:
    out = list(values)
    out[i] = value
    return out


ONE_PAGE = {"r1": ["k1"], "r2": ["k1"]}
SPILLING = {"src": 0, "page": ["r1", 1], "phase": "sent", "enq": [], "need": [0]}


def sent(run: Run) -> Run:
    """Arrive r1 on g0, spill (r1,1) to h0 (steps 1-2)."""
    return run.step(
        "Arrive",
        {"request": "r1"},
        req={"r1": "running", "r2": "new"},
        loc=[[["r1", 1], ["gpu", 0]], [["r2", 1], None]],
        gpuOwner=[["r1", 1], None],
        gpuData=["k1", "empty"],
    ).step(
        "StartSpill",
        {"page": ["r1", 1], "host_block": 0},
        hostState=["leased", "free"],
        hostKey=["k1", None],
        spill=[SPILLING, None],
        down=[{"src": 0, "dst": 0}],
        srcPin=[True, False],
    )


def spilled(run: Run) -> Run:
    """Steps 1-2, then the worker enqueues the copy (step 3)."""
    return sent(run).step(
        "WorkerEnqueue", {"src": 0, "dst": 0}, down=[], copying=["k1", None], wEnq=[0]
    )


def good_run(*, consume_gpu_data: str = "garbage") -> Run:
    """The hand-built behaviour: spill, batched acks, publish, prefix hit, evict (10 steps)."""
    return (
        spilled(Run(ONE_PAGE))
        .step(
            "WorkerComplete",
            {"host_block": 0},
            hostData=["k1", "empty"],
            copying=[None, None],
            wDone=[0],
        )
        .step("WorkerReport", {}, up=[{"enq": [0], "done": [0]}], wEnq=[], wDone=[])
        # enqueued then completed in one meta: table entry moves to h0, g0 goes back to
        # HMA (garbage), the page is published and the destination lease released
        .step(
            "ConsumeMeta",
            {},
            loc=[[["r1", 1], ["host", 0]], [["r2", 1], None]],
            gpuOwner=[None, None],
            gpuData=[consume_gpu_data, "empty"],
            srcPin=[False, False],
            spill=[None, None],
            hostState=["valid", "free"],
            prefix={"k1": [0]},
            up=[],
        )
        .step(
            "Finish",
            {"request": "r1"},
            req={"r1": "finished", "r2": "new"},
            loc=[[["r1", 1], None], [["r2", 1], None]],
        )
        # prefix hit: r2's only page is served from h0, no GPU block is taken
        .step(
            "Arrive",
            {"request": "r2"},
            req={"r1": "finished", "r2": "running"},
            loc=[[["r1", 1], None], [["r2", 1], ["host", 0]]],
        )
        .step(
            "Finish",
            {"request": "r2"},
            req={"r1": "finished", "r2": "finished"},
            loc=[[["r1", 1], None], [["r2", 1], None]],
        )
        .step(
            "EvictHost",
            {"host_block": 0},
            hostState=["free", "free"],
            hostKey=[None, None],
            prefix={"k1": []},
            hostData=["garbage", "empty"],
        )
    )


def publish_before_completed() -> Run:
    """Only the enqueued ack is reported, yet ConsumeMeta claims the page was published."""
    return (
        spilled(Run(ONE_PAGE))
        .step("WorkerReport", {}, up=[{"enq": [0], "done": []}], wEnq=[])
        .step(
            "ConsumeMeta",
            {},
            loc=[[["r1", 1], ["host", 0]], [["r2", 1], None]],
            gpuOwner=[None, None],
            gpuData=["garbage", "empty"],
            srcPin=[False, False],
            spill=[None, None],
            hostState=["valid", "free"],
            prefix={"k1": [0]},
            up=[],
        )
    )


def complete_before_enqueue() -> Run:
    """WorkerComplete of h0 while its copy is not in the stream (not enabled)."""
    return sent(Run(ONE_PAGE)).step(
        "WorkerComplete",
        {"host_block": 0},
        hostData=["k1", "empty"],
        copying=[None, None],
        wDone=[0],
    )


def cycle(run: Run, r: str, g: int, h: int) -> None:
    """Eight steps for request ``r``: arrive on g, spill to h, acks, finish, evict h."""
    s = run.state
    run.step(
        "Arrive",
        {"request": r},
        req={**s["req"], r: "running"},
        loc=run.set_loc(r, ["gpu", g]),
        gpuOwner=at(s["gpuOwner"], g, [r, 1]),
        gpuData=at(s["gpuData"], g, "k1"),
    )
    run.step(
        "StartSpill",
        {"page": [r, 1], "host_block": h},
        hostState=at(s["hostState"], h, "leased"),
        hostKey=at(s["hostKey"], h, "k1"),
        spill=at(s["spill"], h, {**SPILLING, "src": g, "page": [r, 1]}),
        down=[{"src": g, "dst": h}],
        srcPin=at(s["srcPin"], g, True),
    )
    run.step(
        "WorkerEnqueue", {"src": g, "dst": h}, down=[], copying=at(s["copying"], h, "k1"), wEnq=[h]
    )
    run.step(
        "WorkerComplete",
        {"host_block": h},
        hostData=at(s["hostData"], h, "k1"),
        copying=at(s["copying"], h, None),
        wDone=[h],
    )
    run.step("WorkerReport", {}, up=[{"enq": [h], "done": [h]}], wEnq=[], wDone=[])
    run.step(
        "ConsumeMeta",
        {},
        loc=run.set_loc(r, ["host", h]),
        gpuOwner=at(s["gpuOwner"], g, None),
        gpuData=at(s["gpuData"], g, "garbage"),
        srcPin=at(s["srcPin"], g, False),
        spill=at(s["spill"], h, None),
        hostState=at(s["hostState"], h, "valid"),
        prefix={"k1": [h]},
        up=[],
    )
    run.step("Finish", {"request": r}, req={**s["req"], r: "finished"}, loc=run.set_loc(r, None))
    run.step(
        "EvictHost",
        {"host_block": h},
        hostState=at(s["hostState"], h, "free"),
        hostKey=at(s["hostKey"], h, None),
        prefix={"k1": []},
        hostData=at(s["hostData"], h, "garbage"),
    )


def long_run(seed: int, requests: int = 8) -> Run:
    """``8 * (requests - 1)`` steps: the cycle over shuffled requests and blocks."""
    names = [f"q{i}" for i in range(requests)]
    run = Run({r: ["k1"] for r in names})
    rng = random.Random(seed)
    order = names[:]
    rng.shuffle(order)
    for r in order[:-1]:
        cycle(run, r, rng.randrange(2), rng.randrange(2))
    return run


def hisparse(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hisparse", *args], capture_output=True, text=True, check=False
    )


# --- the API -----------------------------------------------------------------------------


def test_hand_built_trace_is_accepted(tlc: TlcInstall, tmp_path: Path) -> None:
    path = good_run().write(tmp_path / "good.jsonl")
    result = check_traces([path], install=tlc)
    assert result.accepted, result
    assert [f.verdict for f in result.files] == ["accepted"]
    assert result.steps == result.longest == 10
    assert result.tlc_runs == 1 and result.workdir is None


@pytest.mark.parametrize(
    ("build", "step", "action", "reason"),
    [
        (publish_before_completed, 5, "ConsumeMeta", "hostState"),
        (lambda: good_run(consume_gpu_data="k1"), 6, "ConsumeMeta", "gpuData"),
        (complete_before_enqueue, 3, "WorkerComplete", "not enabled"),
    ],
    ids=["publish_before_completed", "wrong_post_value", "action_not_enabled"],
)
def test_doctored_trace_is_rejected_at_its_step(
    tlc: TlcInstall, tmp_path: Path, build: Any, step: int, action: str, reason: str
) -> None:
    path = build().write(tmp_path / "bad.jsonl")
    result = check_traces([path], install=tlc)
    assert not result.accepted
    (bad,) = result.files
    assert (bad.verdict, bad.step, bad.action) == ("rejected", step, action), bad
    assert bad.reason is not None and reason in bad.reason
    assert result.workdir is not None  # logs are kept for a rejection


def test_bad_trace_in_a_group_is_named(tlc: TlcInstall, tmp_path: Path) -> None:
    good = good_run().write(tmp_path / "good.jsonl")
    bad = good_run(consume_gpu_data="k1").write(tmp_path / "bad.jsonl")
    result = check_traces([good, bad], install=tlc)
    assert not result.accepted
    verdicts = {Path(f.path).name: (f.verdict, f.step) for f in result.files}
    assert verdicts == {"good.jsonl": ("accepted", None), "bad.jsonl": ("rejected", 6)}


def test_invariant_violation_is_a_rejection(tlc: TlcInstall, tmp_path: Path) -> None:
    # With Bug = publish_at_enqueued the spec itself publishes at the enqueued ack; the
    # trace follows it faithfully and NoPublishBeforeComplete fires after ConsumeMeta.
    run = publish_before_completed()
    run.header["bug"] = "publish_at_enqueued"
    run.steps[-1]["post"]["spill"] = {"0": {**SPILLING, "phase": "enqueued", "enq": [0]}}
    run.steps[-1]["post"]["hostState"] = {"0": "valid"}
    result = check_traces([run.write(tmp_path / "bug.jsonl")], install=tlc, allow_bug=True)
    (bad,) = result.files
    assert bad.bug == "publish_at_enqueued"
    assert (bad.verdict, bad.step, bad.action) == ("rejected", 5, "ConsumeMeta"), bad
    assert bad.reason is not None and "NoPublishBeforeComplete" in bad.reason


def test_two_hundred_traces_in_one_run(tlc: TlcInstall, tmp_path: Path) -> None:
    paths = [long_run(seed).write(tmp_path / f"t{seed}.jsonl") for seed in range(200)]
    result = check_traces(paths, install=tlc)
    assert result.accepted
    assert result.tlc_runs == 1
    assert result.longest == 56 and result.steps == 200 * 56


# --- the CLI -----------------------------------------------------------------------------


def test_cli_accepts(tlc: TlcInstall, tmp_path: Path) -> None:
    path = good_run().write(tmp_path / "good.jsonl")
    report = tmp_path / "report.json"
    proc = hisparse("check", "--trace", str(path), "--json", str(report))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == "accepted\n"
    doc = json.loads(report.read_text())
    assert doc["result"] == "accepted" and doc["files"][0]["verdict"] == "accepted"


def test_cli_rejects(tlc: TlcInstall, tmp_path: Path) -> None:
    good = good_run().write(tmp_path / "good.jsonl")
    bad = complete_before_enqueue().write(tmp_path / "bad.jsonl")
    proc = hisparse("check", "--trace", str(good), str(bad))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    first = proc.stdout.splitlines()[0]
    assert first == f"rejected: {bad} at step 3 (action WorkerComplete)"


def test_cli_malformed_trace_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.jsonl"
    path.write_text(json.dumps(header(ONE_PAGE)) + "\n{not json\n")
    report = tmp_path / "report.json"
    proc = hisparse("check", "--trace", str(path), "--json", str(report))
    assert proc.returncode == 2
    assert f"{path}:2: not JSON" in proc.stderr
    assert json.loads(report.read_text())["result"] == "error"


def test_replay_module_derives_from_the_catalogue() -> None:
    """StepAction has one case per catalogue action, with its replay; a step that
    reports nothing (an action writing no variable) still encodes as valid TLA+."""
    from hisparse.spec.catalogue import CATALOGUE
    from hisparse.tracecheck import encode, module

    text = module.step_action()
    for a in CATALOGUE:
        assert f'e.action = "{a.name}" -> {a.replay}' in text
    assert text.count("e.action =") == len(CATALOGUE)
    assert encode.record([]) == "<<>>"
    assert encode.record([("src", '"g0"')]) == '[src |-> "g0"]'


def test_diagnosis_examines_only_the_step_the_replay_stuck_at(tmp_path: Path) -> None:
    """The diagnostic invariants (an ENABLED each) are guarded by TrDiagnosed: every step
    in a plain module, only the stuck step in a rejected trace's re-run."""
    from hisparse.spec.trace import read_trace
    from hisparse.tracecheck import module

    trace = read_trace(good_run().write(tmp_path / "good.jsonl"))
    plain = module.module_text([trace])
    at_six = module.module_text([trace], diagnose_at=6)
    assert "TrDiagnosed == cursor <= Len(Traces[tr])\n" in plain
    assert "TrDiagnosed == cursor = 6\n" in at_six
    assert plain.replace("cursor <= Len(Traces[tr])\n", "cursor = 6\n", 1) == at_six
    assert "TraceActionEnabled == TrDiagnosed => ENABLED" in at_six
    guarded = [n for n in module.diagnostic_invariants() if f"{n} ==\n    TrDiagnosed" in at_six]
    assert len(guarded) == len(module.diagnostic_invariants()) - 1  # all but TraceActionEnabled
    with pytest.raises(ValueError, match="1 or more"):
        module.module_text([trace], diagnose_at=0)
