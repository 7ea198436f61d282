"""Invariant rules met by the whole mutation run's nineteenth pass
(docs/mutation-survivors.md): ``TypeOK`` refuses a missing host pool as it refuses an
extra one, and ``None`` as a block's bytes whatever host blocks are free;
``NoImportLeak`` sees host block 0 held after an import ended, and a leased GPU block of
an imported request that finished as well as of one that was aborted.

Each defect is one field of a clean reachable state (the states of
``tests/test_invariants_alone.py``), and the exact set of twins that fail is asserted.
"""

from __future__ import annotations

import pytest

from hisparse.spec.invariants import NoImportLeak, TypeOK
from hisparse.spec.state import HostBlock
from tests.protocol_helpers import make_machine
from tests.test_invariants_alone import _import_machine, base, failing


def test_a_copier_without_its_host_pool_is_a_type_error() -> None:
    # kills spec/invariants.py:75:collection:0 (the pools were checked to be a subset of
    # the copiers: a copier whose pool is missing passed)
    m = make_machine(ranks=2)
    s = m.state
    assert sorted(s.host_data) == [0, 1] and failing(s) == set()
    del s.host_data[1]
    assert failing(s) == {"TypeOK"}
    assert TypeOK(s) == ["host pools [0] are not the copiers (0, 1)"]


def test_none_as_a_blocks_bytes_is_a_type_error_while_host_blocks_are_free() -> None:
    # a free host block's key is None; that must not make None legal bytes
    # kills spec/invariants.py:26:cmp:16 (the legal bytes took the None keys of free
    # host blocks instead of the published keys)
    m, _ = base()
    s = m.state
    assert None in s.host_key and failing(s) == set()
    h = s.host_state.index("free")
    s.host_data[0][h] = None  # type: ignore[call-overload]
    assert failing(s) == {"TypeOK"}
    assert TypeOK(s) == [f"host block {h} of pool 0 holds None"]


def test_host_block_0_held_after_an_import_ended_is_a_leak() -> None:
    # host block 0 is a block like any other
    # kills spec/invariants.py:167:none:15 (``y.host and``: host block 0 read as none)
    m = _import_machine("host", True)
    m.CompleteImport("r1")
    s = m.state
    assert s.imp["r1"].phase == "none" and failing(s) == set()
    s.pg[("r1", 1)] = s.pg[("r1", 1)]._replace(host=HostBlock(0))
    # (a completed import's page names no host block: ImportPublishedComplete sees it too)
    assert failing(s) == {"ImportPublishedComplete", "NoImportLeak"}
    assert NoImportLeak(s) == [
        f"page ('r1', 1) still holds host block {HostBlock(0)} after its import ended"]


@pytest.mark.parametrize("end", ["Finish", "Abort"])
def test_an_ended_imported_requests_leased_gpu_block_is_a_leak(end: str) -> None:
    # finished and aborted are both ended: neither keeps a GPU block of its import
    # kills spec/invariants.py:171:drop:18 (only aborted requests were looked at) and
    # spec/invariants.py:171:drop:19 (only finished ones)
    m = _import_machine("device", True)
    m.CompleteImport("r1")
    getattr(m, end)("r1")
    s = m.state
    assert failing(s) == set()
    g = next(g for g, o in enumerate(s.gpu_owner) if o is None and not s.src_pin[g])
    s.gpu_owner[g] = ("r1", 1)
    assert "NoImportLeak" in failing(s)
    assert NoImportLeak(s) == [f"GPU block {g} still leased to ('r1', 1) of ended imported r1"]


def test_an_empty_tuple_as_a_gpu_blocks_owner_is_a_type_error() -> None:
    # an owner is None or a (request, index) page: anything else is malformed, an empty
    # tuple too (spec/invariants.py:51:none:4 read a falsy owner as none)
    m, _ = base()
    s = m.state
    assert TypeOK(s) == []
    s.gpu_owner[2] = ()  # type: ignore[assignment]
    assert TypeOK(s) == ["GPU block 2 owned by malformed page ()"]
