"""Registry of bugs that can be injected into the TLA+ model.

Each entry is a deliberate protocol mistake that the spec guards with ``Bug = name``.
``hisparse check --inject NAME`` turns it on and expects TLC to report ``catches``:
this proves every invariant and property has teeth instead of passing vacuously.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

BugKind = Literal["invariant", "property"]


@dataclass(frozen=True)
class InjectedBug:
    """One injectable bug: what it breaks and which check must catch it."""

    name: str
    catches: str
    kind: BugKind
    summary: str


BUGS: tuple[InjectedBug, ...] = (
    InjectedBug(
        "host_id_as_gpu_index",
        "TypeOK",
        "invariant",
        "the enqueued ack writes a host block id into the GPU block table",
    ),
    InjectedBug(
        "double_allocation",
        "NoDoubleOwnership",
        "invariant",
        "arrival allocates a GPU block that is already resident for another page",
    ),
    InjectedBug(
        "abort_frees_inflight_host",
        "NoDoubleOwnership",
        "invariant",
        "abort frees the destination host block while its copy is in flight",
    ),
    InjectedBug(
        "enqueued_ack_keeps_pin",
        "NoLeaseLeaked",
        "invariant",
        "the enqueued ack releases the resident block but forgets the source pin",
    ),
    InjectedBug(
        "release_source_at_send",
        "NoReuseBeforeEnqueued",
        "invariant",
        "the source lease is released when the transfer is sent, not at the enqueued ack",
    ),
    InjectedBug(
        "publish_at_enqueued",
        "NoPublishBeforeComplete",
        "invariant",
        "the host page is published at the enqueued ack",
    ),
    InjectedBug(
        "evict_keeps_index",
        "PublishedDataCorrect",
        "invariant",
        "evicting a host page leaves it in the prefix index",
    ),
    InjectedBug(
        "evict_referenced_host",
        "LivePagesReadable",
        "invariant",
        "a host page still referenced by a live request is evicted",
    ),
    InjectedBug(
        "recover_frees_busy_destination",
        "NoDoubleOwnership",
        "invariant",
        "worker-loss recovery frees the destination of a transfer whose copy is still running",
    ),
    InjectedBug(
        "recover_publishes_unsent",
        "PublishedDataCorrect",
        "invariant",
        "worker-loss recovery publishes a destination no copy is running into, though its "
        "command may never have been enqueued",
    ),
    InjectedBug(
        "round_up_pool",
        "HostPoolNotOvercommitted",
        "invariant",
        "the host pool size is rounded up instead of down",
    ),
    InjectedBug(
        "retire_inflight",
        "RetiredUnreferenced",
        "invariant",
        "a request retires once its block-table entries are gone, while its transfer is "
        "still open and its pinned source still leased",
    ),
    InjectedBug(
        "worker_drops_transfer",
        "TransfersComplete",
        "property",
        "the worker may drop a received transfer command without enqueuing it",
    ),
    InjectedBug(
        "batched_done_before_enqueued",
        "LeasesReleased",
        "property",
        "in one batched worker meta, completed IDs are processed before enqueued IDs "
        "and a completion for a not-yet-enqueued transfer is dropped",
    ),
    InjectedBug(
        "abort_keeps_resident_blocks",
        "AbortedFreed",
        "property",
        "abort does not return the request's unpinned GPU blocks to HMA",
    ),
    InjectedBug(
        "retire_waits_for_host_pages",
        "EndedRetired",
        "property",
        "retirement also waits until no host block holds one of the request's keys, so a "
        "request whose page was published never retires",
    ),
)


def get_bug(name: str) -> InjectedBug:
    """Look a bug up by name; ``KeyError`` lists the valid names."""
    for bug in BUGS:
        if bug.name == name:
            return bug
    raise KeyError(f"unknown bug {name!r}; known: {', '.join(b.name for b in BUGS)}")
