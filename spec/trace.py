"""The public trace format: one run of the protocol, as JSON Lines, for TLC to validate.

Line 1 is a ``TraceHeader`` (the constants of the spec), every other line a
``TraceStep``: the action taken, its arguments, and what it changed in every TLA+
variable it writes: the changed entries of a function-valued variable, the whole value
of a set or sequence. The checker rebuilds the rest from the state before the step, so
a trace grows with the work done, not with the state's size. Names and encodings follow
``tla/HiSparse.tla`` so any implementation (our machine, an engine) can emit traces
without knowing TLA+. Everything is validated here, at the file boundary: the TLC side may assume a
well-formed trace whose blocks, pages and keys all belong to its header.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal, Union

import pydantic_core
from pydantic import Field, TypeAdapter, ValidationError, model_validator

from hisparse.spec.catalogue import (
    ACTION_NAMES,
    ARG_MODELS,
    CATALOGUE,
    HostBlockArgs,
    PageArgs,
    PageChunkArgs,
    RankArgs,
    RankHostBlockArgs,
    RequestArgs,
    SpillArgs,
    TransferArgs,
)
from hisparse.spec.state import SENTINELS
from hisparse.spec.tracetypes import (
    MAX_INT,
    MAX_RANKS,
    BlockId,
    Chunk,
    Data,
    Frozen,
    HostState,
    Loc,
    Name,
    Page,
    Rank,
    ReqState,
)

FORMAT: Final = "hisparse-trace/3"

# A trace comes from outside: what reading one may cost is bounded before it is read.
# Bytes of a whole file, checked before reading and again while reading (a FIFO or a
# growing file has no honest size); a 64 MiB file is ~150k steps, past what TLC replays.
MAX_TRACE_BYTES: Final = 64 << 20
# Bytes of one line: a header of 2^20 pages fits (the admission limit of pages).
MAX_LINE_BYTES: Final = 16 << 20
# The JSON parser's own bounds (pydantic-core's): arrays and objects nested at most this
# deep (a trace nests 6 deep), integers of at most this many digits (and every integer
# field of the format is at most MAX_INT, 10 digits). Past either, a line is refused.
JSON_MAX_NESTING: Final = 200
JSON_MAX_INT_DIGITS: Final = 4300
# The longest excerpt of outside text an error message quotes.
MAX_QUOTE: Final = 200
# Older formats this version refuses, each with what it lacked.
OLD_FORMATS: dict[str, str] = {
    "hisparse-trace/1": "it recorded full post-states",
    "hisparse-trace/2": "it had no tensor-parallel ranks",
}

# The step's action: a name of the catalogue (a Literal at run time, so the JSON Schema
# lists them; mypy sees a plain string).
if TYPE_CHECKING:
    Action = str
    Args = Frozen
else:
    Action = Literal[ACTION_NAMES]
    Args = Union[ARG_MODELS]  # noqa: UP007 (a union built from a tuple)


class TraceFormatError(Exception):
    """A trace file is not a well-formed trace; ``line`` is 1-based (0: the file as a whole)."""

    def __init__(self, path: Path | str, line: int, message: str) -> None:
        where = f"{path}:{line}" if line else str(path)
        super().__init__(f"{where}: {message}")
        self.path = Path(path)
        self.line = line
        self.message = message


class TraceVersionError(TraceFormatError):
    """The header names an older trace format than this checker reads."""


# --- header ------------------------------------------------------------------------------


class TraceHeader(Frozen):
    """The constants of the run: requests with their page keys, pool sizes, tensor-parallel
    ranks (0-based; ``writer`` copies into a ``shared`` host pool), injected bug."""

    kind: Literal["header"]
    format: Literal["hisparse-trace/3"]
    requests: dict[Name, Annotated[list[Name], Field(min_length=1)]] = Field(min_length=1)
    gpu_blocks: int = Field(ge=1)
    host_blocks: int = Field(ge=1)
    host_pool_bytes: int = Field(ge=0)
    host_block_bytes: int = Field(ge=1)
    ranks: int = Field(default=1, ge=1, le=MAX_RANKS)
    backing: Literal["private", "shared"] = "private"
    writer: Rank = 0
    bug: Name = "none"
    # P/D import (docs/pd-import.md): the requests that arrive with prefill KV (the
    # spec's Imports), chunks of a page, staging slots
    imports: list[Name] = Field(default_factory=list)
    chunks: int = Field(default=1, ge=1, le=MAX_INT)
    staging_slots: int = Field(default=1, ge=1, le=MAX_INT)

    @model_validator(mode="after")
    def _no_sentinels(self) -> TraceHeader:
        if self.writer >= self.ranks:
            raise ValueError(f"writer {self.writer} is not a rank of 0..{self.ranks - 1}")
        if not set(self.imports) <= set(self.requests):
            raise ValueError("imports names a request the header does not declare")
        if self.imports and self.ranks != 1:
            raise ValueError("imports are modelled on one rank")
        for r, keys in self.requests.items():
            for name in (r, *keys):
                if name in SENTINELS:
                    raise ValueError(f"{name!r} is a sentinel of the spec, not a valid name")
        return self

    def key_names(self) -> list[str]:
        """Every key, once, in first-seen order."""
        return list(dict.fromkeys(k for ks in self.requests.values() for k in ks))

    def pages(self) -> list[tuple[str, int]]:
        """Every logical page ``(request, i)``, i 1-based, in header order."""
        return [(r, i) for r, ks in self.requests.items() for i in range(1, len(ks) + 1)]

    def same_constants(self) -> tuple[object, ...]:
        """What two traces must share to be checked in one TLC run."""
        reqs = tuple((r, tuple(ks)) for r, ks in self.requests.items())
        return (
            tuple(sorted(reqs)),
            self.gpu_blocks,
            self.host_blocks,
            self.host_pool_bytes,
            self.host_block_bytes,
            self.ranks,
            self.backing,
            self.writer,
            self.bug,
            tuple(sorted(self.imports)),
            self.chunks,
            self.staging_slots,
        )

    def copiers(self) -> list[int]:
        """The ranks that copy, one physical host pool each (the spec's Copiers)."""
        return [self.writer] if self.backing == "shared" else list(range(self.ranks))


# --- per-action arguments: the catalogue's argument models ---------------------------

ARGS: dict[str, type[Frozen]] = {a.name: a.args for a in CATALOGUE}

# The variables each action writes in the correct spec (Bug = "none"). A step must
# report all of them (an empty change says "unchanged"): that pins its successor, so
# TLC's deadlock check is the verdict.
WRITES: dict[str, frozenset[str]] = {a.name: frozenset(a.writes) for a in CATALOGUE}


# --- post-state --------------------------------------------------------------------------


class SpillRecord(Frozen):
    """An open transfer of the coordinator (``spill[h]``)."""

    src: BlockId
    page: Page
    phase: Literal["sent", "enqueued", "abandoned"]
    enq: list[Rank]
    need: list[Rank]


class ImpRecord(Frozen):
    """A request's P/D import (``imp[r]``): its landing target and phase."""

    target: Literal["none", "device", "host"]
    phase: Literal["none", "announced", "landing", "landed", "failed"]


class PgRecord(Frozen):
    """A page's P/D import (``pg[p]``): its host block (null: NoLoc), the chunks at its
    destination and in its staging slot, whether it holds one."""

    host: BlockId | None = None
    landed: list[Chunk]
    staged: list[Chunk]
    slot: bool


class TransferRecord(Frozen):
    """A command in ``down``."""

    src: BlockId
    dst: BlockId


class WorkerMeta(Frozen):
    """One element of ``up``."""

    enq: list[BlockId]
    done: list[BlockId]


class TracePost(Frozen):
    """What a step changed in the variables it reports; ``None`` = not reported.

    Function-valued variables give only their changed entries (possibly none): objects
    keyed by request, key or block ID (a decimal string), ``loc`` as ``[page, loc]``
    pairs; every other entry keeps its value from before the step. The rank-indexed
    variables are objects keyed by rank (a decimal string, 0-based; ``hostData`` by the
    rank that owns the physical pool) holding the changed ranks only: ``down``, ``up``,
    ``waits``, ``reading``, ``wEnq`` and ``wDone`` the rank's whole new value (sets are
    lists without duplicates), ``copying`` and ``hostData`` its changed host blocks. ``null`` stands
    for the spec's sentinels (NoPage, NoLoc, NoKey, Idle, NoSpill).
    """

    req: dict[Name, ReqState] | None = None
    loc: list[tuple[Page, Loc | None]] | None = None
    gpuOwner: dict[BlockId, Page | None] | None = None
    srcPin: dict[BlockId, bool] | None = None
    hostState: dict[BlockId, HostState] | None = None
    hostKey: dict[BlockId, Name | None] | None = None
    prefix: dict[Name, list[BlockId]] | None = None
    spill: dict[BlockId, SpillRecord | None] | None = None
    down: dict[Rank, list[TransferRecord]] | None = None
    up: dict[Rank, list[WorkerMeta]] | None = None
    lost: dict[Rank, bool] | None = None
    copying: dict[Rank, dict[BlockId, Data | None]] | None = None
    waits: dict[Rank, list[BlockId]] | None = None
    reading: dict[Rank, list[BlockId]] | None = None
    wEnq: dict[Rank, list[BlockId]] | None = None
    wDone: dict[Rank, list[BlockId]] | None = None
    gpuData: dict[BlockId, Data] | None = None
    hostData: dict[Rank, dict[BlockId, Data]] | None = None
    imp: dict[Name, ImpRecord] | None = None
    pg: list[tuple[Page, PgRecord]] | None = None

    def reported(self) -> list[str]:
        """Names of the variables this post-state reports, in spec order."""
        return [name for name in POST_FIELDS if getattr(self, name) is not None]


POST_FIELDS: tuple[str, ...] = tuple(TracePost.model_fields)


class TraceStep(Frozen):
    """One action of the run and what it changed in the variables it wrote."""

    kind: Literal["step"]
    index: int = Field(ge=1, le=MAX_INT)
    action: Action
    args: Args
    post: TracePost

    @model_validator(mode="after")
    def _check(self) -> TraceStep:
        expected = ARGS[self.action]
        if not isinstance(self.args, expected):
            raise ValueError(f"{self.action} takes args {list(expected.model_fields)}")
        missing = WRITES[self.action] - set(self.post.reported())
        if missing:
            raise ValueError(f"{self.action} must report {sorted(missing)} in post")
        return self


TraceLine = Annotated[TraceHeader | TraceStep, Field(discriminator="kind")]
_LINE: TypeAdapter[TraceHeader | TraceStep] = TypeAdapter(TraceLine)


class Trace(Frozen):
    """A whole trace: the header and its steps, indexes 1..n."""

    header: TraceHeader
    steps: tuple[TraceStep, ...] = ()


# --- consistency with the header ---------------------------------------------------------


def _dup(items: list[Any]) -> bool:
    return len(items) != len(set(items))


class HeaderDomain:
    """The names a header declares, as sets, built once per trace (not once per step)."""

    def __init__(self, h: TraceHeader) -> None:
        self.requests = set(h.requests)
        self.pages = set(h.pages())
        self.keys = set(h.key_names())
        self.data = self.keys | {"empty", "garbage"}


def step_problem(h: TraceHeader, s: TraceStep, dom: HeaderDomain | None = None) -> str | None:
    """Why step ``s`` names something outside ``h`` (or has a malformed domain), or None."""
    dom = dom or HeaderDomain(h)
    pages, keys, data = dom.pages, dom.keys, dom.data
    gpu, host = range(h.gpu_blocks), range(h.host_blocks)
    a, p = s.args, s.post
    if isinstance(a, RequestArgs) and a.request not in dom.requests:
        return f"unknown request {a.request!r}"
    if isinstance(a, SpillArgs | PageArgs | PageChunkArgs) and tuple(a.page) not in pages:
        return f"unknown page {list(a.page)}"
    if isinstance(a, PageChunkArgs) and a.chunk > h.chunks:
        return f"chunk {a.chunk} out of range"
    if isinstance(a, SpillArgs | HostBlockArgs | RankHostBlockArgs) and a.host_block not in host:
        return f"host block {a.host_block} out of range"
    if isinstance(a, TransferArgs) and (a.src not in gpu or a.dst not in host):
        return f"transfer {a.src}->{a.dst} out of range"
    if isinstance(a, TransferArgs | RankHostBlockArgs | RankArgs) and a.rank >= h.ranks:
        return f"rank {a.rank} out of range"
    loc_pages = [tuple(e[0]) for e in p.loc or []]
    ranks = range(h.ranks)  # (membership in a range: O(1), nothing built)
    copiers = range(h.writer, h.writer + 1) if h.backing == "shared" else ranks
    per_rank = {
        name: getattr(p, name) or {}
        for name in ("down", "up", "lost", "copying", "waits", "reading", "wEnq", "wDone")
    }
    host_data = p.hostData or {}
    copying = per_rank["copying"]
    checks: list[tuple[bool, str]] = [
        (p.req is not None and not set(p.req) <= dom.requests, "req names an unknown request"),
        (not set(loc_pages) <= pages, "loc names an unknown page"),
        (_dup(loc_pages), "loc lists a page twice"),
        (p.prefix is not None and not set(p.prefix) <= keys, "prefix names an unknown key"),
        (any(r not in ranks for v in per_rank.values() for r in v), "names an unknown rank"),
        (any(r not in copiers for r in host_data), "hostData names a rank with no host pool"),
        (any(_dup(list(d)) for d in per_rank["down"].values()), "down has duplicates"),
        (any(_dup(x) for x in per_rank["wEnq"].values()), "wEnq has duplicates"),
        (any(_dup(x) for x in per_rank["wDone"].values()), "wDone has duplicates"),
        (any(_dup(x) for x in per_rank["waits"].values()), "waits has duplicates"),
        (any(_dup(x) for x in per_rank["reading"].values()), "reading has duplicates"),
        (
            any(b not in host for x in per_rank["waits"].values() for b in x),
            f"waits has {h.host_blocks} blocks",
        ),
        (
            any(b not in host for x in per_rank["reading"].values() for b in x),
            f"reading has {h.host_blocks} blocks",
        ),
        (
            any(r not in ranks for sp in (p.spill or {}).values() if sp for r in sp.enq + sp.need),
            "spill names an unknown rank",
        ),
    ]
    for name, length in (
        ("gpuOwner", h.gpu_blocks),
        ("srcPin", h.gpu_blocks),
        ("gpuData", h.gpu_blocks),
        ("hostState", h.host_blocks),
        ("hostKey", h.host_blocks),
        ("spill", h.host_blocks),
    ):
        value = getattr(p, name)
        checks.append(
            (value is not None and any(b >= length for b in value), f"{name} has {length} blocks")
        )
    for name, nested in (("copying", copying), ("hostData", host_data)):
        checks.append(
            (
                any(b >= h.host_blocks for d in nested.values() for b in d),
                f"{name} has {h.host_blocks} blocks",
            )
        )
    values = [
        *(p.gpuData or {}).values(),
        *(x for d in host_data.values() for x in d.values()),
        *(x for d in copying.values() for x in d.values() if x),
    ]
    checks.append((any(v not in data for v in values), "data must be a key, empty or garbage"))
    keyed = [k for k in (p.hostKey or {}).values() if k is not None]
    checks.append((any(k not in keys for k in keyed), "hostKey names an unknown key"))
    return next((why for bad, why in checks if bad), None)


# --- files -------------------------------------------------------------------------------


def _lines(path: Path, max_bytes: int) -> Iterator[tuple[int, str]]:
    """Non-blank lines, decoded; refuses a file or line past the limits before reading it."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise TraceFormatError(path, 0, f"cannot read: {exc}") from exc
    if size > max_bytes:
        raise TraceFormatError(
            path, 0, f"the file is {size} bytes, over the limit of {max_bytes} bytes"
        )
    read = 0
    try:
        with path.open("rb") as fh:
            for number in itertools.count(1):
                raw = fh.readline(MAX_LINE_BYTES + 1)
                if not raw:
                    return
                read += len(raw)
                if read > max_bytes:
                    raise TraceFormatError(
                        path, number, f"the file is over the limit of {max_bytes} bytes"
                    )
                if len(raw) > MAX_LINE_BYTES:
                    raise TraceFormatError(
                        path, number, f"line longer than the limit of {MAX_LINE_BYTES} bytes"
                    )
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise TraceFormatError(path, number, f"not UTF-8: {exc.reason}") from exc
                if line.strip():
                    yield number, line
    except OSError as exc:
        raise TraceFormatError(path, 0, f"cannot read: {exc}") from exc


def _parse_json(path: Path, number: int, text: str) -> Any:
    """One line as JSON, within the parser's nesting and digit bounds (no recursion
    in Python, no quadratic integer conversion)."""
    try:
        return pydantic_core.from_json(text, allow_inf_nan=False)
    except ValueError as exc:
        why = str(exc)
        if why.startswith("recursion limit exceeded"):
            why = f"nested deeper than {JSON_MAX_NESTING} levels ({why})"
        elif why.startswith("number out of range"):
            why = f"an integer of more than {JSON_MAX_INT_DIGITS} digits ({why})"
        raise TraceFormatError(path, number, f"not JSON: {why}"[:MAX_QUOTE + 40]) from exc


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(x) for x in err["loc"])
    text = f"{where}: {err['msg']}" if where else err["msg"]
    if len(text) > MAX_QUOTE:  # a name or a key of the file can be long
        text = text[:MAX_QUOTE] + "..."
    return text


def _check_version(path: Path, number: int, raw: Any) -> None:
    """Refuse a header of an older format by name, before its fields are validated."""
    if isinstance(raw, dict) and raw.get("kind") == "header" and raw.get("format") in OLD_FORMATS:
        raise TraceVersionError(
            path,
            number,
            f"trace format {raw['format']!r} is no longer read ({OLD_FORMATS[raw['format']]});"
            f" this checker reads {FORMAT!r}: record the run again",
        )


def read_trace(path: Path | str, *, max_bytes: int = MAX_TRACE_BYTES) -> Trace:
    """Parse and validate a JSON Lines trace; any defect raises ``TraceFormatError``.

    Bounded by the file, not by what it declares: a file over ``max_bytes`` is refused
    before it is read, a line at a time is parsed (nesting and integers bounded), the
    header's constants are checked before any step is (ranks at most ``MAX_RANKS``, every
    integer at most ``MAX_INT``), and nothing is built from a declared size.
    """
    path = Path(path)
    header: TraceHeader | None = None
    domain: HeaderDomain | None = None
    steps: list[TraceStep] = []
    for number, text in _lines(path, max_bytes):
        raw = _parse_json(path, number, text)
        try:
            _check_version(path, number, raw)
            line = _LINE.validate_python(raw)
        except ValidationError as exc:
            raise TraceFormatError(path, number, _first_error(exc)) from exc
        if isinstance(line, TraceHeader):
            if header is not None:
                raise TraceFormatError(path, number, "a second header")
            header = line
            continue
        if header is None:
            raise TraceFormatError(path, number, "the first line must be the header")
        if line.index != len(steps) + 1:
            raise TraceFormatError(
                path, number, f"step index {line.index}, expected {len(steps) + 1}"
            )
        domain = domain or HeaderDomain(header)
        if why := step_problem(header, line, domain):
            raise TraceFormatError(path, number, why)
        steps.append(line)
    if header is None:
        raise TraceFormatError(path, 0, "empty trace: no header")
    return Trace(header=header, steps=tuple(steps))


def dump_line(line: TraceHeader | TraceStep) -> str:
    """One JSON line (no trailing newline), unset post fields left out."""
    return line.model_dump_json(exclude_none=True)


def write_trace(path: Path | str, trace: Trace) -> None:
    """Write ``trace`` as JSON Lines, a line at a time (no second copy of the trace)."""
    with Path(path).open("w", encoding="utf-8") as fh:
        fh.write(dump_line(trace.header) + "\n")
        for step in trace.steps:
            fh.write(dump_line(step) + "\n")


def trace_json_schema() -> dict[str, Any]:
    """JSON Schema of one line of a trace (header or step, by ``kind``)."""
    schema = _LINE.json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = f"{FORMAT} line"
    return schema
