"""Rule: an injected bug's variant deviates at its one step and otherwise follows the
protocol, so the invariant that names it is what catches it.

``publish_at_enqueued`` publishes a destination at its enqueued ack; its docstring's
other half is that the completed ack, in a later meta, then only closes the transfer:
the spill is gone, the page stays published on its host block, the request can finish
and the block be evicted. Checked for every host block of the pool, with the machine's
own checks off (the variant breaks NoPublishBeforeComplete by design).
"""

from __future__ import annotations

import pytest

from hisparse.spec.constants import ProtocolConfig
from hisparse.spec.errors import ActionNotEnabled
from hisparse.spec.machine import ProtocolMachine
from tests.protocol_helpers import UNIVERSE, full_spill


def unchecked(bug: str) -> ProtocolMachine:
    cfg = ProtocolConfig(gpu_blocks=3, host_pool_bytes=9, host_block_bytes=2, bug=bug)
    m = ProtocolMachine.create(cfg, check=False)
    for r, keys in UNIVERSE.items():
        m.add_request(r, keys)
    return m


@pytest.mark.parametrize("h", [0, 1, 2, 3])
def test_publish_at_enqueued_closes_the_transfer_at_its_completed_ack(h: int) -> None:
    m = unchecked("publish_at_enqueued")
    m.Arrive("r0")
    tid = m.StartSpill(("r0", 1), h)
    m.WorkerEnqueue(tid, 0)
    m.WorkerReport(0)
    m.ConsumeMeta(0)  # the enqueued ack: published already (the bug)
    s = m.state
    assert s.host_state[h] == "valid" and s.spill[h] is not None
    m.WorkerComplete(h, 0)
    m.WorkerReport(0)
    m.ConsumeMeta(0)  # the completed ack: only closes the transfer
    assert s.spill[h] is None
    assert s.host_state[h] == "valid" and s.loc[("r0", 1)] == ("host", h)


def _two_ranks(bug: str) -> ProtocolMachine:
    cfg = ProtocolConfig(gpu_blocks=3, host_pool_bytes=9, host_block_bytes=2, ranks=2, bug=bug)
    m = ProtocolMachine.create(cfg, check=False)
    for r, keys in UNIVERSE.items():
        m.add_request(r, keys)
    return m


@pytest.mark.parametrize("aborted", [False, True])
def test_abort_frees_after_one_rank_done_deviates_only_for_an_aborted_request(
        aborted: bool) -> None:
    """The variant frees an aborted request's destination at the first rank's completed
    ack; a running request's spill follows the protocol (variants.py:93:bool:1 freed
    every destination there)."""
    states = []
    for bug in ("none", "abort_frees_after_one_rank_done"):
        m = _two_ranks(bug)
        m.Arrive("r0")
        tid = m.StartSpill(("r0", 1), 2)
        for w in (0, 1):
            m.WorkerEnqueue(tid, w)
            m.WorkerReport(w)
            m.ConsumeMeta(w)
        if aborted:
            m.Abort("r0")
        m.WorkerComplete(2, 0)
        m.WorkerReport(0)
        m.ConsumeMeta(0)  # the first rank's completed ack
        states.append(m.state.host_state[2])
    assert states == (["leased", "free"] if aborted else ["leased", "leased"])


def test_release_source_at_send_frees_the_gpu_block_at_start_spill() -> None:
    """The variant gives the source GPU block back at StartSpill (its one deviation):
    no owner, the page's entry on the host block, the block's bytes garbage; the
    protocol keeps owner, entry and bytes until the enqueued ack (variants.py:42:call:1
    kept the owner)."""
    got = {}
    for bug in ("none", "release_source_at_send"):
        m = unchecked(bug)
        m.Arrive("r0")
        where = m.state.loc[("r0", 1)]
        assert where is not None and where[0] == "gpu"
        g = int(where[1])
        m.StartSpill(("r0", 1), 1)
        s = m.state
        got[bug] = (s.gpu_owner[g], s.loc[("r0", 1)], s.gpu_data[g])
    assert got["none"] == (("r0", 1), ("gpu", 0), UNIVERSE["r0"][0])
    assert got["release_source_at_send"] == (None, ("host", 1), "garbage")


def test_retire_waits_for_host_pages_waits_only_on_the_requests_own_keys() -> None:
    """The variant keeps an ended request from retiring while a host block holds one of
    its own keys; another request's published page does not hold it up
    (variants.py:157:cmp:14 waited on every other key)."""
    cfg = ProtocolConfig(gpu_blocks=3, host_pool_bytes=9, host_block_bytes=2,
                         bug="retire_waits_for_host_pages")
    m = ProtocolMachine.create(cfg, check=False)
    m.add_request("a", ("ka",))
    m.add_request("b", ("kb",))
    m.Arrive("b")
    full_spill(m, ("b", 1), 0)  # published: host block 0 holds b's key
    m.Arrive("a")
    m.Finish("a")
    m.Retire("a")  # nothing of a's on a host block: retired as the protocol would
    assert "a" not in m.state.req
    m.Finish("b")
    with pytest.raises(ActionNotEnabled, match="a host block still holds a key of 'b'"):
        m.Retire("b")  # the deviation: its own key is still on host block 0
