"""The coordinator with tensor-parallel ranks: one worker meta per rank, merged by the
spec's rule (docs/tensor-parallel.md), refusals that change nothing, per-rank loss."""

from __future__ import annotations

from typing import Any

import pytest

from hisparse.blockpool import BlockPool
from hisparse.connector import HiSparseConnector, KVConnectorRole
from hisparse.coordinator import HiSparseCoordinator
from hisparse.spec.errors import (
    AckNotOwed,
    ActionNotEnabled,
    RepeatedAck,
    UnknownRank,
    UnknownTransfer,
)
from hisparse.spec.messages import WORKER_META, HiSparseWorkerMeta
from tests.protocol_helpers import checked_coordinator, everything


def make(
    ranks: int = 2, backing: str = "private", gpu: int = 8, host: int = 4
) -> tuple[HiSparseCoordinator, BlockPool]:
    return checked_coordinator(gpu, host, ranks, backing)


def ack(
    c: HiSparseCoordinator, rank: int, enq: tuple[int, ...] = (), done: tuple[int, ...] = ()
) -> None:
    c.on_worker_meta(HiSparseWorkerMeta.model_construct(enqueued=enq, completed=done, rank=rank))


def host(c: HiSparseCoordinator, h: int = 0) -> str:
    """Host block h's state (a call, so a type checker does not narrow it across acks)."""
    return c.state.host_state[h]


def handed(c: HiSparseCoordinator, r: str = "a", key: str = "a0") -> int:
    """Admit r (one page), spill it and hand the command over; returns its transfer ID."""
    c.add_request(r, [key])
    c.admit(r)
    tid = c.spill((r, 1))
    assert tid is not None
    transfers, _ = c.take_commands()
    assert [t.transfer_id for t in transfers] == [tid]
    assert transfers[0].ranks is None  # the same command for every rank
    return tid


def test_private_source_released_when_every_rank_enqueued_page_published_when_all_done() -> None:
    c, kv = make()
    tid = handed(c)
    g = c.state.spill[0].src  # type: ignore[union-attr]
    ack(c, 0, enq=(tid,))
    sp = c.state.spill[0]
    assert sp is not None and sp.phase == "sent" and sp.enq == {0}
    assert c.state.src_pin[g] and g in kv._pinned  # rank 1's stream may still read it
    assert c.take_commands()[1] == ()  # no block-table replacement yet
    ack(c, 1, enq=(tid,))
    assert not c.state.src_pin[g] and g not in kv._pinned
    assert c.state.loc[("a", 1)] == ("host", 0)
    assert [r.host_block for r in c.take_commands()[1]] == [0]
    ack(c, 0, done=(tid,))
    assert host(c) == "leased"  # rank 1's copy is still in flight
    assert c.lookup_prefix("a") == 0
    ack(c, 1, done=(tid,))
    assert host(c) == "valid" and c.state.spill[0] is None
    c.add_request("b", ["a0"])
    assert c.lookup_prefix("b") == 1


def test_private_a_rank_may_complete_before_the_other_enqueues() -> None:
    c, kv = make()
    tid = handed(c)
    ack(c, 0, enq=(tid,), done=(tid,))  # rank 0's copy landed; rank 1 has not started
    sp = c.state.spill[0]
    assert sp is not None and sp.phase == "sent" and sp.need == {1}
    ack(c, 1, enq=(tid,), done=(tid,))
    assert c.state.host_state[0] == "valid"
    assert kv._pinned == set() and c.table_sizes()["open_spills"] == 0


def test_shared_reader_acks_once_and_the_page_publishes_at_the_writers_completion() -> None:
    c, kv = make(backing="shared")
    tid = handed(c)
    before = everything(c, kv)
    with pytest.raises(ActionNotEnabled):  # the writer's enqueue was not consumed yet
        ack(c, 1, enq=(tid,))
    assert everything(c, kv) == before
    ack(c, 0, enq=(tid,))
    ack(c, 1, enq=(tid,))  # the reader's last ack: its reads are ordered after the copy
    sp = c.state.spill[0]
    assert sp is not None and sp.phase == "enqueued" and sp.need == {0}
    before = everything(c, kv)
    with pytest.raises(AckNotOwed):  # a reader copies nothing
        ack(c, 1, done=(tid,))
    assert everything(c, kv) == before
    ack(c, 0, done=(tid,))
    assert c.state.host_state[0] == "valid" and c.state.spill[0] is None


def test_shared_reader_last_ack_may_close_the_transfer() -> None:
    c, _ = make(backing="shared")
    tid = handed(c)
    ack(c, 0, enq=(tid,), done=(tid,))  # the writer is done before the reader orders
    assert host(c) == "leased"
    ack(c, 1, enq=(tid,))
    assert host(c) == "valid" and c.state.spill[0] is None


@pytest.mark.parametrize(
    ("name", "refused", "error"),
    [
        ("unknown rank", lambda c, t: ack(c, 2, enq=(t,)), UnknownRank),
        ("negative rank", lambda c, t: ack(c, -1, enq=(t,)), UnknownRank),
        ("repeated enqueued", lambda c, t: ack(c, 0, enq=(t,)), RepeatedAck),
        ("repeated within a meta", lambda c, t: ack(c, 1, enq=(t, t)), UnknownTransfer),
        ("completed twice", lambda c, t: ack(c, 0, done=(t,)), RepeatedAck),
        ("never handed over", lambda c, t: ack(c, 1, enq=(t + 1,)), UnknownTransfer),
    ],
)
def test_refused_rank_acks_change_nothing(name: str, refused: Any, error: type) -> None:
    c, kv = make()
    tid = handed(c)
    ack(c, 0, enq=(tid,))  # rank 0 enqueued; rank 1 has not
    if name == "completed twice":  # rank 0's completed ack is consumed once first
        ack(c, 0, done=(tid,))
    before = everything(c, kv)
    with pytest.raises(error):
        refused(c, tid)
    assert everything(c, kv) == before, name
    ack(c, 1, enq=(tid,), done=(tid,))  # the legitimate acks still work
    if name != "completed twice":
        ack(c, 0, done=(tid,))
    assert c.state.host_state[0] == "valid"


def test_ack_from_a_rank_whose_loss_dropped_the_command_is_refused() -> None:
    c, kv = make()
    tid = handed(c)
    ack(c, 0, enq=(tid,))
    c.on_worker_lost((), rank=1)  # rank 1 restarted before taking the command
    sp = c.state.spill[0]
    assert sp is not None and sp.phase == "abandoned" and sp.need == {0}
    before = everything(c, kv)
    with pytest.raises(AckNotOwed):
        ack(c, 1, enq=(tid,))
    assert everything(c, kv) == before
    ack(c, 0, done=(tid,))  # rank 0's copy lands: nothing owed, the abandoned one closes
    assert c.state.spill[0] is None and c.state.host_state[0] == "free"
    assert c.state.loc[("a", 1)] is not None and c.state.loc[("a", 1)][0] == "gpu"


def test_unknown_rank_loss_changes_nothing() -> None:
    c, kv = make()
    handed(c)
    before = everything(c, kv)
    with pytest.raises(UnknownRank):
        c.on_worker_lost((), rank=2)
    assert everything(c, kv) == before


def test_a_command_dropped_for_a_lost_rank_still_goes_to_the_others() -> None:
    c, kv = make()
    c.add_request("a", ["a0"])
    c.admit("a")
    tid = c.spill(("a", 1))
    assert tid is not None
    c.on_worker_lost((), rank=1)  # before the command was handed over
    transfers, _ = c.take_commands()
    assert [(t.transfer_id, t.ranks) for t in transfers] == [(tid, (0,))]
    ack(c, 0, enq=(tid,), done=(tid,))
    assert c.state.spill[0] is None and c.state.host_state[0] == "free"
    assert c.spillable() == [("a", 1)]  # abandoned: the page stays resident, spillable again
    assert kv._pinned == set()


def test_connector_takes_any_ranks_meta_as_bytes() -> None:
    c, _ = make()
    tid = handed(c)
    conn = HiSparseConnector(KVConnectorRole.SCHEDULER, coordinator=c)
    for w in (1, 0):
        raw = HiSparseWorkerMeta(enqueued=(tid,), completed=(tid,), rank=w).model_dump_json()
        conn.update_connector_output(raw.encode())
    assert c.state.host_state[0] == "valid"
    assert WORKER_META.validate_json(b'{"enqueued": [1]}').rank == 0  # W = 1 callers
