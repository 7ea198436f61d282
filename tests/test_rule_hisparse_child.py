"""Rule: HiSparseConnector as a MultiConnector child answers the host prefix hit beyond the
tokens already computed, admits with the hit capped at the external tokens the engine
gave it since the request's last admission (none given: no host hit), forgets them once
the request is admitted or finished, and refuses a message of the wrong type with a
``TypeError`` before anything is bound or consumed (``hisparse/connectors/hisparse_child.py``).

Over the small HiSparse system of ``tests/connector_helpers.py`` (blocks of 4 tokens), with
two pages published to the host by a real spill and its acks.

From the guard survivors of the first mutation run of the file (docs/mutation-survivors.md,
"Files run for the first time").
"""

from __future__ import annotations

import pytest

from hisparse.spec.messages import CONNECTOR_METADATA, WORKER_META
from tests.connector_helpers import Children, children


def _published(c: Children) -> None:
    """Request ``a`` (pages k0, k1) runs, both pages spill, the acks come back: k0 and k1
    are published host pages; then ``a`` finishes."""
    c.coord.add_request("a", ("k0", "k1"))
    adm = c.coord.admit("a")
    assert adm is not None
    c.port.admit("a", list(adm.table))
    assert c.coord.spill(("a", 1)) is not None and c.coord.spill(("a", 2)) is not None
    raw = c.hs.build_connector_meta()
    assert raw is not None
    c.hs_w.bind_metadata(c.hs_w.parse_metadata(raw))
    c.port.land(None)
    up = c.hs_w.get_worker_meta()
    assert up is not None
    c.hs.apply_worker_meta(c.hs.parse_worker_meta(up))
    c.coord.finish("a")
    c.port.release("a")


@pytest.fixture
def system() -> Children:
    c = children()
    _published(c)
    c.coord.add_request("b", ("k0", "k1", "k2"))
    assert c.coord.lookup_prefix("b") == 2  # two pages, 8 tokens, on the host
    return c


def _hosts(table: tuple[tuple[str, int], ...]) -> int:
    return sum(1 for where, _ in table if where == "host")


@pytest.mark.parametrize(("computed", "matched"), [(0, 8), (3, 5), (8, 0), (12, 0)])
def test_matched_tokens_are_the_host_hit_beyond_the_computed_ones(
    system: Children, computed: int, matched: int
) -> None:
    assert system.hs.get_num_new_matched_tokens("b", computed) == matched


@pytest.mark.parametrize(("external", "hits"), [(0, 0), (3, 0), (4, 1), (7, 1), (8, 2),
                                                (100, 2)])
def test_the_hit_admitted_is_capped_at_the_external_tokens_given(
    system: Children, external: int, hits: int
) -> None:
    system.hs.update_state_after_alloc("b", [], external)
    adm = system.hs.admit("b")
    assert adm is not None
    assert (adm.prefix_hits, _hosts(adm.table), len(adm.table)) == (hits, hits, 3)


def test_an_admission_that_must_wait_keeps_the_external_tokens_for_the_retry(
    system: Children,
) -> None:
    c = system
    c.hs.update_state_after_alloc("b", [], 4)  # one host page, two GPU blocks
    held = c.coord.kv.allocate(3)  # one GPU block left
    assert held is not None
    assert c.hs.admit("b") is None
    c.coord.kv.free(held)
    adm = c.hs.admit("b")
    assert adm is not None and adm.prefix_hits == 1 and _hosts(adm.table) == 1


def test_tokens_given_before_an_admission_or_a_finish_do_not_carry_over(
    system: Children,
) -> None:
    """The request ID comes back (finished, then added again) with no tokens given since:
    it is admitted with no host hit, whatever the earlier admission was given."""
    c = system
    c.hs.update_state_after_alloc("b", [], 8)
    adm = c.hs.admit("b")
    assert adm is not None and adm.prefix_hits == 2
    c.coord.finish("b")
    c.coord.add_request("b", ("k0", "k1", "k2"))
    again = c.hs.admit("b")
    assert again is not None and again.prefix_hits == 0 and _hosts(again.table) == 0
    c.coord.finish("b")
    # given, then finished before it was admitted: forgotten as well
    c.coord.add_request("c", ("k0", "k1"))
    c.hs.update_state_after_alloc("c", [], 8)
    assert c.hs.request_finished("c", []) is False
    adm_c = c.hs.admit("c")
    assert adm_c is not None and adm_c.prefix_hits == 0


def test_worker_meta_bytes_are_refused_unconsumed(system: Children) -> None:
    """``apply_worker_meta`` takes the parsed meta only: its bytes (which the connector
    itself would accept) are a TypeError, and the acks in them are not consumed."""
    c = system
    c.coord.add_request("d", ("k5",))
    adm = c.coord.admit("d")
    assert adm is not None
    c.port.admit("d", list(adm.table))
    assert c.coord.spill(("d", 1)) is not None
    c.hs_w.bind_metadata(c.hs_w.parse_metadata(c.hs.build_connector_meta() or b""))
    c.port.land(None)
    up = c.hs_w.get_worker_meta()
    assert up is not None
    before = c.coord.state.clone()
    with pytest.raises(TypeError) as err:
        c.hs.apply_worker_meta(up)
    assert str(err.value) == "expected HiSparseWorkerMeta, got bytes"
    assert c.coord.state.clone() == before
    c.hs.apply_worker_meta(WORKER_META.validate_json(up))  # the same acks, parsed: taken
    assert before.open_spills and not c.coord.state.open_spills  # the spill is closed


def test_parsed_metadata_is_refused_unbound(system: Children) -> None:
    """``bind_metadata`` takes the metadata's bytes only: the parsed model (which the port
    would accept) is a TypeError, and no copy is enqueued."""
    c = system
    c.coord.add_request("d", ("k5",))
    adm = c.coord.admit("d")
    assert adm is not None
    c.port.admit("d", list(adm.table))
    assert c.coord.spill(("d", 1)) is not None
    raw = c.hs.build_connector_meta()
    assert raw is not None
    with pytest.raises(TypeError) as err:
        c.hs_w.bind_metadata(CONNECTOR_METADATA.validate_json(raw))
    assert str(err.value) == "expected the metadata's bytes, got HiSparseConnectorMetadata"
    assert c.port.queued() == ()
    c.hs_w.bind_metadata(raw)
    assert len(c.port.queued()) == 1


def test_a_hit_stops_at_the_first_page_missing_from_the_host() -> None:
    # the hit is a prefix: a later page still published after an earlier one was evicted
    # is no hit (spec/machine.py:268:loop:0 counted every published page)
    c = children()
    _published(c)
    assert c.coord.evict_published(limit=1) == 1
    prefix = c.coord.machine.state.prefix
    assert not prefix.get("k0") and prefix.get("k1")  # the least recently used went first
    c.coord.add_request("b", ("k0", "k1", "k2"))
    assert c.coord.lookup_prefix("b") == 0
    adm = c.coord.admit("b")
    assert adm is not None and adm.prefix_hits == 0 and _hosts(adm.table) == 0
