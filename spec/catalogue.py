"""The protocol catalogue: one declarative entry per action of tla/HiSparse.tla.

Everything else that names an action derives from here: the trace format's action
names, argument models and required writes (spec/trace.py, docs/trace.schema.json),
``ACTION_WRITES`` (spec/observe.py), the generated TLA+ replay module
(hisparse/tracecheck/module.py, encode.py), the test helpers' move list and the sync
test. Adding an action means: the TLA+ action, its ProtocolMachine method of the same
name, and one entry here; ``disagreements`` (run by tests/test_protocol_sync.py)
names any mismatch between the three.

An injected bug is a ``Variant`` of one action: it replaces one named small step (a
guard or an effect, a ProtocolMachine method) for a machine whose config names the
bug, so production rules contain no bug names (spec/variants.py holds the
replacements).
"""

from __future__ import annotations

import ast
import inspect
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from hisparse.spec import variants
from hisparse.spec.lifecycle import LIFECYCLES
from hisparse.spec.state import ProtocolState
from hisparse.spec.tracetypes import BlockId, Chunk, Frozen, Name, Page, Rank

# The spec's variables, in the order of its ``vars`` tuple (and of a trace's ``post``).
VARIABLES: tuple[str, ...] = (
    "req", "loc", "gpuOwner", "srcPin", "hostState", "hostKey", "prefix", "spill",
    "down", "up", "lost", "copying", "waits", "reading", "wEnq", "wDone", "gpuData", "hostData",
    "imp", "pg",
)
# The variables indexed by rank (``[Ranks -> ...]``; ``hostData`` by copier rank).
RANKED_VARIABLES: tuple[str, ...] = (
    "down", "up", "lost", "copying", "waits", "reading", "wEnq", "wDone", "hostData",
)

# --- argument models (one step of a trace) ---------------------------------------------


class RequestArgs(Frozen):
    """A request ID."""

    request: Name


class SpillArgs(Frozen):
    """The page to spill and its destination host block."""

    page: Page
    host_block: BlockId


class HostBlockArgs(Frozen):
    """A host block ID."""

    host_block: BlockId


class TransferArgs(Frozen):
    """A SparseKVPageTransfer taken from rank ``rank``'s ``down``: source GPU block,
    destination host block."""

    src: BlockId
    dst: BlockId
    rank: Rank


class RankHostBlockArgs(Frozen):
    """A host block ID on one rank."""

    host_block: BlockId
    rank: Rank


class PageArgs(Frozen):
    """A page of an import."""

    page: Page


class PageChunkArgs(Frozen):
    """A page of an import and one of its chunks (1-based)."""

    page: Page
    chunk: Chunk


class RankArgs(Frozen):
    """A tensor-parallel rank (0-based; the trace encoding maps it to the spec's 1..W)."""

    rank: Rank


class NoArgs(Frozen):
    """An action without arguments."""


# What a test driver enumerates to call the ProtocolMachine method: a request ID, a
# (page, host block) pair, a host block, a transfer ID, a replayed command's (source,
# destination), or nothing; a ``ranked`` action takes a rank after them (a transfer: one
# in that rank's ``down``; a replay: one of the spec's Replayable(w)).
Domain = Literal[
    "request", "page_host", "host_block", "transfer", "replay", "page", "page_chunk", "none"
]
# How one field of the replay record is written in TLA+ (hisparse/tracecheck/encode.py):
# a name, a page, a GPU or host block, or the host/GPU blocks an Arrive chose (read off
# its ``loc`` change) or an AdmitImport leased (its ``gpuOwner`` and ``pg`` changes), so
# TLC need not enumerate the choice.
Encoding = Literal[
    "name", "page", "gpu", "host", "rank", "chunk", "arrive_hosts", "arrive_blocks",
    "admit_blocks", "admit_hosts",
]
# The encodings read off a step's changes, not its arguments (a choice the action made).
WITNESSES = frozenset({"arrive_hosts", "arrive_blocks", "admit_blocks", "admit_hosts"})
BugKind = Literal["invariant", "property"]


@dataclass(frozen=True)
class Variant:
    """An injected bug: ``impl`` replaces ProtocolMachine's step ``step`` (same signature,
    the machine first) when the config names ``bug``; TLC and pytest catch it by
    ``catches``. ``writes``: variables it writes beyond the action's own."""

    bug: str
    catches: str
    kind: BugKind
    summary: str
    step: str
    impl: Callable[..., Any]
    writes: tuple[str, ...] = ()
    model: str = "small"  # the TLC model (tla/MC_<model>) whose run catches it


@dataclass(frozen=True)
class Action:
    """One protocol action: how traces record it, how TLC replays it, what it fires."""

    name: str
    args: type[Frozen]
    domain: Domain
    writes: tuple[str, ...]  # in the correct spec; a trace step must report them all
    replay: str  # TLA+ expression over the step record ``e``
    tla_args: tuple[tuple[str, Encoding], ...] = ()  # fields of ``e.args``
    triggers: tuple[tuple[str, str], ...] = ()  # (lifecycle, trigger) it may fire
    variants: tuple[Variant, ...] = ()
    injected_only: bool = False  # enabled only by one of its variants (the spec: Bug = ...)
    ranked: bool = False  # taken by one rank: the method's last argument, ``rank`` in traces
    readers_only: bool = False  # enabled only on a reader rank of a shared pool (W > 1)

    @property
    def all_writes(self) -> tuple[str, ...]:
        """Its writes and those of its variants, in spec order (what a recorder reports)."""
        extra = {v for var in self.variants for v in var.writes}
        return tuple(v for v in VARIABLES if v in self.writes or v in extra)


_SEND = ("loc", "gpuOwner", "gpuData")
_CONSUMED = ("loc", "gpuOwner", "gpuData", "srcPin", "spill", "hostState", "hostKey")
_HOST_PAGE_OUT = (("host_page", "publish"), ("host_page", "discard"))

CATALOGUE: tuple[Action, ...] = (
    Action(
        "Arrive", RequestArgs, "request", ("req", "loc", "gpuOwner", "gpuData"),
        "ArriveWith(e.args.request, e.args.hosts, e.args.blocks)",
        (("request", "name"), ("hosts", "arrive_hosts"), ("blocks", "arrive_blocks")),
        (("request", "arrive"),),
        (Variant("double_allocation", "NoDoubleOwnership", "invariant",
                 "arrival allocates a GPU block that is already resident for another page",
                 "_leased_is_candidate", variants.double_allocation),),
    ),
    Action(
        "Finish", RequestArgs, "request", ("req", "loc", "gpuOwner", "gpuData"),
        "Finish(e.args.request)", (("request", "name"),), (("request", "finish"),),
    ),
    Action(
        "Abort", RequestArgs, "request", ("req", "loc", "gpuOwner", "gpuData"),
        "Abort(e.args.request)", (("request", "name"),), (("request", "abort"),),
        (
            Variant("abort_frees_inflight_host", "NoDoubleOwnership", "invariant",
                    "abort frees the destination host block while its copy is in flight",
                    "_end", variants.abort_frees_inflight_host,
                    ("hostState", "hostKey", "spill")),
            Variant("abort_keeps_resident_blocks", "AbortedFreed", "property",
                    "abort does not return the request's unpinned GPU blocks to HMA",
                    "_freed_at_end", variants.abort_keeps_resident_blocks),
        ),
    ),
    Action(
        "StartSpill", SpillArgs, "page_host", ("hostState", "hostKey", "spill", "down", "srcPin"),
        "StartSpill(e.args.page, e.args.host_block)",
        (("page", "page"), ("host_block", "host")), (("host_page", "lease"),),
        (
            Variant("release_source_at_send", "NoReuseBeforeEnqueued", "invariant",
                    "the source lease is released when the transfer is sent, not at the "
                    "enqueued ack", "_pin_source", variants.release_source_at_send, _SEND),
            Variant("round_up_pool", "HostPoolNotOvercommitted", "invariant",
                    "the host pool size is rounded up instead of down",
                    "_spill_capacity", variants.round_up_pool),
        ),
    ),
    Action(
        "EvictHost", HostBlockArgs, "host_block", ("hostState", "hostKey", "prefix", "hostData"),
        "EvictHost(e.args.host_block)", (("host_block", "host"),), (("host_page", "evict"),),
        (
            Variant("evict_keeps_index", "PublishedDataCorrect", "invariant",
                    "evicting a host page leaves it in the prefix index",
                    "_unindex", variants.evict_keeps_index),
            Variant("evict_referenced_host", "LivePagesReadable", "invariant",
                    "a host page still referenced by a live request is evicted",
                    "_evictable", variants.evict_referenced_host),
        ),
    ),
    Action(
        "Retire", RequestArgs, "request", ("req", "imp", "pg"),
        "Retire(e.args.request)", (("request", "name"),), (("request", "retire"),),
        (
            Variant("retire_inflight", "RetiredUnreferenced", "invariant",
                    "a request retires once its block-table entries are gone, while its "
                    "transfer is still open and its pinned source still leased",
                    "_open_refs_refusal", variants.retire_inflight),
            Variant("retire_waits_for_host_pages", "EndedRetired", "property",
                    "retirement also waits until no host block holds one of the request's "
                    "keys, so a request whose page was published never retires",
                    "retire_refusal", variants.retire_waits_for_host_pages),
        ),
    ),
    Action(
        "ConsumeMeta", RankArgs, "none", (*_CONSUMED, "prefix", "hostData", "up"),
        "ConsumeMeta(e.args.rank)", (("rank", "rank"),),
        (("transfer", "enqueued_ack"), ("transfer", "completed_ack"), *_HOST_PAGE_OUT),
        (
            Variant("host_id_as_gpu_index", "TypeOK", "invariant",
                    "the enqueued ack writes a host block id into the GPU block table",
                    "_moved_entry", variants.host_id_as_gpu_index),
            Variant("enqueued_ack_keeps_pin", "NoLeaseLeaked", "invariant",
                    "the enqueued ack releases the resident block but forgets the source pin",
                    "_unpin", variants.enqueued_ack_keeps_pin),
            Variant("publish_at_enqueued", "NoPublishBeforeComplete", "invariant",
                    "the host page is published at the enqueued ack",
                    "_apply_meta", variants.publish_at_enqueued),
            Variant("batched_done_before_enqueued", "LeasesReleased", "property",
                    "in one batched worker meta, completed IDs are processed before enqueued "
                    "IDs and a completion for a not-yet-enqueued transfer is dropped",
                    "_completed_hosts", variants.batched_done_before_enqueued),
            Variant("release_source_at_first_enqueued", "NoReuseBeforeEnqueued", "invariant",
                    "the GPU source goes back at the first rank's enqueued ack, while another "
                    "rank's stream may still read it", "_released_sources",
                    variants.release_source_at_first_enqueued, model="tp"),
            Variant("publish_after_one_rank_done", "NoPublishBeforeComplete", "invariant",
                    "the host page is published at the first rank's completed ack (private "
                    "backing: another rank's copy may still be in flight)", "_closes_early",
                    variants.publish_after_one_rank_done, model="tp"),
            Variant("abort_frees_after_one_rank_done", "NoDoubleOwnership", "invariant",
                    "an aborted request's destination is freed at the first rank's completed "
                    "ack, while another rank still copies into it", "_closes_early",
                    variants.abort_frees_after_one_rank_done, model="tp"),
        ),
        ranked=True,
    ),
    Action(
        "WorkerEnqueue", TransferArgs, "transfer", ("down", "copying", "waits", "wEnq"),
        "WorkerEnqueue(e.args.rank, [src |-> e.args.src, dst |-> e.args.dst])",
        (("rank", "rank"), ("src", "gpu"), ("dst", "host")), (),
        (
            Variant("worker_skips_gap", "GapsDetected", "invariant",
                    "after a lost connector metadata the worker takes the next command "
                    "anyway and resynchronizes its sequence number, skipping the gap",
                    "_gap_blocks", variants.worker_skips_gap, ("lost",), model="ci"),
            Variant("reader_skips_writer_event", "LivePagesReadable", "invariant",
                    "a reader rank of a shared host pool acks a command without ordering its "
                    "stream after the writer's copy event", "_reader_orders_after_writer",
                    variants.reader_skips_writer_event, model="tpshared"),
            Variant("writer_skips_reader_done", "NoOverwriteUnderRead", "invariant",
                    "the writer of a shared host pool copies into a block a reader's queued "
                    "reads may still read (it does not wait on the reader's read-done event)",
                    "_writer_waits_for_readers", variants.writer_skips_reader_done,
                    model="tpshared"),
        ),
        ranked=True,
    ),
    Action(
        "WorkerDrop", TransferArgs, "transfer", ("down",),
        "WorkerDrop(e.args.rank, [src |-> e.args.src, dst |-> e.args.dst])",
        (("rank", "rank"), ("src", "gpu"), ("dst", "host")), (),
        (Variant("worker_drops_transfer", "GapsDetected", "invariant",
                 "the worker may drop a received transfer command without enqueuing it "
                 "(and reports no gap)",
                 "_worker_may_drop", variants.worker_drops_transfer),),
        injected_only=True,
        ranked=True,
    ),
    Action(
        "WorkerComplete", RankHostBlockArgs, "host_block",
        ("hostData", "copying", "waits", "wDone"),
        "WorkerComplete(e.args.rank, e.args.host_block)",
        (("rank", "rank"), ("host_block", "host")), ranked=True,
    ),
    Action("WorkerReport", RankArgs, "none", ("up", "wEnq", "wDone"),
           "WorkerReport(e.args.rank)", (("rank", "rank"),), ranked=True),
    Action("WorkerRead", RankArgs, "none", ("reading",),
           "WorkerRead(e.args.rank)", (("rank", "rank"),), ranked=True, readers_only=True),
    Action("WorkerReadsDone", RankArgs, "none", ("reading",),
           "WorkerReadsDone(e.args.rank)", (("rank", "rank"),), ranked=True,
           readers_only=True),
    Action(
        "WorkerLoss", RankArgs, "none",
        ("down", "up", "lost", "wEnq", "wDone", "srcPin", "gpuOwner", "gpuData", "spill",
         "hostState", "hostKey", "prefix", "hostData", "imp", "pg"),
        "WorkerLoss(e.args.rank)", (("rank", "rank"),),
        (("transfer", "lost_running"), ("transfer", "lost_idle"), *_HOST_PAGE_OUT),
        (
            Variant("recover_frees_busy_destination", "NoDoubleOwnership", "invariant",
                    "worker-loss recovery frees the destination of a transfer whose copy is "
                    "still running", "_loss_waits_for_busy",
                    variants.recover_frees_busy_destination),
            Variant("loss_path_ignores_gaps", "TransfersComplete", "property",
                    "the engine runs the worker-loss path only for a restart, never for a "
                    "noticed gap: the rank refuses every later message for good",
                    "_loss_path_runs", variants.loss_path_ignores_gaps, model="ci"),
            Variant("recover_publishes_unsent", "PublishedDataCorrect", "invariant",
                    "worker-loss recovery publishes a destination no copy is running into, "
                    "though its command may never have been enqueued",
                    "_loss_publishes_sent", variants.recover_publishes_unsent),
        ),
        ranked=True,
    ),
    # the faulty channels (the system never records these: a receiver's ignored
    # replay is a stutter, a noticed gap is WorkerLoss)
    Action(
        "IgnoreReplay", TransferArgs, "replay", (),
        "IgnoreReplay(e.args.rank, [src |-> e.args.src, dst |-> e.args.dst])",
        (("rank", "rank"), ("src", "gpu"), ("dst", "host")), (),
        (
            Variant("worker_applies_replay", "ReplayNotExecuted", "invariant",
                    "the worker executes a replayed connector metadata's command again "
                    "(no sequence-number check)", "_executes_replay",
                    variants.worker_applies_replay, ("copying", "wEnq"), model="ci"),
            Variant("worker_forgets_published", "PublishedPageStable", "invariant",
                    "the worker forgets a transfer once its page is published and executes "
                    "a later replay of it, copying a reused GPU block over the published "
                    "page", "_executes_replay", variants.worker_forgets_published,
                    ("copying", "wEnq"), model="ci"),
        ),
        ranked=True,
    ),
    Action(
        "LoseCommand", TransferArgs, "transfer", ("down", "lost"),
        "LoseCommand(e.args.rank, [src |-> e.args.src, dst |-> e.args.dst])",
        (("rank", "rank"), ("src", "gpu"), ("dst", "host")), ranked=True,
    ),
    Action("LoseMeta", RankArgs, "none", ("up", "lost"), "LoseMeta(e.args.rank)",
           (("rank", "rank"),), ranked=True),
    # P/D import (docs/pd-import.md)
    Action("ImportArrive", RequestArgs, "request", ("imp",), "ImportArrive(e.args.request)",
           (("request", "name"),)),
    Action("ChooseTarget", RequestArgs, "request", ("imp",), "ChooseTarget(e.args.request)",
           (("request", "name"),)),
    Action(
        "AdmitImport", RequestArgs, "request",
        ("req", "gpuOwner", "hostState", "hostKey", "imp", "pg"),
        "AdmitImportWith(e.args.request, e.args.blocks, e.args.hosts)",
        (("request", "name"), ("blocks", "admit_blocks"), ("hosts", "admit_hosts")),
        (("request", "admit_import"), ("host_page", "lease")),
        (Variant("retarget_on_retry", "ImportTargetStable", "invariant",
                 "admission recomputes the landing target from the pools of the retry",
                 "_admit_target", variants.retarget_on_retry, model="pd"),),
    ),
    Action(
        "LeaseStaging", PageArgs, "page", ("pg",), "LeaseStaging(e.args.page)",
        (("page", "page"),), (),
        (Variant("staging_unbounded", "StagingBounded", "invariant",
                 "the worker leases a staging slot beyond the pool's bound",
                 "_staging_room", variants.staging_unbounded, model="pd"),),
    ),
    Action("LandChunk", PageChunkArgs, "page_chunk", ("gpuData", "pg"),
           "LandChunk(e.args.page, e.args.chunk)", (("page", "page"), ("chunk", "chunk"))),
    Action("CopyToHost", PageArgs, "page", ("hostData", "pg"), "CopyToHost(e.args.page)",
           (("page", "page"),)),
    Action("MirrorPage", PageArgs, "page", ("gpuData",), "MirrorPage(e.args.page)",
           (("page", "page"),)),
    Action(
        "ReleaseStaging", PageArgs, "page", ("pg",), "ReleaseStaging(e.args.page)",
        (("page", "page"),), (),
        (Variant("release_before_mirror", "MirrorBeforeRead", "invariant",
                 "the staging slot of an immediately needed page is released before its "
                 "mirror into the resident block ran", "_mirror_done",
                 variants.release_before_mirror, model="pd"),),
    ),
    Action(
        "ReportImport", RequestArgs, "request", ("imp",), "ReportImport(e.args.request)",
        (("request", "name"),), (),
        (Variant("report_partial_page", "ImportPublishedComplete", "invariant",
                 "the worker reports an import done once every page has some chunk at its "
                 "destination, not every chunk", "_reported", variants.report_partial_page,
                 ("pg",), model="pd"),
         Variant("import_done_unreported", "ImportsEnd", "property",
                 "the worker never sends the done ack of an import whose pages all landed",
                 "_reported", variants.import_done_unreported, model="pd")),
    ),
    Action("ImportError", RequestArgs, "request", ("imp", "pg"), "ImportError(e.args.request)",
           (("request", "name"),)),
    Action(
        "CompleteImport", RequestArgs, "request",
        ("req", "loc", "hostState", "prefix", "imp", "pg"),
        "CompleteImport(e.args.request)", (("request", "name"),),
        (("request", "import_done"), ("host_page", "publish")),
    ),
    Action(
        "FailImport", RequestArgs, "request",
        ("req", "gpuOwner", "gpuData", "hostState", "hostKey", "hostData", "imp", "pg"),
        "FailImport(e.args.request)", (("request", "name"),),
        (("request", "import_failed"), ("host_page", "discard")),
        (Variant("fail_keeps_host_blocks", "NoImportLeak", "invariant",
                 "a failed import's host blocks stay leased, its pages naming them",
                 "_fail_frees_hosts",
                 variants.fail_keeps_host_blocks, model="pd"),),
    ),
)

ACTIONS: dict[str, Action] = {a.name: a for a in CATALOGUE}
ACTION_NAMES: tuple[str, ...] = tuple(ACTIONS)
# bug name -> (the action it changes, the variant)
VARIANTS: dict[str, tuple[Action, Variant]] = {
    v.bug: (a, v) for a in CATALOGUE for v in a.variants
}
ARG_MODELS: tuple[type[Frozen], ...] = tuple(dict.fromkeys(a.args for a in CATALOGUE))


def arguments(s: ProtocolState, domain: Domain, ranked: bool = False) -> list[tuple[Any, ...]]:
    """Every argument tuple of a ``domain`` in state ``s``, as the machine's method takes
    them, the rank last for a ``ranked`` action (drivers enumerate these; most are
    refused)."""
    hosts = range(s.config.host_blocks)
    if ranked:
        ranks = range(s.config.ranks)
        if domain == "transfer":
            return [(tid, w) for w in ranks for tid in s.down[w]]
        if domain == "replay":
            return [(*t, w) for w in ranks for t in replayable(s, w)]
        return [(*a, w) for a in arguments(s, domain) for w in ranks]
    if domain == "request":
        return [(r,) for r in s.page_keys]
    if domain == "page_host":
        return [(p, h) for p in s.loc for h in hosts]
    if domain == "host_block":
        return [(h,) for h in hosts]
    if domain == "page":
        return [(p,) for p in s.loc]
    if domain == "page_chunk":
        return [(p, c) for p in s.loc for c in range(1, s.config.chunks + 1)]
    if domain == "transfer":
        return [(tid,) for w in s.down for tid in w]
    if domain == "replay":
        return [t for w in range(s.config.ranks) for t in replayable(s, w)]
    return [()]


def replayable(s: ProtocolState, w: int) -> list[tuple[int, int]]:
    """The spec's Replayable(w) as (source, destination): the command of an open transfer
    no longer in rank w's ``down``, or any GPU block with a published host block."""
    out = {
        (sp.src, h) for h in s.open_spills
        if (sp := s.spill[h]) is not None and sp.transfer_id not in s.down[w]
    }
    valid = [h for h, st in enumerate(s.host_state) if st == "valid"]
    out |= {(g, h) for g in range(s.config.gpu_blocks) for h in valid}
    return sorted(out)


def variant(bug: str) -> Variant:
    """The registered variant named ``bug``; ``KeyError`` lists the known names."""
    try:
        return VARIANTS[bug][1]
    except KeyError:
        known = ", ".join(sorted(VARIANTS))
        raise KeyError(f"unknown injected bug {bug!r}; known: none, {known}") from None


# --- agreement with the TLA+ spec and the machine ------------------------------------


def _definitions(spec: str) -> dict[str, str]:
    """Top-level TLA+ definitions: name -> body (up to the next definition)."""
    heads = list(re.finditer(r"^(\w+)(?:\(([^)]*)\))? ==", spec, re.M))
    out: dict[str, str] = {}
    for i, m in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(spec)
        out[m.group(1)] = spec[m.end():end]
    return out


def _arity(spec: str) -> dict[str, int]:
    return {
        m.group(1): len([x for x in (m.group(2) or "").split(",") if x.strip()])
        for m in re.finditer(r"^(\w+)(?:\(([^)]*)\))? ==", spec, re.M)
    }


def _names(text: str) -> set[str]:
    return set(re.findall(r"\b[A-Za-z_]\w*\b", text))


def spec_actions(spec: str) -> set[str]:
    """The actions the spec's next-state relation names (SchedulerNext, WorkerNext)."""
    defs = _definitions(spec)
    body = defs.get("SchedulerNext", "") + defs.get("WorkerNext", "")
    called = set(re.findall(r"\b([A-Z]\w*)\s*(?:\(|$|\n|\\/)", body))
    return {n for n in called if n in defs}


def spec_variables(spec: str) -> tuple[str, ...]:
    """The spec's ``vars`` tuple."""
    m = re.search(r"^vars == <<(.*?)>>", spec, re.M | re.S)
    return tuple(v.strip() for v in m.group(1).split(",")) if m else ()


def _reach(defs: dict[str, str], root: str) -> set[str]:
    """``root`` and every definition its body uses, transitively."""
    seen, todo = set(), [root]
    while todo:
        n = todo.pop()
        if n in seen or n not in defs:
            continue
        seen.add(n)
        todo += _names(defs[n]) & set(defs)
    return seen


def _expand(defs: dict[str, str], names: Iterable[str]) -> set[str]:
    """Variable names, with tuple definitions (``schedVars``) expanded."""
    out: set[str] = set()
    for n in names:
        body = defs.get(n, "")
        if body.strip().startswith("<<"):
            out |= _expand(defs, re.findall(r"\w+", body))
        else:
            out.add(n)
    return out


def spec_writes(spec: str, action: str) -> set[str]:
    """The variables ``action`` may write: all but those its top-level conjunct
    ``UNCHANGED`` (four spaces in, in it or the definition it is replayed through)."""
    defs = _definitions(spec)
    unchanged: set[str] = set()
    for body in (defs.get(action, ""), defs.get(f"{action}With", "")):
        for m in re.finditer(r"^    /\\ UNCHANGED (<<.*?>>|\w+)", body, re.M | re.S):
            unchanged |= _expand(defs, re.findall(r"\w+", m.group(1)))
    return set(spec_variables(spec)) - unchanged


def _source(obj: Any) -> str:
    """The source of a class or of a method of one. A compiled build's native code
    carries no source for ``inspect``: read it from the ``.py`` beside the ``.so``."""
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        pass
    owner = obj if isinstance(obj, type) else getattr(obj, "__objclass__", None)
    cls_name, _, name = getattr(obj, "__qualname__", "").partition(".")
    mod = sys.modules.get(getattr(owner or obj, "__module__", ""))
    where = Path(str(getattr(mod, "__file__", "")))
    py = where.with_name(where.name.split(".")[0] + ".py")
    if not py.is_file():
        raise OSError(f"no source for {obj!r}")
    text = py.read_text()
    for node in ast.parse(text).body:
        if isinstance(node, ast.ClassDef) and node.name == cls_name:
            if not name:
                return ast.get_source_segment(text, node) or ""
            for f in node.body:
                if isinstance(f, ast.FunctionDef) and f.name == name:
                    return ast.get_source_segment(text, f) or ""
    raise OSError(f"no source for {obj!r} in {py}")


def _method_reach(machine: type, root: str) -> str:
    """The source of ``machine.root`` and of every method it calls on ``self``, transitively."""
    seen: set[str] = set()
    todo, out = [root], []
    while todo:
        name = todo.pop()
        fn = getattr(machine, name, None)
        if name in seen or not callable(fn):
            continue
        seen.add(name)
        try:
            text = _source(fn)
        except (OSError, TypeError):
            continue
        out.append(text)
        todo += re.findall(r"self\.(\w+)\(", text)
    return "\n".join(out)


def disagreements(
    spec: str, machine: type, catalogue: tuple[Action, ...] = CATALOGUE
) -> list[str]:
    """Every way the TLA+ text ``spec``, the machine class and ``catalogue`` disagree
    (empty: they agree). Checked by tests/test_protocol_sync.py."""
    out: list[str] = []
    names = [a.name for a in catalogue]
    if len(set(names)) != len(names):
        out.append(f"catalogue names an action twice: {names}")
    in_spec, in_cat = spec_actions(spec), set(names)
    in_machine = {
        n for n in vars(machine) if n[:1].isupper() and callable(getattr(machine, n))
    }
    if in_spec != in_cat:
        out.append(f"spec actions {sorted(in_spec)} != catalogue {sorted(in_cat)}")
    if in_machine != in_cat:
        out.append(f"machine actions {sorted(in_machine)} != catalogue {sorted(in_cat)}")
    if spec_variables(spec) != VARIABLES:
        out.append(f"spec variables {spec_variables(spec)} != catalogue {VARIABLES}")
    defs, arity = _definitions(spec), _arity(spec)
    triggers = {(lc.name, t) for lc in LIFECYCLES for t, _, _ in lc.rows}
    fired: set[tuple[str, str]] = set()
    bugs: list[str] = []
    for a in catalogue:
        if a.name not in defs:
            continue  # reported above
        op = re.match(r"(\w+)(?:\((.*)\))?$", a.replay, re.S)
        if not op or op.group(1) not in defs:
            out.append(f"{a.name}: replay {a.replay!r} names no spec definition")
        else:
            params = op.group(2)
            n = len(re.split(r",(?![^\[]*\])", params)) if params else 0
            if arity.get(op.group(1)) != n:
                out.append(f"{a.name}: replay passes {n} arguments to {op.group(1)}")
            used = set(re.findall(r"e\.args\.(\w+)", a.replay))
            if used != {f for f, _ in a.tla_args}:
                out.append(f"{a.name}: replay reads {sorted(used)}, encoding gives "
                           f"{sorted(f for f, _ in a.tla_args)}")
        model_fields = set(a.args.model_fields)
        plain = {f for f, e in a.tla_args if e not in WITNESSES}
        if plain != model_fields:
            out.append(f"{a.name}: argument model {sorted(model_fields)} != "
                       f"encoded fields {sorted(plain)}")
        gated = re.search(r'^    /\\ Bug = "\w+"\s*$', defs[a.name], re.M) is not None
        if gated != a.injected_only:
            out.append(f"{a.name}: injected_only={a.injected_only}, but the spec's guard "
                       f"{'tests' if gated else 'does not test'} Bug")
        possible = spec_writes(spec, a.name)
        if set(a.all_writes) != possible:
            out.append(f"{a.name}: catalogue writes {sorted(a.all_writes)} != "
                       f"spec {sorted(possible)}")
        if not set(a.writes) <= set(VARIABLES):
            out.append(f"{a.name}: writes name unknown variables")
        body = _method_reach(machine, a.name) if a.name in in_machine else ""
        for t in a.triggers:
            if t not in triggers:
                out.append(f"{a.name}: fires undeclared lifecycle trigger {t}")
            elif body and f'"{t[1]}"' not in body:
                out.append(f"{a.name}: the machine's {a.name} never fires {t[1]!r}")
        fired |= set(a.triggers)
        reach = _reach(defs, a.name) | _reach(defs, f"{a.name}With")
        text = "".join(defs[n] for n in reach)
        for v in a.variants:
            bugs.append(v.bug)
            if not re.search(rf'Bug [=#] "{v.bug}"', text):
                out.append(f"{a.name}: spec's {a.name} does not test Bug for {v.bug}")
            step = getattr(machine, v.step, None)
            if not callable(step):
                out.append(f"{v.bug}: machine has no step {v.step}")
            if v.catches not in defs:
                out.append(f"{v.bug}: catches {v.catches}, which the spec does not define")
    if fired != triggers:
        out.append(f"lifecycle triggers no action fires: {sorted(triggers - fired)}")
    source = _source(machine)
    named = sorted(b for b in bugs if f'"{b}"' in source)
    if named:
        out.append(f"production rules name injected bugs {named}: register them as variants")
    spec_bugs = set(re.findall(r'Bug [=#] "(\w+)"', spec))
    if set(bugs) != spec_bugs or len(bugs) != len(set(bugs)):
        out.append(f"spec bugs {sorted(spec_bugs)} != catalogue variants {sorted(bugs)}")
    return out
