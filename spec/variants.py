"""The injected bugs' replacement steps (registered in spec/catalogue.py).

Each function replaces one named small step of ProtocolMachine (same signature, the
machine first) in the subclass that a config naming the bug builds (machine_class);
the production step is ``production().<step>``. The spec's ``Bug`` branches in
tla/HiSparse.tla say the same.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hisparse.spec.lifecycle import TRANSFER
from hisparse.spec.state import GARBAGE, HostBlock, ImportTarget, Meta, Page, Tier

if TYPE_CHECKING:
    from hisparse.spec.machine import ProtocolMachine


def production() -> type[ProtocolMachine]:
    """The class of the production steps (imported late: the machine imports this module
    through the catalogue)."""
    from hisparse.spec.machine import ProtocolMachine

    return ProtocolMachine


def double_allocation(m: ProtocolMachine) -> bool:
    """Arrive's candidates include GPU blocks already resident for another page."""
    return True


def round_up_pool(m: ProtocolMachine) -> int:
    """StartSpill sizes the host pool rounded up."""
    cfg = m.state.config
    return -(-cfg.host_pool_bytes // cfg.host_block_bytes)


def release_source_at_send(m: ProtocolMachine, p: Page, g: int, h: HostBlock) -> None:
    """StartSpill releases the source lease at once instead of pinning it."""
    m._set_loc(p, ("host", h))
    m._own(g, None)
    m.state.gpu_data[g] = GARBAGE


def batched_done_before_enqueued(
    m: ProtocolMachine, meta: Meta, enqueued_now: set[int], w: int
) -> list[int]:
    """Completions are matched before this meta's enqueued IDs; unmatched ones are dropped."""
    s = m.state
    return [
        h
        for h in m._resolve_ids(meta.completed, None, enqueued_now, w)
        if (sp := s.spill[h]) is not None and sp.phase == "enqueued"
    ]


def publish_at_enqueued(m: ProtocolMachine, w: int, enq: list[int], done: list[int]) -> None:
    """The enqueued ack publishes the destination; its completed ack only closes it."""
    s = m.state
    early = [h for h in done if s.host_state[h] == "valid"]  # published at its enqueued ack
    production()._apply_meta(m, w, enq, [h for h in done if h not in early])
    for h in early:
        sp = s.spill[h]
        if sp is not None:
            sp = sp._replace(need=sp.need - m._one[w])
            s.spill[h] = sp
            if not sp.need:
                TRANSFER.next(sp.phase, "completed_ack")
                m._set_spill(h, None)
    for h in enq:
        sp = s.spill[h]
        if sp is not None and sp.phase == "enqueued" and s.host_state[h] == "leased":
            m._publish(h)


def release_source_at_first_enqueued(
    m: ProtocolMachine, first: list[int], full: list[int]
) -> list[int]:
    """The GPU source goes back at the first rank's enqueued ack."""
    return first


def publish_after_one_rank_done(m: ProtocolMachine, h: int) -> bool:
    """One rank's completed ack publishes the page while other ranks still copy."""
    sp = m.state.spill[h]
    return sp is not None and m.state.req[sp.page[0]] != "aborted" and sp.phase == "enqueued"


def abort_frees_after_one_rank_done(m: ProtocolMachine, h: int) -> bool:
    """An aborted request's destination is freed at the first rank's completed ack."""
    sp = m.state.spill[h]
    return sp is not None and m.state.req[sp.page[0]] == "aborted"


def reader_skips_writer_event(m: ProtocolMachine) -> bool:
    """A reader of a shared pool acks without ordering its stream after the writer's copy."""
    return False


def writer_skips_reader_done(m: ProtocolMachine) -> bool:
    """The writer of a shared pool copies without waiting on the readers' read-done events."""
    return False


def host_id_as_gpu_index(m: ProtocolMachine, h: int) -> tuple[Tier, HostBlock]:
    """The enqueued ack writes the host block ID as a GPU block-table entry."""
    return ("gpu", HostBlock(h))


def enqueued_ack_keeps_pin(m: ProtocolMachine, g: int) -> None:
    """The enqueued ack forgets to release the source pin."""


def abort_frees_inflight_host(m: ProtocolMachine, r: str, how: str) -> list[int]:
    """Abort also frees the destinations of the request's open transfers."""
    s = m.state
    mine = set(s.pages_of(r))
    freed = production()._end(m, r, how)
    if how == "abort":
        for h, sp in enumerate(s.spill):
            if sp is not None and sp.page in mine:
                s.host_used -= s.host_state[h] != "free"
                s.host_state[h] = "free"
                s.host_key[h] = None
                m._set_spill(h, None)
    return freed


def abort_keeps_resident_blocks(
    m: ProtocolMachine, how: str, resident: list[tuple[Page, int]]
) -> list[int]:
    """Abort hands no GPU block back to HMA."""
    return [] if how == "abort" else production()._freed_at_end(m, how, resident)


def evict_referenced_host(m: ProtocolMachine, h: int) -> bool:
    """EvictHost ignores block-table references."""
    return True


def evict_keeps_index(m: ProtocolMachine, h: int, k: str) -> None:
    """EvictHost leaves the page in the prefix index."""


def retire_inflight(m: ProtocolMachine, r: str) -> str | None:
    """Retire ignores resident leases and open transfers."""
    return None


def retire_waits_for_host_pages(m: ProtocolMachine, r: str) -> str | None:
    """Retire also waits until no host block holds one of the request's keys."""
    why = production().retire_refusal(m, r)
    if why:
        return why
    keys = set(m.state.page_keys[r])
    if any(k in keys for k in m.state.host_key):
        return f"a host block still holds a key of {r!r}"
    return None


def worker_drops_transfer(m: ProtocolMachine) -> bool:
    """The worker may lose a received command."""
    return True


def recover_frees_busy_destination(m: ProtocolMachine) -> bool:
    """Worker-loss recovery closes a sent transfer whose copy is still running."""
    return False


def recover_publishes_unsent(m: ProtocolMachine, busy: bool) -> bool:
    """Worker-loss recovery publishes a sent transfer's idle destination."""
    return not busy


def worker_skips_gap(m: ProtocolMachine, w: int) -> bool:
    """WorkerEnqueue takes a command past a gap and forgets the gap (resynchronizes)."""
    m.state.lost[w] = False
    return False


def worker_applies_replay(m: ProtocolMachine, src: int, dst: int, w: int) -> bool:
    """IgnoreReplay executes every replayed command as a fresh one."""
    return True


def worker_forgets_published(m: ProtocolMachine, src: int, dst: int, w: int) -> bool:
    """IgnoreReplay executes a replay of a transfer whose page is published (the worker
    pruned its record of the transfer at publication)."""
    s = m.state
    return s.host_state[dst] == "valid" and s.spill[dst] is None


def loss_path_ignores_gaps(m: ProtocolMachine, w: int) -> bool:
    """WorkerLoss runs only for a restart: a rank with a noticed gap is never recovered."""
    return not m.state.lost[w]


# -- P/D import (docs/pd-import.md; model pd) ------------------------------------------


def retarget_on_retry(m: ProtocolMachine, r: str) -> ImportTarget:
    """AdmitImport recomputes the target from the pools of the retry."""
    return m.target_for(r)


def staging_unbounded(m: ProtocolMachine) -> bool:
    """LeaseStaging ignores the staging pool's bound."""
    return True


def release_before_mirror(m: ProtocolMachine, p: Page) -> bool:
    """ReleaseStaging does not wait for the mirror of an immediately needed page."""
    return True


def report_partial_page(m: ProtocolMachine, r: str) -> bool:
    """The worker reports an import done once every page has some chunk copied, slots
    held or not (ReportImport drops them with the report)."""
    s = m.state
    return all(s.pg_of((r, i)).landed for i in range(1, len(s.page_keys[r]) + 1))


def fail_keeps_host_blocks(m: ProtocolMachine) -> bool:
    """FailImport leaves the import's host blocks leased (its pages still name them)."""
    return False


def import_done_unreported(m: ProtocolMachine, r: str) -> bool:
    """The worker never reports an import done."""
    return False
