"""Rule: an import's admission refuses any GPU block list that is not exactly its need of
distinct, in-range free blocks; ImportTargetStable asks for a host block on every page of
a host-target import; the trace encoding names host block 0 as 0 -- rules that the fifth
group of spec/ survivors of the whole mutation run showed (docs/mutation-run7).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from hisparse.spec.errors import ActionNotEnabled
from hisparse.spec.invariants import ImportTargetStable
from hisparse.spec.machine import ProtocolMachine
from hisparse.spec.observe import encode
from hisparse.spec.state import LIVE_IMPORT, HostBlock
from tests.protocol_helpers import IMPORT_GUARDS, import_walk

# the walks: chunks of one and of two (staging in several steps), a few seeds each
CONFIGS: list[dict[str, Any]] = [{}, {"chunks": 2}]


def walked_states(seeds: int = 4, steps: int = 60) -> Iterator[ProtocolMachine]:
    """Every state of seeded import walks (``import_walk``) under ``CONFIGS``."""
    for config in CONFIGS:
        for seed in range(seeds):
            yield from import_walk(seed, steps, **config)


def snapshot(m: ProtocolMachine) -> tuple[Any, int, int]:
    """The state, the invariant checks made and the recorded steps (a refusal changes none)."""
    assert m.steps is not None
    return m.state.clone(), m.invariant_checks, len(m.steps)


# --- AdmitImport takes exactly its need of distinct, in-range free GPU blocks -----------


def test_an_import_admission_with_an_empty_or_out_of_range_gpu_block_list_is_refused_by_name(
) -> None:
    """Wherever an import may be admitted, AdmitImport with an explicit GPU block list
    that is empty, or that names block -1 or block ``gpu_blocks`` in place of the lowest
    free one, is refused with the target, its need (every page for the device target, the
    mirrored page for the host target) and the list named; nothing changes (no step, no
    check). An empty list is not "choose for me" (only None is): the list is the
    caller's choice. (spec/machine.py:901:none:12 took [] as None and admitted the
    import into the lowest free blocks; :905:bool:96 let any int through the range test,
    so -1 indexed the last block from the end and was admitted where that block was free,
    and ``gpu_blocks`` raised IndexError.)"""
    met: Counter[str] = Counter()
    for m in walked_states():
        s = m.state
        for r in sorted(s.imports & set(s.req)):
            if not IMPORT_GUARDS["AdmitImport"](m, r):
                continue
            target = s.imp_of(r).target
            need = len(s.page_keys[r]) if target == "device" else 1
            free = [g for g, o in enumerate(s.gpu_owner) if o is None][:need]
            met[target] += 1
            if s.gpu_owner[-1] is None:
                met["last block free"] += 1
            for blocks in ([], [-1, *free[1:]], [s.config.gpu_blocks, *free[1:]]):
                before = snapshot(m)
                why = (f"{target} target needs {need} distinct free GPU blocks, "
                       f"got {blocks}")
                with pytest.raises(ActionNotEnabled,
                                   match=f"^{re.escape(f'AdmitImport is not enabled: {why}')}$"):
                    m.AdmitImport(r, blocks)
                assert snapshot(m) == before
    assert met["device"] and met["host"] and met["last block free"], met


# --- ImportTargetStable: every page hosted iff the target is host -----------------------


def test_a_host_target_import_with_one_page_not_hosted_breaks_import_target_stability(
) -> None:
    """ImportTargetStable is the spec's ``(target = "host") = (\\A p : pg[p].host #
    NoLoc)`` over live imports: in every walked state, a live host-target import of several
    pages whose one page lost its host block is reported ("chose host but lands
    elsewhere"), and a live device-target import of several pages of which one names a
    host block still lands elsewhere than in host blocks (not every page is hosted): no
    problem of this invariant. (spec/invariants.py:149:collection:1 asked for some hosted
    page instead of all: it passed the first and reported the second.)"""
    met: Counter[str] = Counter()
    for m in walked_states():
        s = m.state
        assert ImportTargetStable(s) == []
        for r, x in s.imp.items():
            n = len(s.page_keys[r])
            if x.phase not in LIVE_IMPORT or n < 2:
                continue
            for i in range(1, n + 1):
                t = s.clone()
                y = t.pg_of((r, i))
                if x.target == "host":
                    assert y.host is not None
                    t.pg[(r, i)] = y._replace(host=None)
                    expected = [f"request {r}'s import chose host but lands elsewhere"]
                else:
                    assert x.target == "device" and y.host is None
                    t.pg[(r, i)] = y._replace(host=HostBlock(0))
                    expected = []
                met[x.target] += 1
                assert ImportTargetStable(t) == expected
    assert met["host"] and met["device"], met


# --- the trace encoding of pg names host block 0 ----------------------------------------


def test_the_pg_encoding_names_every_page_host_block_by_number_block_zero_included() -> None:
    """The JSON value of ``pg`` (what a recorded trace shows of it) gives each page's host
    source block as its number, null only for NoLoc, with its landed and staged chunks
    sorted and its slot: in every walked state, host block 0 as 0. (spec/observe.py:45:
    none:3 encoded host block 0 as null, NoLoc.)"""
    met: Counter[str] = Counter()
    for m in walked_states():
        s = m.state
        expected = []
        for p in s.loc:
            y = s.pg_of(p)
            met["host 0" if y.host == 0 else "other"] += 1
            expected.append([[p[0], p[1]], {
                "host": None if y.host is None else int(y.host),
                "landed": sorted(y.landed), "staged": sorted(y.staged), "slot": y.slot,
            }])
        encoded = encode(s, "pg")
        assert encoded == expected
        assert [e[1]["host"] for e in encoded if s.pg_of((e[0][0], e[0][1])).host == 0] == [
            0 for p in s.loc if s.pg_of(p).host == 0]
    assert met["host 0"], met
