"""Wire messages between scheduler and worker (pydantic v2, frozen, no extras).

The scheduler sends one ``HiSparseConnectorMetadata`` down per step (carried in
kv_connector_metadata); the worker returns one ``HiSparseWorkerMeta`` up (carried
in kv_connector_worker_meta). They are validated once, at the process boundary,
through the two TypeAdapters below; inside a process they are passed as is.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

BlockId = int
# The most bytes one message may have when it crosses a process boundary, checked
# before it is parsed: ~150k transfers or replacements, far past one step's commands.
MAX_MESSAGE_BYTES = 16 << 20
W = TypeVar("W", bound="_Wire")
_set = object.__setattr__
_new = object.__new__


class _Wire(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class SparseKVPageTransfer(_Wire):
    """One GPU-to-host page copy: its ID and physical coordinates, no request identity.

    The same connector metadata goes to every tensor-parallel rank; ``ranks`` names the
    ranks that take this command when not all do (a rank's loss dropped it for that
    rank before it was handed over), None: every rank."""

    transfer_id: int = Field(ge=0)
    src_gpu_block: BlockId = Field(ge=0)
    dst_host_block: BlockId = Field(ge=0)
    ranks: tuple[int, ...] | None = None


class BlockTableReplacement(_Wire):
    """Point a request's logical page at a host block (after the enqueued ack)."""

    request_id: str = Field(min_length=1)
    page_index: int = Field(ge=1)
    host_block: BlockId = Field(ge=0)


ImportTarget = Literal["device", "host"]
# why a worker failed an import (HiSparseWorkerMeta.imports_failed), docs/pd-import.md
ImportFailReason = Literal["refused", "transport", "prefiller_lost", "staging", "worker_lost"]
# the longest detail text a failure carries: the reason is the field to act on
MAX_DETAIL_CHARS = 240


class PageImport(_Wire):
    """One page of an import command: where its bytes land (docs/pd-import.md).

    Device target: ``gpu_block`` is the page's resident GPU block, ``host_block`` None.
    Host target: ``host_block`` is its host source block; ``gpu_block`` set as well
    means the page is *mirrored* (needed immediately: also copied from staging into that
    resident GPU block). ``valid_rows`` < the block size only on the final page."""

    page_index: int = Field(ge=1)
    key: str = Field(min_length=1)
    host_block: BlockId | None = Field(default=None, ge=0)
    gpu_block: BlockId | None = Field(default=None, ge=0)
    valid_rows: int = Field(ge=1)


class ImportCommand(_Wire):
    """Coordinator → worker: import a request's prefill KV into the pages named here.

    ``import_id`` names the import in every acknowledgement (the worker never sees the
    request's other state); ``pages`` are the request's pages 1..n in order, each full
    but the last (``num_tokens`` need not be a multiple of ``block_size``)."""

    import_id: int = Field(ge=0)
    request_id: str = Field(min_length=1)
    target: ImportTarget
    num_tokens: int = Field(ge=1)
    block_size: int = Field(ge=1)
    pages: tuple[PageImport, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _shape(self) -> ImportCommand:
        problem = import_command_problem(self)
        if problem is not None:
            raise ValueError(problem)
        return self


def import_command_problem(cmd: ImportCommand) -> str | None:
    """Why an import command's pages disagree with its target and size, or None."""
    n = -(-cmd.num_tokens // cmd.block_size)
    if len(cmd.pages) != n:
        return (
            f"{cmd.num_tokens} tokens in blocks of {cmd.block_size} are {n} pages, "
            f"not {len(cmd.pages)}"
        )
    hosts: set[int] = set()
    gpus: set[int] = set()
    for i, pg in enumerate(cmd.pages, start=1):
        if pg.page_index != i:
            return f"page {pg.page_index} where page {i} belongs"
        rows = min(cmd.block_size, cmd.num_tokens - (i - 1) * cmd.block_size)
        if pg.valid_rows != rows:
            return f"page {i} has {pg.valid_rows} valid rows, not {rows}"
        if cmd.target == "device" and (pg.gpu_block is None or pg.host_block is not None):
            return f"device-target page {i} needs a GPU block and no host block"
        if cmd.target == "host" and pg.host_block is None:
            return f"host-target page {i} needs a host block"
        if pg.host_block is not None:
            if pg.host_block in hosts:
                return f"host block {pg.host_block} named twice"
            hosts.add(pg.host_block)
        if pg.gpu_block is not None:
            if pg.gpu_block in gpus:
                return f"GPU block {pg.gpu_block} named twice"
            gpus.add(pg.gpu_block)
    return None


class ImportLanded(_Wire):
    """Worker → coordinator: pages (1-based) of import ``import_id`` whose every chunk
    has landed at its destination (host block, GPU page, and the mirror if any)."""

    import_id: int = Field(ge=0)
    pages: tuple[int, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> ImportLanded:
        if len(set(self.pages)) != len(self.pages) or any(p < 1 for p in self.pages):
            raise ValueError("landed pages must be distinct page indices >= 1")
        return self


class ImportFailure(_Wire):
    """Worker → coordinator: import ``import_id`` failed; its staging slots are released."""

    import_id: int = Field(ge=0)
    reason: ImportFailReason
    detail: str = Field(default="", max_length=MAX_DETAIL_CHARS)


class HiSparseConnectorMetadata(_Wire):
    """Scheduler → worker, once per step: new page transfers and table replacements.

    ``seq`` numbers the metadata (it only grows; the same message goes to every rank);
    per rank w, ``epoch[w]`` counts its worker losses and ``since[w]`` is the number of
    the epoch's first metadata. A worker applies the number it expects next, ignores an
    older one (a replay, or one sent before its restart) and refuses a newer one
    (``MessageGap``: one was lost). None: unsequenced (tools and tests), applied as it
    comes, with no replay protection (hisparse/channel.py).
    """

    transfers: tuple[SparseKVPageTransfer, ...] = ()
    replacements: tuple[BlockTableReplacement, ...] = ()
    seq: int | None = Field(default=None, ge=0)
    since: tuple[int, ...] | None = None
    epoch: tuple[int, ...] | None = None
    # P/D import (docs/pd-import.md): new import commands, and imports to abort
    imports: tuple[ImportCommand, ...] = ()
    import_aborts: tuple[int, ...] = ()

    @model_validator(mode="after")
    def _unique(self) -> HiSparseConnectorMetadata:
        ids = [t.transfer_id for t in self.transfers]
        if len(set(ids)) != len(ids):
            raise ValueError("duplicate transfer_id in one connector metadata")
        dsts = [t.dst_host_block for t in self.transfers]
        if len(set(dsts)) != len(dsts):
            raise ValueError("two transfers target one host block in one connector metadata")
        if not (self.seq is None) == (self.since is None) == (self.epoch is None):
            raise ValueError("seq, since and epoch come together")
        if self.since is not None and any(f < 0 or f > (self.seq or 0) for f in self.since):
            raise ValueError("since names a metadata number after this one")
        if self.epoch is not None and (
            len(self.epoch) != len(self.since or ()) or any(e < 0 for e in self.epoch)
        ):
            raise ValueError("epoch needs one non-negative number per rank of since")
        iids = [c.import_id for c in self.imports]
        if len(set(iids)) != len(iids):
            raise ValueError("duplicate import_id in one connector metadata")
        if len(set(self.import_aborts)) != len(self.import_aborts) or any(
            i < 0 for i in self.import_aborts
        ):
            raise ValueError("import_aborts must be distinct non-negative import IDs")
        if set(iids) & set(self.import_aborts):
            raise ValueError("an import is started and aborted in one connector metadata")
        return self


class HiSparseWorkerMeta(_Wire):
    """Worker → scheduler: transfer IDs enqueued on the stream and completed since last report,
    by tensor-parallel rank ``rank`` (0-based; every rank reports its own)."""

    enqueued: tuple[int, ...] = ()
    completed: tuple[int, ...] = ()
    rank: int = Field(default=0, ge=0)
    # numbered like the connector metadata: ``epoch`` counts the worker's restarts,
    # ``since`` is the number of the epoch's first meta (None: unsequenced)
    seq: int | None = Field(default=None, ge=0)
    since: int | None = Field(default=None, ge=0)
    epoch: int | None = Field(default=None, ge=0)
    # P/D import acknowledgements (docs/pd-import.md): pages landed since the last
    # report, imports whose every page landed and whose staging slots are released
    # (done), imports failed (nothing of theirs may be published)
    imports_landed: tuple[ImportLanded, ...] = ()
    imports_done: tuple[int, ...] = ()
    imports_failed: tuple[ImportFailure, ...] = ()

    @model_validator(mode="after")
    def _unique(self) -> HiSparseWorkerMeta:
        if not (self.seq is None) == (self.since is None) == (self.epoch is None):
            raise ValueError("seq, since and epoch come together")
        if self.since is not None and self.since > (self.seq or 0):
            raise ValueError("since names a worker meta after this one")
        for name, ids in (("enqueued", self.enqueued), ("completed", self.completed)):
            if len(set(ids)) != len(ids):
                raise ValueError(f"duplicate transfer ID in {name}")
            if any(i < 0 for i in ids):
                raise ValueError(f"negative transfer ID in {name}")
        landed = tuple(a.import_id for a in self.imports_landed)
        failed = tuple(f.import_id for f in self.imports_failed)
        for name, iids in (("imports_landed", landed), ("imports_done", self.imports_done),
                           ("imports_failed", failed)):
            if len(set(iids)) != len(iids):
                raise ValueError(f"duplicate import ID in {name}")
            if any(i < 0 for i in iids):
                raise ValueError(f"negative import ID in {name}")
        if set(self.imports_done) & set(failed):
            raise ValueError("an import reported both done and failed")
        return self


_FIELDS: dict[type, frozenset[str]] = {}


def _fields(cls: type[_Wire]) -> frozenset[str]:
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = frozenset(cls.__pydantic_fields__)
    return names


def trusted(cls: type[W], **values: Any) -> W:
    """A message from values this process built itself (already valid): what
    ``model_construct`` makes, without its per-field alias and default handling,
    which costs more than the rest of a step. Every field must be given."""
    names = _FIELDS.get(cls)
    if values.keys() != (names if names is not None else _fields(cls)):
        raise TypeError(f"{cls.__name__} needs exactly {sorted(cls.__pydantic_fields__)}")
    return _build(cls, values)


def _build(cls: type[W], values: dict[str, Any]) -> W:
    """The instance ``trusted`` makes, from exactly the model's fields."""
    m = _new(cls)
    _set(m, "__dict__", values)
    _set(m, "__pydantic_fields_set__", set(values))
    _set(m, "__pydantic_extra__", None)
    _set(m, "__pydantic_private__", None)
    return m


# ``trusted`` for the messages every request's lifecycle builds, with the fields named
# once here instead of checked per call (the scheduler's hot path)


def trusted_transfer(
    transfer_id: int,
    src_gpu_block: int,
    dst_host_block: int,
    ranks: tuple[int, ...] | None = None,
) -> SparseKVPageTransfer:
    return _build(
        SparseKVPageTransfer,
        {
            "transfer_id": transfer_id,
            "src_gpu_block": src_gpu_block,
            "dst_host_block": dst_host_block,
            "ranks": ranks,
        },
    )


def trusted_replacement(
    request_id: str, page_index: int, host_block: int
) -> BlockTableReplacement:
    return _build(
        BlockTableReplacement,
        {"request_id": request_id, "page_index": page_index, "host_block": host_block},
    )


def trusted_metadata(
    transfers: tuple[SparseKVPageTransfer, ...],
    replacements: tuple[BlockTableReplacement, ...],
    seq: int | None = None,
    since: tuple[int, ...] | None = None,
    epoch: tuple[int, ...] | None = None,
    imports: tuple[ImportCommand, ...] = (),
    import_aborts: tuple[int, ...] = (),
) -> HiSparseConnectorMetadata:
    return _build(
        HiSparseConnectorMetadata,
        {
            "transfers": transfers,
            "replacements": replacements,
            "seq": seq,
            "since": since,
            "epoch": epoch,
            "imports": imports,
            "import_aborts": import_aborts,
        },
    )


def trusted_worker_meta(
    enqueued: tuple[int, ...],
    completed: tuple[int, ...],
    rank: int = 0,
    seq: int | None = None,
    since: int | None = None,
    epoch: int | None = None,
    imports_landed: tuple[ImportLanded, ...] = (),
    imports_done: tuple[int, ...] = (),
    imports_failed: tuple[ImportFailure, ...] = (),
) -> HiSparseWorkerMeta:
    return _build(
        HiSparseWorkerMeta,
        {
            "enqueued": enqueued,
            "completed": completed,
            "rank": rank,
            "seq": seq,
            "since": since,
            "epoch": epoch,
            "imports_landed": imports_landed,
            "imports_done": imports_done,
            "imports_failed": imports_failed,
        },
    )


# One adapter per direction: the only place wire bytes are validated.
CONNECTOR_METADATA: TypeAdapter[HiSparseConnectorMetadata] = TypeAdapter(HiSparseConnectorMetadata)
WORKER_META: TypeAdapter[HiSparseWorkerMeta] = TypeAdapter(HiSparseWorkerMeta)
