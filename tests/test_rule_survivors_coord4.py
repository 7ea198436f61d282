"""Rules of the coordinator's P/D import admission and teardown that survivors of the
whole mutation run showed (docs/mutation-run7): each line ran, but no test asserted its
effect."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from hisparse.blockpool import BlockPool
from hisparse.coordinator import HiSparseCoordinator
from hisparse.spec.errors import UnknownImport
from hisparse.spec.messages import HiSparseWorkerMeta
from tests.protocol_helpers import (
    attributes,
    checked_coordinator,
    everything,
)
from tests.test_coordinator_import import command, meta

# the coordinator's own per-import tables (hisparse/coordinator.py, P/D import): an
# import that ended holds an entry in none of them
IMPORT_TABLES = (
    "_import_req", "_import_of", "_import_size", "_landed", "_imports_unsent",
    "_aborts_unsent", "_import_sent",
)


def import_tables(c: HiSparseCoordinator) -> dict[str, Any]:
    state = attributes(c)
    return {name: state[name] for name in IMPORT_TABLES}


# --- admission --------------------------------------------------------------------------


def test_an_import_of_one_token_per_block_declares_one_page_per_token() -> None:
    # a block of one token is a block: three tokens are three pages of one row each
    # (kills coordinator.py:352:int:3, which took a block size of 1 for no block size)
    c, kv = checked_coordinator(gpu=4)
    c.add_import("r", ["k1", "k2", "k3"], num_tokens=3, block_size=1)
    assert c.state.req["r"] == "new" and c.state.imp["r"].phase == "announced"
    assert c.admit_import("r") == "device"
    cmd = command(c)
    assert (cmd.num_tokens, cmd.block_size) == (3, 1)
    assert [(p.page_index, p.key, p.valid_rows) for p in cmd.pages] == [
        (1, "k1", 1), (2, "k2", 1), (3, "k3", 1)]
    assert kv.num_free == 1
    with pytest.raises(ValueError, match=r"^3 tokens in blocks of 1 are not 2 pages$"):
        c.add_import("q", ["k1", "k2"], num_tokens=3, block_size=1)
    assert "q" not in c.state.req


@pytest.mark.parametrize(
    ("gpu", "keys", "target", "leased"),
    [
        (2, ("k1", "k2"), "device", 2),  # a GPU block per page: the whole pool
        (1, ("k1", "k2"), "host", 1),  # the mirrored final page: the pool's one block
    ],
)
def test_an_import_needing_exactly_the_whole_gpu_pool_is_admitted(
    gpu: int, keys: tuple[str, ...], target: str, leased: int
) -> None:
    # a request that needs every GPU block fits (kills coordinator.py:383:cmp:8, which
    # refused it as RequestNeverFits)
    c, kv = checked_coordinator(gpu=gpu, host=4)
    c.add_import("r", list(keys), num_tokens=4 * len(keys), block_size=4)
    assert c.admit_import("r") == target
    assert c.state.req["r"] == "importing" and kv.num_free == gpu - leased
    assert command(c).target == target


# --- teardown: an ended import leaves every table ---------------------------------------


def end_by_completion(c: HiSparseCoordinator, kv: BlockPool) -> int:
    c.add_import("r", ["k1", "k2"], num_tokens=7, block_size=4)
    assert c.admit_import("r") == "device"
    iid = command(c).import_id
    c.on_worker_meta(meta({iid: (2,)}))
    c.on_worker_meta(meta({iid: (1,)}, done=(iid,)))
    assert c.state.req["r"] == "running"
    c.finish("r")
    return iid


def end_host_import_by_completion(c: HiSparseCoordinator, kv: BlockPool) -> int:
    c.add_request("busy", ["b"])
    assert c.admit("busy") is not None  # the pool's other block: r goes to host
    c.add_import("r", ["k1", "k2"], num_tokens=8, block_size=4)
    assert c.admit_import("r") == "host"
    iid = command(c).import_id
    c.on_worker_meta(meta({iid: (1, 2)}, done=(iid,)))
    assert c.state.req["r"] == "running"
    c.finish("r")
    c.finish("busy")
    return iid


def end_by_failed_ack(c: HiSparseCoordinator, kv: BlockPool) -> int:
    c.add_import("r", ["k1", "k2"], num_tokens=8, block_size=4)
    c.admit_import("r")
    iid = command(c).import_id
    c.on_worker_meta(meta({iid: (1,)}))
    c.on_worker_meta(meta(failed=(iid,)))
    return iid


def end_by_abort_before_handover(c: HiSparseCoordinator, kv: BlockPool) -> int:
    c.add_import("r", ["k1", "k2"], num_tokens=8, block_size=4)
    c.admit_import("r")
    (cmd,) = attributes(c)["_imports_unsent"]  # queued, not handed over yet
    c.abort("r")
    assert c.take_imports() == ((), ())
    return int(cmd.import_id)


def end_by_abort_mid_import(c: HiSparseCoordinator, kv: BlockPool) -> int:
    c.add_import("r", ["k1", "k2"], num_tokens=8, block_size=4)
    c.admit_import("r")
    iid = command(c).import_id
    c.on_worker_meta(meta({iid: (1,)}))
    c.abort("r")
    assert c.take_imports() == ((), (iid,))
    c.on_worker_meta(meta(failed=(iid,)))
    return iid


def end_by_abort_crossing_the_done_ack(c: HiSparseCoordinator, kv: BlockPool) -> int:
    c.add_import("r", ["k1", "k2"], num_tokens=8, block_size=4)
    c.admit_import("r")
    iid = command(c).import_id
    c.abort("r")
    c.on_worker_meta(meta({iid: (1, 2)}, done=(iid,)))
    return iid


def end_by_worker_loss(c: HiSparseCoordinator, kv: BlockPool) -> int:
    c.add_import("r", ["k1", "k2"], num_tokens=8, block_size=4)
    c.admit_import("r")
    iid = command(c).import_id
    c.on_worker_meta(meta({iid: (2,)}))
    c.on_worker_lost(())
    return iid


ENDINGS: dict[str, Callable[[HiSparseCoordinator, BlockPool], int]] = {
    "completed": end_by_completion,
    "completed on host": end_host_import_by_completion,
    "failed ack": end_by_failed_ack,
    "aborted before handover": end_by_abort_before_handover,
    "aborted mid-import": end_by_abort_mid_import,
    "abort crossing done": end_by_abort_crossing_the_done_ack,
    "worker lost": end_by_worker_loss,
}


@pytest.mark.parametrize("ending", sorted(ENDINGS))
def test_an_admitted_import_that_ended_leaves_every_import_table(ending: str) -> None:
    # cost follows live work: once its request has ended, the import's ID, size, landed
    # pages and handed-over mark are gone (kills coordinator.py:549:call:25,
    # 550:call:26, 551:call:27 and 552:call:28, which each kept one of them)
    c, kv = checked_coordinator(gpu=2, host=4)
    ENDINGS[ending](c, kv)
    assert "r" not in c.state.req  # ended and retired
    assert import_tables(c) == {
        "_import_req": {}, "_import_of": {}, "_import_size": {}, "_landed": {},
        "_imports_unsent": [], "_aborts_unsent": [], "_import_sent": set(),
    }
    assert c.importing() == 0 and not c.awaiting_acks()
    assert kv.num_free == 2


@pytest.mark.parametrize(
    ("ack", "why"),
    [
        (lambda i: meta({i: (1,)}), r"^import \d+: landed pages of an import never handed over$"),
        (lambda i: meta(done=(i,)), r"^import \d+: done ack of an import never handed over$"),
        (lambda i: meta(failed=(i,)), r"^import \d+: failed ack of an import never handed over$"),
    ],
)
@pytest.mark.parametrize("ending", ["completed", "failed ack", "worker lost"])
def test_an_ack_of_an_import_that_already_ended_is_refused_by_name_and_changes_nothing(
    ending: str, ack: Callable[[int], HiSparseWorkerMeta], why: str
) -> None:
    # a late or repeated ack for an import that ended is one of no live import: refused
    # like one never handed over (kills coordinator.py:552:call:28, which kept the import
    # marked handed over: the ack got past the check and raised a KeyError)
    c, kv = checked_coordinator(gpu=2, host=4)
    ended = ENDINGS[ending](c, kv)
    before = everything(c, kv)
    with pytest.raises(UnknownImport, match=why):
        c.on_worker_meta(ack(ended))
    assert everything(c, kv) == before
