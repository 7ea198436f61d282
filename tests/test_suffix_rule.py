"""The indexer suffix rule: ``plan_suffix`` against a brute-force oracle over every
combination of hit lengths and store states; its twin of tla/IndexerSuffix.tla catches
every injected bug by the invariant the spec names; twin, spec, cfg and registry agree
(names, and with TLC the number of reachable states)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from itertools import chain, combinations, product
from pathlib import Path

import pytest

from hisparse.bugs import SUFFIX_BUGS
from hisparse.spec.suffix import (
    BLOCK_STATES,
    SUFFIX_INVARIANTS,
    BlockState,
    SuffixMachine,
    SuffixPlan,
    explore,
    plan_suffix,
)
from hisparse.spec.suffix_variants import SUFFIX_VARIANTS, suffix_machine
from hisparse.tlc import TlcInstall
from hisparse.tlc.check import check_model
from hisparse.tlc.errors import ModelError

TLA = Path(__file__).resolve().parents[1] / "tla"
SPEC = (TLA / "IndexerSuffix.tla").read_text()
BOUND = 4  # pages: every hit pair and every store state of every block, exhaustively


def oracle(host: int, gpu: int, held: tuple[BlockState, ...]) -> tuple[int, tuple[int, ...]]:
    """Brute force over every decision (admitted length L, restored block set R): keep
    the safe ones (R only stored blocks, none GPU-resident, none past L; the indexer's
    first L pages all on the GPU after R; L within the host hit) that are the rule's
    choices (the whole host hit, or the shared prefix); the longest L wins."""
    n = len(held)
    blocks = range(n)
    subsets = chain.from_iterable(combinations(blocks, k) for k in range(n + 1))
    best: list[tuple[int, tuple[int, ...]]] = []
    for r in subsets:
        for length in range(n + 1):
            safe = (
                all(held[b] == "stored" for b in r)
                and all(gpu <= b < length for b in r)
                and set(range(length)) <= set(range(gpu)) | set(r)
                and length <= host
                and length in (host, min(host, gpu))
            )
            if safe:
                best.append((length, r))
    top = max(length for length, _ in best)
    winners = [(length, r) for length, r in best if length == top]
    assert len(winners) == 1, winners  # the exact missing suffix: one restore set
    return winners[0]


@pytest.mark.parametrize("n", range(BOUND + 1))
def test_rule_matches_brute_force_oracle(n: int) -> None:
    cases = 0
    for host, gpu in product(range(n + 1), repeat=2):
        for held in product(BLOCK_STATES, repeat=n):
            asked: list[int] = []

            def restorable(
                b: int, held: tuple[BlockState, ...] = held, asked: list[int] = asked
            ) -> bool:
                asked.append(b)
                return held[b] == "stored"

            p = plan_suffix(host, gpu, restorable)
            length, restore = oracle(host, gpu, held)
            assert (p.admit_mla, p.admit_indexer, p.restore) == (length, length, restore)
            assert p.fallback == (length < host)
            assert p.suffix_restore == bool(restore)
            assert set(asked) <= set(range(gpu, host))  # O(suffix): nothing else looked at
            cases += 1
    assert cases == (n + 1) ** 2 * 3**n


def test_rule_examples() -> None:
    stored = lambda b: True  # noqa: E731
    assert plan_suffix(3, 1, stored) == SuffixPlan(3, 1, 3, 3, (1, 2))
    assert plan_suffix(2, 4, stored) == SuffixPlan(2, 4, 2, 2, ())  # indexer longer: capped
    missing = plan_suffix(3, 1, lambda b: b != 2)
    assert (missing.admit_mla, missing.restore, missing.fallback) == (1, (), True)


# TLC's distinct states of MC_suffix (N = 3): test_twin_reaches_exactly_tlcs_states checks
# the twin against TLC itself; pinned here so that the suite without TLC holds it too
# (suffix.py:111:cmp:17 let a stored block never be evicted: fewer states, no violation)
TLC_STATES_N3 = 1726


def test_twin_is_clean_without_a_bug() -> None:
    e = explore(SuffixMachine(3))
    assert e.violated == set() and e.first is None
    assert e.states == TLC_STATES_N3


@pytest.mark.parametrize("bug", SUFFIX_VARIANTS, ids=lambda v: v.bug)
def test_each_injected_bug_is_caught_by_name(bug: object) -> None:
    from hisparse.spec.catalogue import Variant

    assert isinstance(bug, Variant)
    e = explore(suffix_machine(3, bug.bug))
    assert e.violated == {bug.catches}  # that invariant, and no other
    assert e.first is not None and e.first[1] == [bug.catches]


def test_unknown_suffix_bug_is_refused() -> None:
    with pytest.raises(KeyError, match="unknown suffix bug"):
        suffix_machine(3, "no_such_bug")


# --- twin, spec, cfg and registry agree ----------------------------------------------


def _cfg_invariants() -> list[str]:
    m = re.search(r"^INVARIANTS\n((?:\s+\w+\n?)+)", (TLA / "MC_suffix.cfg").read_text(), re.M)
    assert m
    return m.group(1).split()


def suffix_disagreements(spec: str, machine: type[SuffixMachine]) -> list[str]:
    """What the spec text and the twin disagree on (empty: in sync)."""
    out = []
    next_body = spec.split("\nNext ==\n", 1)[1].split("\n\n", 1)[0]
    spec_actions = set(re.findall(r"\b([A-Z][A-Za-z]+)\(", next_body)) | set(
        re.findall(r"\\/ ([A-Z][A-Za-z]+)$", next_body, re.M))
    if spec_actions != set(machine.ACTIONS):
        out.append(f"spec actions {sorted(spec_actions)} != twin {sorted(machine.ACTIONS)}")
    missing = [a for a in machine.ACTIONS if not callable(getattr(machine, a, None))]
    if missing:
        out.append(f"twin lacks actions {missing}")
    defined = set(re.findall(r"^(\w+) ==", spec, re.M))
    if not set(SUFFIX_INVARIANTS) <= defined:
        out.append(f"invariants not in the spec: {sorted(set(SUFFIX_INVARIANTS) - defined)}")
    spec_bugs = set(re.findall(r'Bug [=#] "(\w+)"', spec))
    if spec_bugs != {v.bug for v in SUFFIX_VARIANTS}:
        out.append(f"spec bugs {sorted(spec_bugs)} != registered "
                   f"{sorted(v.bug for v in SUFFIX_VARIANTS)}")
    for v in SUFFIX_VARIANTS:
        if not callable(getattr(machine, v.step, None)):
            out.append(f"{v.bug}: the twin has no step {v.step}")
    return out


def test_spec_twin_and_registry_agree() -> None:
    assert suffix_disagreements(SPEC, SuffixMachine) == []
    assert _cfg_invariants() == list(SUFFIX_INVARIANTS)
    assert [(b.name, b.catches, b.model) for b in SUFFIX_BUGS] == [
        (v.bug, v.catches, "suffix") for v in SUFFIX_VARIANTS
    ]
    assert {v.catches for v in SUFFIX_VARIANTS} == set(SUFFIX_INVARIANTS) - {"TypeOK"}
    import hisparse.spec.suffix as rule_module  # its file, in either layout (source or build)

    rule = Path(rule_module.__file__).read_text()
    for v in SUFFIX_VARIANTS:  # production code names no bug
        assert f'"{v.bug}"' not in rule, v.bug
        buggy = suffix_machine(3, v.bug)
        assert type(buggy).__bases__ == (SuffixMachine,)
        assert vars(type(buggy))[v.step] is v.impl


def test_the_sync_check_has_teeth() -> None:
    renamed = SPEC.replace('"no_fallback"', '"no_fallback_renamed"')
    assert any("spec bugs" in p for p in suffix_disagreements(renamed, SuffixMachine))
    dropped = SPEC.replace("    \\/ Decode\n", "")
    assert dropped != SPEC
    assert any("spec actions" in p for p in suffix_disagreements(dropped, SuffixMachine))


@pytest.mark.tlc
def test_twin_reaches_exactly_tlcs_states(tlc: TlcInstall, tmp_path: Path) -> None:
    """The twin explores the spec's state space: TLC's distinct-state count for
    MC_suffix (N = 3) equals the twin's."""
    out = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "hisparse", "check", "--model", "suffix", "--workers", "1",
         "--json", str(out)], capture_output=True, text=True, check=False,
    )
    report = json.loads(out.read_text())
    assert (proc.returncode, report["result"]) == (0, "ok"), proc.stdout + proc.stderr
    assert report["invariants"] == list(SUFFIX_INVARIANTS)
    n = int(re.search(r"^MCN == (\d+)$", (TLA / "MC_suffix.tla").read_text(), re.M)[1])  # type: ignore[index]
    assert report["distinct_states"] == explore(SuffixMachine(n)).states
    assert (n, report["distinct_states"]) == (3, TLC_STATES_N3)


def test_a_bug_is_injected_only_into_its_own_spec() -> None:
    """A suffix bug on a HiSparse model (or the reverse) would run clean and look
    uncaught: it is refused before TLC starts."""
    with pytest.raises(ModelError, match=r"IndexerSuffix\.tla"):
        check_model("small", inject="no_fallback")
    with pytest.raises(ModelError, match=r"HiSparse\.tla"):
        check_model("suffix", inject="double_allocation")
