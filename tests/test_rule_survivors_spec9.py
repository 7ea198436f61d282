"""Rule: an import action names an unknown request unknown, and a malformed page as an
unknown page; the injected gap-skipping worker forgets the gap of the reader rank that
skips it; killing a prefiller that already exited only reaps it -- rules that the ninth
group of spec/ survivors of the whole mutation run showed (docs/mutation-run7).
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from typing import Any

import numpy as np
import pytest

import hisparse.spec.machine as machine_module
import hisparse.transport.nixlpeer as nixlpeer
from hisparse.spec.errors import ActionNotEnabled, InvariantViolation
from hisparse.spec.machine import ProtocolMachine
from hisparse.transport.nixlpeer import NixlPrefiller
from tests.protocol_helpers import make_machine
from tests.test_rule_survivors_report import _holds_until_stopped
from tests.test_rule_survivors_spec5 import snapshot, walked_states


def _refused_exactly(m: ProtocolMachine, action: str, args: tuple[Any, ...],
                     reason: str) -> None:
    """``action(*args)`` is refused with exactly ``reason``; nothing changes."""
    before = snapshot(m)
    with pytest.raises(ActionNotEnabled,
                       match=f"^{re.escape(f'{action} is not enabled: {reason}')}$"):
        getattr(m, action)(*args)
    assert snapshot(m) == before


# --- an import action names an unknown request unknown ----------------------------------


def test_an_import_action_naming_an_unknown_or_retired_request_refuses_it_as_unknown(
) -> None:
    """In every walked import state, ImportArrive, ReportImport and ImportError of a
    request the protocol state does not hold -- one never declared, or a retired import
    (its id may be declared again) -- are refused as "unknown request", not as a request
    with no prefill KV or with no import landing; nothing changes (no step, no check).
    (spec/machine.py:852:call:19, :1050:call:22 and :1063:call:24 each dropped the
    known-request check and refused it for its import's phase.)"""
    met: Counter[str] = Counter()
    for m in walked_states(seeds=3):
        s = m.state
        retired = sorted((m.declared_imports or set()) - set(s.req))
        for r in ["zz", *retired]:
            met["retired" if r in retired else "never declared"] += 1
            for action in ("ImportArrive", "ReportImport", "ImportError"):
                _refused_exactly(m, action, (r,), f"unknown request {r!r}")
    assert met["retired"] and met["never declared"], met


# --- a page that is no (request, index) pair is an unknown page --------------------------

PURE = machine_module.__file__ is not None and machine_module.__file__.endswith(".py")


def test_a_page_action_refuses_a_page_that_is_no_request_index_pair_as_unknown() -> None:
    """In every walked import state, each action on an import's page given something that
    is no (request, index) pair -- an int, an empty tuple -- is refused by name as an
    unknown page before anything reads it (in the mypyc build, by the call's own type
    check); nothing changes. (spec/machine.py:829:
    reorder:15 looked the page's request up first: TypeError or IndexError.)"""
    met: Counter[str] = Counter()
    cases: list[tuple[str, tuple[Any, ...]]] = [
        ("LeaseStaging", ()), ("LandChunk", (1,)), ("CopyToHost", ()), ("MirrorPage", ()),
        ("ReleaseStaging", ()),
    ]
    for m in walked_states(seeds=1, steps=40):
        met["states"] += 1
        for bad in (7, ()):
            for action, rest in cases:
                if PURE:
                    _refused_exactly(m, action, (bad, *rest), f"unknown page {bad!r}")
                else:  # the mypyc build refuses a non-Page argument at the call itself
                    before = snapshot(m)
                    with pytest.raises(TypeError, match=r"^tuple\[str, int\] object expected"):
                        getattr(m, action)(bad, *rest)
                    assert snapshot(m) == before
    assert met["states"] >= 40, met


# --- the injected gap-skipping worker on a reader rank ----------------------------------

THREE: dict[str, tuple[str, ...]] = {"r0": ("k0",), "r1": ("k1",), "r2": ("k2",)}


def test_a_reader_rank_that_skips_its_gap_forgets_its_own_gap_and_gaps_detected_says_so(
) -> None:
    """Under the injected bug worker_skips_gap (the spec's Bug branch of WorkerEnqueue:
    ``lost' = [lost EXCEPT ![w] = FALSE]``), a reader rank of a shared pool whose command
    was lost takes a later command anyway: whichever command was lost and whichever one
    it takes, the step is taken on that rank (its enqueued list holds the command), its
    own gap is forgotten, no other rank's flag is touched, and GapsDetected names the
    lost command's host block. (spec/machine.py:1212:var:83 passed the transfer ID for
    the rank: it cleared another rank's flag, or none at all (IndexError), and the
    reader kept its gap.)"""
    for lost, taken in itertools.permutations(range(3), 2):
        m = make_machine("worker_skips_gap", ranks=2, backing="shared", host_blocks=4,
                         universe=THREE, record=True)
        for r in THREE:
            m.Arrive(r)
        tids = [m.StartSpill((r, 1), h) for h, r in zip((1, 2, 3), THREE, strict=True)]
        assert tids == [0, 1, 2]
        for t in tids:
            m.WorkerEnqueue(t, 0)  # the writer (rank 0) takes every command
        m.LoseCommand(lost, 1)
        assert m.state.lost == [False, True]
        why = (f"invariant GapsDetected violated: rank 1 has not acknowledged the command "
               f"into host block HostBlock({lost + 1}), but nothing carries it and no gap "
               "is pending")
        with pytest.raises(InvariantViolation, match=f"^{re.escape(why)}$"):
            m.WorkerEnqueue(taken, 1)
        assert m.state.lost == [False, False], (lost, taken)
        assert m.state.w_enq[1] == [taken], (lost, taken)


# --- killing a prefiller that already exited --------------------------------------------


def test_killing_a_prefiller_that_already_stopped_only_reaps_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``kill`` sends SIGKILL only to a process still running: after an orderly stop
    (exit 0, already reaped) it signals nothing -- no ProcessLookupError for the reaped
    pid -- and the exit code stays 0. (transport/nixlpeer.py:130:none:3 and :130:bool:3
    signalled the reaped process.)"""
    monkeypatch.setattr(nixlpeer, "_serve", _holds_until_stopped)
    peer = NixlPrefiller("spec9-stopped", np.zeros((2, 64), np.uint8))
    try:
        assert not peer.reaped
        peer.stop()
        assert peer.reaped and peer.process.exitcode == 0
        peer.kill()
        assert peer.reaped and peer.process.exitcode == 0
    finally:
        if not peer.reaped:  # (only on a failure above)
            peer.process.kill()
            peer.process.join()
