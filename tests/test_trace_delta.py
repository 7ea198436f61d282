"""A trace replay checks nine invariants at what each step changed (``tracecheck.delta``).

The restated checks rely on the spec defining each invariant from exactly the parts
``delta`` names; every state after the first is checked the incremental way, so a bug
that breaks one of them after a step shows that version live, by the spec's name; and
what a step changed is verified: a change the step does not report is a rejection.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import tests.test_protocol_bugs as scenarios
from hisparse.bugs import PROTOCOL_BUGS
from hisparse.spec.errors import InvariantViolation
from hisparse.spec.machine import ProtocolMachine
from hisparse.spec.record import machine_trace
from hisparse.spec.trace import POST_FIELDS, Trace, TraceStep, write_trace
from hisparse.tlc import TlcInstall
from hisparse.tlc.paths import tla_dir
from hisparse.tracecheck import delta
from hisparse.tracecheck import module as gen
from hisparse.tracecheck.check import check_traces
from hisparse.tracecheck.ints import Ids
from tests.protocol_helpers import make_machine

# The registered bugs caught by an invariant delta restates: NoDoubleOwnership (its GPU
# and its host part), PublishedDataCorrect (its key part, through a block's old hostKey),
# RetiredUnreferenced, and the five P/D import invariants (StagingBounded through
# trSlots, MirrorBeforeRead through trMirror, ...); TypeOK's is doctored below (its bug's
# JSON matches no successor).
DELTA_BUGS = [b for b in PROTOCOL_BUGS if b.kind == "invariant" and b.catches in delta.SHAPES]


def test_the_spec_defines_each_invariant_from_the_parts_delta_checks() -> None:
    spec = (tla_dir() / "HiSparse.tla").read_text()
    for name, shape in delta.SHAPES.items():
        assert shape in spec, f"{name} is no longer defined as tracecheck/delta.py restates it"


def test_the_replay_checks_the_delta_versions_under_the_spec_names() -> None:
    cfg = gen.cfg_text(["TypeOK", "NoLeaseLeaked", "RetiredUnreferenced"])
    assert "    TrDelta_TypeOK\n" in cfg and "    TrDelta_RetiredUnreferenced\n" in cfg
    assert "    NoLeaseLeaked\n" in cfg  # not restated: checked as the spec states it
    for name in delta.SHAPES:
        assert f"{delta.PREFIX}{name} ==" in delta.TLA
        assert delta.spec_name(delta.cfg_name(name)) == name
    assert delta.spec_name("NoLeaseLeaked") == "NoLeaseLeaked"
    assert {b.catches for b in DELTA_BUGS} == {
        "NoDoubleOwnership", "PublishedDataCorrect", "RetiredUnreferenced", "TypeOK",
        "StagingBounded", "ImportPublishedComplete", "MirrorBeforeRead", "ImportTargetStable",
        "NoImportLeak",
    }


def recorded(bug: str, monkeypatch: pytest.MonkeyPatch) -> Trace:
    """The trace of ``bug``'s scenario (test_protocol_bugs), up to the step its Python
    twin catches."""
    made: list[ProtocolMachine] = []

    def recording(*args: Any, **kw: Any) -> ProtocolMachine:
        m = make_machine(*args, record=True, **kw)
        made.append(m)
        return m

    monkeypatch.setattr(scenarios, "make_machine", recording)
    with pytest.raises(InvariantViolation):
        scenarios.SCENARIOS[bug](bug)
    (m,) = made
    return machine_trace(m)


def edited(trace: Trace, at: int, edit: Callable[[dict[str, Any]], None]) -> Trace:
    """``trace`` with step ``at``'s post (as JSON) changed by ``edit``."""
    steps = list(trace.steps)
    doc = steps[at - 1].model_dump(mode="json", exclude_none=True)
    edit(doc["post"])
    steps[at - 1] = TraceStep.model_validate(doc)
    return trace.model_copy(update={"steps": tuple(steps)})


def rejection(trace: Trace, tmp_path: Path, tlc: TlcInstall) -> tuple[int | None, str]:
    path = tmp_path / "bug.jsonl"
    write_trace(path, trace)
    (v,) = check_traces([path], install=tlc, allow_bug=True).files
    assert v.verdict == "rejected" and v.bug == trace.header.bug, v.line()
    assert v.reason is not None
    return v.step, v.reason


@pytest.mark.tlc
@pytest.mark.parametrize(
    "bug", [b for b in DELTA_BUGS if b.catches != "TypeOK"], ids=lambda b: b.name
)
def test_each_restated_invariant_catches_its_bug_after_a_step(
    bug: Any, tmp_path: Path, tlc: TlcInstall, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = recorded(bug.name, monkeypatch)
    step, reason = rejection(trace, tmp_path, tlc)
    # the state after step >= 1: checked by TrDelta_<name>, not the whole invariant
    assert step == len(trace.steps) >= 1
    assert reason == f"invariant {bug.catches} is violated in the state after this step"


@pytest.mark.tlc
def test_typeok_catches_a_gpu_location_past_the_gpu_blocks_after_a_step(
    tmp_path: Path, tlc: TlcInstall, monkeypatch: pytest.MonkeyPatch
) -> None:
    # host_id_as_gpu_index: the enqueued ack moves r1's page to <<"gpu", h>>, h its host
    # block (0) as the replay numbers it (ints.Ids.host: after the GPU blocks). The
    # machine's entry names GPU block 0, the page's old entry, so it records no change;
    # reported as the replay numbers it, the step matches the buggy spec and leaves a
    # location outside Loc.
    trace = recorded("host_id_as_gpu_index", monkeypatch)
    last = len(trace.steps)
    assert trace.steps[-1].action == "ConsumeMeta" and trace.steps[-1].post.loc == []
    h = Ids(trace.header).host(0)

    def as_replayed(post: dict[str, Any]) -> None:
        post["loc"] = [[["r1", 1], ["gpu", h]]]

    step, reason = rejection(edited(trace, last, as_replayed), tmp_path, tlc)
    assert (step, reason) == (last, "invariant TypeOK is violated in the state after this step")


@pytest.mark.tlc
def test_a_change_the_step_does_not_report_is_a_rejection(
    tmp_path: Path, tlc: TlcInstall, monkeypatch: pytest.MonkeyPatch
) -> None:
    # release_source_at_send: StartSpill also moves the page to the host (loc), which the
    # correct spec's StartSpill does not write. Without that report the step would leave
    # loc as it was, which the spec with the bug does not: no successor, not an invariant.
    trace = recorded("release_source_at_send", monkeypatch)
    at = next(i for i, s in enumerate(trace.steps, 1) if s.action == "StartSpill")
    assert trace.steps[at - 1].post.loc

    def unreported(post: dict[str, Any]) -> None:
        del post["loc"]

    step, reason = rejection(edited(trace, at, unreported), tmp_path, tlc)
    assert (step, reason) == (at, "the post-state matches no successor of the spec")


# What the trackers' updates get wrong when each is broken (a name for the test's id).
TRACKER_SLIPS = {
    "trOnGpu counts the page's old block": ("+ Cardinality({p \\in P : loc'[p] = <<\"gpu\", b>>})",
                                            "+ Cardinality({p \\in P : loc[p] = <<\"gpu\", b>>})"),
    "trSlots counts the slots before": ("+ Cardinality({p \\in P : pg'[p].slot})",
                                        "+ Cardinality({p \\in P : pg[p].slot})"),
    "trImpHost drops the new blocks": ("TrHostAt(pg[p].host) \\cup TrHostAt(pg'[p].host)",
                                       "TrHostAt(pg[p].host)"),
    "trMirror keeps the ended": ("(trMirror \\ R) \\cup", "trMirror \\cup"),
}


@pytest.fixture(scope="module")
def pd_trace(tmp_path_factory: pytest.TempPathFactory) -> Trace:
    """A P/D run's trace (both targets, failures, unaligned final blocks)."""
    from hisparse.simulate import SimulateOptions, simulate
    from hisparse.spec.trace import read_trace

    path = tmp_path_factory.mktemp("pd") / "pd.jsonl"
    rep = simulate(SimulateOptions(requests=40, steps=300, seed=3, pd_share=0.5, trace=path))
    im = rep.imports
    assert im["device"] and im["host"] and im["failed"], im  # every path taken
    return read_trace(path)


def tracker_replay(trace: Trace, tmp_path: Path, tlc: TlcInstall, tla: str) -> Any:
    """Replay ``trace`` (with ``tla`` as delta's text) checking only ``TrTrackersExact``,
    whole states fingerprinted (no VIEW: a second successor of a state would show)."""
    from hisparse.tlc.runner import run_tlc

    module, cfg = tmp_path / f"{gen.MODULE}.tla", tmp_path / f"{gen.MODULE}.cfg"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(delta, "TLA", tla)
        module.write_text(gen.module_text([trace]))
    cfg.write_text(gen.cfg_text(["TrTrackersExact"], view=False))
    return run_tlc(module, cfg, tmp_path, 1, tla_dir=tla_dir(), install=tlc).output


def test_a_replay_is_a_chain_so_its_view_names_its_states() -> None:
    """The replay's VIEW (``<<tr, cursor>>``) is sound only if a state has at most one
    successor: MatchPost must pin every spec variable and TrTrack every tracker."""
    spec = (tla_dir() / "HiSparse.tla").read_text()
    body = spec[spec.index("\nvars == <<") + len("\nvars == <<"):]
    spec_vars = {v.strip() for v in body[: body.index(">>")].split(",")}
    assert spec_vars == set(POST_FIELDS)
    for v in delta.AUX_VARS:
        assert f"{v}' =" in delta.TLA, f"{v} has no next value in TrTrack"
    assert "\nVIEW TrView\n" in gen.cfg_text(["TypeOK"])
    assert "VIEW" not in gen.cfg_text(["TypeOK"], view=False)


@pytest.mark.tlc
def test_the_trackers_are_what_they_track_over_a_pd_run(
    pd_trace: Trace, tmp_path: Path, tlc: TlcInstall
) -> None:
    out = tracker_replay(pd_trace, tmp_path, tlc, delta.TLA)
    # one distinct whole state per step: a chain (what the replay's VIEW relies on)
    assert out.result == "ok" and out.distinct_states == len(pd_trace.steps) + 1, out


@pytest.mark.tlc
@pytest.mark.parametrize("slip", sorted(TRACKER_SLIPS))
def test_a_tracker_that_slips_is_caught(
    slip: str, pd_trace: Trace, tmp_path: Path, tlc: TlcInstall
) -> None:
    right, wrong = TRACKER_SLIPS[slip]
    assert delta.TLA.count(right) == 1
    out = tracker_replay(pd_trace, tmp_path, tlc, delta.TLA.replace(right, wrong))
    assert out.result == "violation" and out.violated == ["TrTrackersExact"], out
