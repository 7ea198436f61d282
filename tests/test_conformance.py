"""Tests generated from the model: every transition of ``tla/MC_gen``'s state graph is
replayed on the Python machine (marker ``tlc`` where TLC runs), and the replay is shown
to catch a Python machine that deviates from the spec."""

from __future__ import annotations

import pytest

from hisparse import conformance
from hisparse.conformance import ReplayMismatch, StateGraph, dump_graph, replay_graph
from hisparse.spec.catalogue import CATALOGUE
from hisparse.spec.constants import ProtocolConfig
from hisparse.tlc import TlcInstall
from hisparse.tlc.value import Fn, ModelValue, ValueSyntaxError, parse_state, parse_value

IMPORT_ACTIONS = {
    "ImportArrive", "ChooseTarget", "AdmitImport", "LeaseStaging", "LandChunk", "CopyToHost",
    "MirrorPage", "ReleaseStaging", "ReportImport", "ImportError", "CompleteImport",
    "FailImport",
}


@pytest.fixture(scope="module")
def graph(tlc: TlcInstall) -> StateGraph:
    return dump_graph(install=tlc)


@pytest.mark.tlc
def test_every_transition_of_the_model_replays_on_python(graph: StateGraph) -> None:
    r = replay_graph(graph)
    # 6584 before the faulty channels (9600) and before Arrive could cap its hit (+24)
    assert r.states == len(graph.states) == 9624
    assert r.transitions + r.stutters == len(graph.edges)
    # every action of the catalogue but those only an injected bug enables (WorkerDrop),
    # those only a reader rank of a shared pool takes (MC_gen has one rank) and the P/D
    # import's (MC_gen has no imports: Imports = {}; the import's traces are replayed by
    # TLC in tests/test_protocol_traces.py, the other direction)
    assert set(r.by_action) == {
        a.name for a in CATALOGUE
        if not (a.injected_only or a.readers_only or a.name in IMPORT_ACTIONS)
    }
    assert "WorkerDrop" not in r.by_action
    assert r.depth >= 15 and r.behaviours > r.transitions
    print(f"MC_gen: {r.states} states, {r.transitions} transitions, depth {r.depth}, "
          f"{r.behaviours} behaviours")


@pytest.mark.tlc
@pytest.mark.parametrize(
    ("bug", "action"),
    [("abort_keeps_resident_blocks", "Abort"), ("evict_keeps_index", "EvictHost"),
     ("publish_at_enqueued", "ConsumeMeta"), ("retire_waits_for_host_pages", "Retire"),
     ("recover_frees_busy_destination", "WorkerLoss"), ("recover_publishes_unsent", "WorkerLoss"),
     ("loss_path_ignores_gaps", "WorkerLoss")],
)
def test_a_deviating_python_machine_is_caught(
    graph: StateGraph, monkeypatch: pytest.MonkeyPatch, bug: str, action: str
) -> None:
    c = conformance.GEN_CONFIG
    monkeypatch.setattr(
        conformance, "GEN_CONFIG", ProtocolConfig(**{**c.model_dump(), "bug": bug})
    )
    with pytest.raises(ReplayMismatch, match=action):
        replay_graph(graph)


def test_parse_values() -> None:
    assert parse_value('<<"a", 1>>') == ("a", 1)
    assert parse_value("{}") == frozenset()
    assert parse_value("(k1 :> {} @@ k2 :> {h1})") == {"k1": frozenset(), "k2": frozenset({"h1"})}
    rec = parse_value('[src |-> g1, page |-> <<"nopage", 0>>, phase |-> "none"]')
    assert isinstance(rec, Fn) and rec["src"] == "g1" and isinstance(rec["src"], ModelValue)
    assert not isinstance(rec["phase"], ModelValue)
    assert parse_value("{[src |-> g1, dst |-> h2]}") == frozenset({Fn(src="g1", dst="h2")})
    assert parse_value("TRUE") is True and parse_value("-3") == -3
    assert parse_value('<<[enq |-> {h1}, done |-> {}]>>') == (Fn(enq=frozenset({"h1"}), done=frozenset()),)
    for bad in ("<<1", "[a |-> ]", "1 2", "?"):
        with pytest.raises(ValueSyntaxError):
            parse_value(bad)
    # a token other than the one the grammar needs is named (value.py:64:raise:5)
    for bad, want, got in (("[a 1]", "|->", "1"), ("(k1 :> 2 @@ k2 3)", ":>", "3"),
                           ("(k1 2)", ")", "2")):
        with pytest.raises(ValueSyntaxError) as err:
            parse_value(bad)
        assert str(err.value) == f"expected {want!r}, got {got!r}"


def test_parse_state_spans_lines() -> None:
    s = parse_state('/\\ loc = ( <<r1, 1>> :> <<"gpu", g1>> @@\n  <<r2, 1>> :> <<"nowhere", "nowhere">> )\n/\\ up = <<>>')
    assert s["loc"] == {("r1", 1): ("gpu", "g1"), ("r2", 1): ("nowhere", "nowhere")}
    assert s["up"] == ()
