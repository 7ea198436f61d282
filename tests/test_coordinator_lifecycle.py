"""The coordinator over a long life: retirement, ID reuse, refusals that change
nothing, worker loss, requests that can never fit, and tables bounded by live work.
Each scenario is one the issue reported against the public API."""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest

from hisparse.bench.churn import Churn, drained_problems, run
from hisparse.blockpool import BlockPool
from hisparse.config import GIB, HiSparseConfig
from hisparse.connector import HiSparseConnector, KVConnectorRole
from hisparse.coordinator import HiSparseCoordinator, RequestNeverFits
from hisparse.executor.reference import ReferenceExecutor
from hisparse.spec import machine as machine_module
from hisparse.spec.errors import ActionNotEnabled, UnknownTransfer
from hisparse.spec.machine import ProtocolMachine
from hisparse.spec.messages import HiSparseWorkerMeta
from hisparse.worker import HiSparseWorker
from tests.protocol_helpers import attributes

BLOCK = 64 * 656


def make(gpu: int = 8, host: int = 4) -> tuple[HiSparseCoordinator, BlockPool]:
    cfg = HiSparseConfig(host_pool_gib=(host * BLOCK + BLOCK // 2) / GIB)
    kv = BlockPool(gpu)
    return HiSparseCoordinator(cfg, kv, gpu_blocks=gpu, check=True), kv


def everything(c: HiSparseCoordinator, kv: BlockPool) -> Any:
    """Protocol state, the coordinator's own tables and HMA's pool."""
    own = {k: v for k, v in attributes(c).items() if k not in ("machine", "kv")}
    return c.state.clone(), copy.deepcopy(own), copy.deepcopy(vars(kv))


def ack(c: HiSparseCoordinator, enq: tuple[int, ...] = (), done: tuple[int, ...] = ()) -> None:
    c.on_worker_meta(HiSparseWorkerMeta.model_construct(enqueued=enq, completed=done))


def spilled(c: HiSparseCoordinator, r: str, key: str, *, enq: bool = True) -> int:
    """Admit r (one page, content ``key``), spill the page, hand the command to the worker
    and, with ``enq``, consume its enqueued ack; returns the transfer ID."""
    c.add_request(r, [key])
    c.admit(r)
    tid = c.spill((r, 1))
    assert tid is not None
    c.take_commands()
    if enq:
        ack(c, enq=(tid,))
    return tid


def test_refused_spill_leaks_no_host_block() -> None:
    c, kv = make(host=4)
    c.add_request("a", ["a0", "a1", "a2", "a3"])
    assert c.admit("a") is not None
    tid = c.spill(("a", 1))
    assert tid is not None
    c.take_commands()
    for _ in range(3):  # the same page again: pinned, so refused, and nothing taken
        before = everything(c, kv)
        with pytest.raises(ActionNotEnabled):
            c.spill(("a", 1))
        assert everything(c, kv) == before
    with pytest.raises(ActionNotEnabled):
        c.spill(("nobody", 1))
    spilled = [c.spill(("a", i)) for i in (2, 3, 4)]  # the other three blocks are usable
    assert None not in spilled
    assert c.state.host_used == 4


def test_meta_with_repeated_ids_changes_nothing_and_legit_acks_still_work() -> None:
    c, kv = make()
    c.add_request("a", ["a0"])
    c.admit("a")
    tid = c.spill(("a", 1))
    assert tid is not None
    c.take_commands()
    for enq, done in (((tid, tid), ()), ((tid,), (tid, tid)), ((), (tid,))):
        before = everything(c, kv)
        with pytest.raises(UnknownTransfer):
            ack(c, enq, done)
        assert everything(c, kv) == before
    ack(c, (tid,), (tid,))
    assert c.state.host_state[0] == "valid"


def test_lost_metadata_unpins_and_returns_the_lease_after_abort() -> None:
    c, kv = make()
    c.add_request("a", ["a0", "a1"])
    c.admit("a")
    tid = c.spill(("a", 1))
    assert tid is not None
    c.take_commands()  # this step's metadata never reaches the worker
    c.abort("a")
    assert "a" in c.state.req  # its pinned source keeps it referenced
    c.on_worker_lost(())
    assert kv.num_free == kv.num_blocks and not kv.is_pinned(0)
    assert c.state.host_used == 0 and "a" not in c.state.req  # retired
    assert drained_problems_of(c, kv) == []
    c.add_request("a", ["b0"])  # the ID is free again
    assert c.admit("a") is not None


def test_loss_keeps_a_destination_still_being_copied() -> None:
    c, kv = make()
    c.add_request("a", ["a0"])
    c.admit("a")
    tid = c.spill(("a", 1))
    assert tid is not None
    c.take_commands()  # the worker enqueued it; the ack died with the worker
    c.on_worker_lost((tid,))
    assert not kv.is_pinned(0)  # the page stays resident; its source is free to reuse
    assert c.state.spill[0] is not None and c.state.spill[0].phase == "abandoned"
    held = c.state.host_state[0]
    assert held == "leased"  # not free: the copy may still write it
    ack(c, done=(tid,))  # the copy lands and its completion comes back
    after = c.state.host_state[0]
    assert after == "free" and c.state.prefix == {}  # nothing published
    with pytest.raises(UnknownTransfer):
        c.on_worker_lost((tid,))  # no longer open


def test_loss_completes_a_copy_that_landed() -> None:
    c, kv = make()
    spilled(c, "a", "a0")
    c.on_worker_lost(())  # the stream no longer runs it: the completed ack was lost
    assert c.state.host_state[0] == "valid" and c.state.prefix == {"a0": {0}}
    c.finish("a")
    assert drained_problems_of(c, kv, evict=True) == []


def test_request_that_can_never_fit_gets_a_typed_error() -> None:
    c, kv = make(gpu=4)
    c.add_request("big", [f"k{i}" for i in range(5)])
    before = everything(c, kv)
    with pytest.raises(RequestNeverFits) as err:
        c.admit("big")
    assert err.value.need == 5 and err.value.pool == 4
    assert str(err.value) == (
        "request 'big' needs 5 GPU blocks beyond its prefix hits; the pool holds 4: "
        "split or truncate it, or raise the GPU pool"
    )
    assert everything(c, kv) == before
    c.abort("big")
    assert c.state.req == {}


def drained_problems_of(c: HiSparseCoordinator, kv: BlockPool, evict: bool = False) -> list[str]:
    if evict:
        c.evict_published()
    out = [f"{k} {n}" for k, n in c.table_sizes().items() if n]
    if c.state.host_used:
        out.append("host blocks in use")
    if kv.num_free != kv.num_blocks:
        out.append("GPU blocks in use")
    return out


def test_tables_follow_live_requests_not_history() -> None:
    """Thousands of lifecycles with evictions: every table is bounded by the live
    requests and the host pool, and a drain empties all of them."""
    ch = Churn(host_blocks=32, live=8)
    sizes = []
    for i in range(3000):
        ch.lifecycle(i)
        if i in (999, 2999):
            sizes.append(ch.coordinator.table_sizes())
    live_pages = ch.live * ch.pages
    bounds = {"req": ch.live, "page_keys": ch.live, "running": ch.live, "loc": live_pages,
              "resident": live_pages, "req_refs": ch.live, "prefix": 32, "host_refs": 32}
    for seen in sizes:  # after 1,000 and after 3,000 lifecycles alike
        assert {k: n for k, n in seen.items() if n > bounds.get(k, 1)} == {}
    assert ch.coordinator.retired == 3000 - ch.live and ch.evicting_spills > 2000
    ch.drain()
    assert drained_problems(ch) == []


def test_churn_bench_drains_to_empty() -> None:
    t0 = time.perf_counter()
    doc = run(2000, host_blocks=128, eviction_pools=(128, 256))
    took = time.perf_counter() - t0
    # the headline shape's wall time lies within the call's own (churn.py:199:arith:1
    # added its start), and its rate is the requests over it (as rounded)
    assert 0 < doc["wall_seconds"] <= round(took, 2)
    assert doc["requests_per_wall_s"] >= 2000 / took - 0.1
    # the CPU time covers every decile of it (churn.py:198:var:12 kept the last one's)
    # ... and the ten deciles are its ten tenths, nearly all of it (churn.py:192:cmp:10
    # timed single requests instead)
    tenth = 2000 // 10
    deciles_cpu = sum(doc["per_request_cpu_us_by_decile"]) * tenth / 1e6
    assert deciles_cpu - 0.01 <= doc["cpu_seconds"] <= deciles_cpu + 0.02
    # the memory growth is measured from the end of the first decile
    # (churn.py:196:cmp:12 took every later one)
    assert doc["rss_warm_after_requests"] == tenth
    assert doc["left_after_drain"] == []
    assert doc["acks"] == "pipelined"  # the headline shape
    # which build ran: the sources, or tools/build_compiled.py's modules
    assert (doc["build"] == "python") == str(machine_module.__file__).endswith(".py")
    assert doc["retired"] == 2000 and doc["prefix_hits"] > 0
    assert len(doc["per_request_cpu_us_by_decile"]) == 10
    assert all(e["evicting_spills"] > 0 for e in doc["eviction"])
    assert sorted(doc["by_acks"]) == ["pipelined", "split"]  # both shapes, each run whole
    assert all(r["retired"] == 2000 for r in doc["by_acks"].values())


@pytest.mark.parametrize("acks", ["pipelined", "split"])
def test_churn_shapes_pass_every_invariant_and_drain(acks: str) -> None:
    """Both shapes of acks are behaviours of the spec: invariants after every action,
    and each lifecycle's transfer closes (pipelined: at the next lifecycle's meta)."""
    ch = Churn(host_blocks=16, live=4, acks=acks, check=True)
    for i in range(200):
        ch.lifecycle(i)
        open_now = len(ch.coordinator.state.open_spills)
        assert open_now == (1 if acks == "pipelined" else 0)
    assert ch.coordinator.machine.invariant_checks > 200 * 8  # checked, action by action
    assert ch.coordinator.retired == 200 - ch.live and ch.evicting_spills > 100
    ch.drain()
    assert drained_problems(ch) == []


def test_churn_refuses_an_unknown_shape_of_acks() -> None:
    with pytest.raises(ValueError, match="acks"):
        Churn(host_blocks=16, acks="batched")
    with pytest.raises(ValueError, match="acks"):
        run(10, acks=("split", "nope"))


def test_connector_carries_a_restart() -> None:
    c, _kv = make()
    sched = HiSparseConnector(KVConnectorRole.SCHEDULER, coordinator=c)
    c.add_request("a", ["a0"])
    c.admit("a")
    c.spill(("a", 1))
    assert sched.build_connector_meta() is not None  # lost on the way
    sched.on_worker_lost(())
    assert c.state.host_used == 0 and c.state.down == [{}]


def test_a_loss_returns_an_unsent_destination_to_the_free_heap() -> None:
    c, _kv = make(host=1)
    c.add_request("a", ["a0", "a1"])
    c.admit("a")
    assert c.spill(("a", 1)) is not None
    assert c.spill(("a", 2)) is None  # the pool's one host block is the destination
    c.take_commands()  # lost with the worker before it was enqueued
    c.on_worker_lost(())
    assert c.state.host_state[0] == "free" and c.state.spill[0] is None
    assert c.spill(("a", 2)) is not None  # the abandoned destination is handed out again
    sp = c.state.spill[0]
    assert sp is not None and sp.page == ("a", 2)


def test_an_abandoned_copy_that_lands_frees_its_destination_for_reuse() -> None:
    c, _kv = make(host=1)
    c.add_request("a", ["a0", "a1"])
    c.admit("a")
    tid = c.spill(("a", 1))
    assert tid is not None
    c.take_commands()
    c.on_worker_lost((tid,))  # still copying: the destination is held
    assert c.spill(("a", 2)) is None
    ack(c, done=(tid,))  # the copy lands; nothing is published
    assert c.state.host_state[0] == "free" and c.state.prefix == {}
    assert c.spill(("a", 2)) is not None  # the destination went back to the free heap
    sp = c.state.spill[0]
    assert sp is not None and sp.page == ("a", 2)


def test_resync_after_a_loss_resends_exactly_the_host_entries_of_running_requests() -> None:
    c, _kv = make()
    c.add_request("a", ["a0", "a1"])
    c.add_request("b", ["b0"])
    c.admit("a")
    c.admit("b")
    tid = c.spill(("a", 2))
    assert tid is not None
    c.take_commands()
    ack(c, (tid,), (tid,))
    _, reps = c.take_commands()  # the enqueued ack's replacement, sent once
    assert [(x.request_id, x.page_index, x.host_block) for x in reps] == [("a", 2, 0)]
    assert c.take_commands() == ((), ())
    c.on_worker_lost(())  # that metadata may have been lost: resend every host entry
    transfers, reps = c.take_commands()
    assert transfers == ()
    assert [(x.request_id, x.page_index, x.host_block) for x in reps] == [("a", 2, 0)]
    assert c.take_commands() == ((), ())  # once


def test_a_finished_request_retires_when_its_last_transfer_completes() -> None:
    c, _kv = make()
    tid = spilled(c, "a", "a0")
    c.finish("a")
    assert "a" in c.state.req and c.retired == 0  # its open transfer still names it
    ack(c, done=(tid,))
    assert "a" not in c.state.req and c.retired == 1
    assert c.state.host_state[0] == "valid"  # published, and the ID is free again


def test_admit_hands_the_blocks_back_when_the_machine_refuses() -> None:
    """Arrive cannot refuse after check_arrive through the public API; a refusal
    injected there must still leave HMA's pool and every table as they were."""
    c, kv = make()

    class Refusing(ProtocolMachine):  # (a subclass: the compiled machine has no __dict__)
        def Arrive(self, *_: object, **__: object) -> None:
            raise ActionNotEnabled("Arrive", "injected refusal")

    c.machine = Refusing(c.machine.state.config, check=True)
    c.add_request("a", ["a0", "a1"])

    def pool(kv: BlockPool) -> Any:  # the free set, not the heap's layout
        return sorted(kv._free), list(kv._is_free), set(kv._pinned)

    before = everything(c, kv)[:2], pool(kv)
    with pytest.raises(ActionNotEnabled, match="injected refusal"):
        c.admit("a")
    assert (everything(c, kv)[:2], pool(kv)) == before
    assert kv.num_free == kv.num_blocks


def test_worker_role_connector_refuses_scheduler_recovery() -> None:
    w = HiSparseConnector(KVConnectorRole.WORKER, worker=_worker())
    with pytest.raises(RuntimeError, match="scheduler"):
        w.on_worker_lost(())


def _worker() -> HiSparseWorker:
    cfg = HiSparseConfig(host_pool_gib=4 * BLOCK / GIB)
    return HiSparseWorker(cfg, ReferenceExecutor(), gpu_blocks=8, slots=2)


def test_loss_report_must_name_transfers_the_worker_was_given() -> None:
    c, kv = make()
    c.add_request("a", ["a0", "a1"])
    c.admit("a")
    tid = c.spill(("a", 1))  # open, but not yet handed over by take_commands
    assert tid is not None
    before = everything(c, kv)
    with pytest.raises(UnknownTransfer, match="never handed to the worker"):
        c.on_worker_lost((tid,))
    assert everything(c, kv) == before
    c.take_commands()
    ack(c, enq=(tid,))  # enqueued: no longer awaiting its ack, but still copying
    c.on_worker_lost((tid,))  # accepted: the stream still runs it
    sp = c.state.spill[0]
    assert sp is not None and sp.phase == "enqueued" and c.state.host_state[0] == "leased"


def test_a_host_hit_is_no_eviction_victim_while_referenced() -> None:
    c, kv = make()
    tid = spilled(c, "a", "x0")
    ack(c, done=(tid,))
    c.finish("a")  # the published page is unreferenced: an eviction candidate
    c.add_request("b", ["x0"])
    # its one page is a prefix hit: it needs no GPU block beyond it (coordinator.py's
    # 180:arith:5 added the hits to the pages instead)
    assert (c.lookup_prefix("b"), c.gpu_blocks_needed("b")) == (1, 0)
    admission = c.admit("b")
    assert admission is not None and admission.table == (("host", 0),)  # the prefix hit
    assert c.evict_published() == 0  # referenced by b again: not a victim
    assert c.state.host_state[0] == "valid"
    c.finish("b")
    assert c.evict_published() == 1  # unreferenced again
    c.take_commands()  # the pending block-table replacements reach the worker
    assert drained_problems_of(c, kv) == []


def test_a_page_published_by_a_loss_becomes_evictable_once_unreferenced() -> None:
    c, kv = make()
    spilled(c, "a", "a0")
    c.finish("a")  # nothing references the host page; it is not published yet
    c.on_worker_lost(())  # the copy landed, its completed ack was lost: published
    assert c.state.host_state[0] == "valid"
    assert c.evict_published() == 1  # the recovery made it an eviction candidate
    assert (c.state.host_state[0], c.state.prefix) == ("free", {})
    assert drained_problems_of(c, kv) == []


def test_a_page_whose_request_ended_becomes_evictable_when_its_copy_completes() -> None:
    c, kv = make()
    tid = spilled(c, "a", "a0")
    c.finish("a")  # ends before its completed ack: nothing references the page
    ack(c, done=(tid,))  # published now, by the completed ack
    assert c.state.host_state[0] == "valid"
    assert c.evict_published() == 1  # the completion made it an eviction candidate
    c.take_commands()  # the pending block-table replacements reach the worker
    assert drained_problems_of(c, kv) == []


def test_every_fourth_churn_request_from_the_first_starts_with_a_repeated_prefix() -> None:
    # the bench's workload as documented (churn.py:101:int:0 shifted it by one)
    ch = Churn(host_blocks=64)
    for i in range(9):
        ch.lifecycle(i)
    first_keys = {r: keys[0] for r, keys in ch.coordinator.state.page_keys.items()}
    assert first_keys == {f"r{i}": ("prefix" + str(i // 4) if i % 4 == 0 else f"r{i}:0")
                          for i in range(9)}


@pytest.mark.parametrize("lifecycles", [1, 2])
def test_a_churn_of_one_lifecycle_drains_its_first_transfer_too(lifecycles: int) -> None:
    # the first transfer's ID is 0: still a transfer to complete at the drain
    # (churn.py:144:none:2 read ID 0 as none pending)
    ch = Churn(host_blocks=64)
    for i in range(lifecycles):
        ch.lifecycle(i)
    assert ch.pending == lifecycles - 1  # pipelined: the last completed ack rides later
    ch.drain()
    assert drained_problems(ch) == [] and ch.pending is None


def test_the_churn_drivers_own_list_stays_bounded() -> None:
    # the finished head of its running list is cut past 4096 (churn.py:138:var:30 tied
    # the cut to the host pool's size: a small pool never cut it)
    ch = Churn(host_blocks=64, live=4)
    for i in range(4096 + 200):
        ch.lifecycle(i)
        assert len(ch.running) <= 4096 + ch.live + 1
    assert ch.head < 200 and len(ch.running) - ch.head == ch.live
