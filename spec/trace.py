"""The public trace format: one run of the protocol, as JSON Lines, for TLC to validate.

Line 1 is a ``TraceHeader`` (the constants of the spec), every other line a
``TraceStep``: the action taken, its arguments, and the full post-state of every
TLA+ variable it writes. Names and encodings follow ``tla/HiSparse.tla`` so any
implementation (our machine, an engine) can emit traces without knowing TLA+.
Everything is validated here, at the file boundary: the TLC side may assume a
well-formed trace whose blocks, pages and keys all belong to its header.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    model_validator,
)

FORMAT = "hisparse-trace/1"
# Strings the spec uses as sentinels or data markers; no request ID or key may equal one.
SENTINELS = frozenset({"nopage", "nowhere", "none", "nokey", "idle", "empty", "garbage"})
NAME_PATTERN = r"^[A-Za-z0-9_.:-]+$"

Name = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]
BlockId = Annotated[int, Field(ge=0)]
Page = tuple[Name, Annotated[int, Field(ge=1)]]
Loc = tuple[Literal["gpu", "host"], BlockId]
# Bytes held by a block: a key, "empty" or "garbage" (checked against the header).
Data = Name
ReqState = Literal["new", "running", "finished", "aborted"]
HostState = Literal["free", "leased", "valid"]

Action = Literal[
    "Arrive",
    "Finish",
    "Abort",
    "StartSpill",
    "EvictHost",
    "Retire",
    "ConsumeMeta",
    "WorkerEnqueue",
    "WorkerDrop",
    "WorkerComplete",
    "WorkerReport",
    "WorkerLoss",
]


class TraceFormatError(Exception):
    """A trace file is not a well-formed trace; ``line`` is 1-based (0: the file as a whole)."""

    def __init__(self, path: Path | str, line: int, message: str) -> None:
        where = f"{path}:{line}" if line else str(path)
        super().__init__(f"{where}: {message}")
        self.path = Path(path)
        self.line = line
        self.message = message


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# --- header ------------------------------------------------------------------------------


class TraceHeader(_Frozen):
    """The constants of the run: requests with their page keys, pool sizes, injected bug."""

    kind: Literal["header"]
    format: Literal["hisparse-trace/1"]
    requests: dict[Name, Annotated[list[Name], Field(min_length=1)]] = Field(min_length=1)
    gpu_blocks: int = Field(ge=1)
    host_blocks: int = Field(ge=1)
    host_pool_bytes: int = Field(ge=0)
    host_block_bytes: int = Field(ge=1)
    bug: Name = "none"

    @model_validator(mode="after")
    def _no_sentinels(self) -> TraceHeader:
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
            self.bug,
        )


# --- per-action arguments ----------------------------------------------------------------


class RequestArgs(_Frozen):
    """Arrive, Finish, Abort, Retire."""

    request: Name


class SpillArgs(_Frozen):
    """StartSpill: the page to spill and its destination host block."""

    page: Page
    host_block: BlockId


class HostBlockArgs(_Frozen):
    """EvictHost, WorkerComplete."""

    host_block: BlockId


class TransferArgs(_Frozen):
    """WorkerEnqueue, WorkerDrop: the SparseKVPageTransfer taken from ``down``."""

    src: BlockId
    dst: BlockId


class NoArgs(_Frozen):
    """ConsumeMeta, WorkerReport, WorkerLoss."""


Args = RequestArgs | SpillArgs | HostBlockArgs | TransferArgs | NoArgs

ARGS: dict[str, type[_Frozen]] = {
    "Arrive": RequestArgs,
    "Finish": RequestArgs,
    "Abort": RequestArgs,
    "StartSpill": SpillArgs,
    "EvictHost": HostBlockArgs,
    "Retire": RequestArgs,
    "ConsumeMeta": NoArgs,
    "WorkerEnqueue": TransferArgs,
    "WorkerDrop": TransferArgs,
    "WorkerComplete": HostBlockArgs,
    "WorkerReport": NoArgs,
    "WorkerLoss": NoArgs,
}

# The variables each action writes in the correct spec (Bug = "none"). A step must
# report all of them: that pins its successor, so TLC's deadlock check is the verdict.
WRITES: dict[str, frozenset[str]] = {
    "Arrive": frozenset({"req", "loc", "gpuOwner", "gpuData"}),
    "Finish": frozenset({"req", "loc", "gpuOwner", "gpuData"}),
    "Abort": frozenset({"req", "loc", "gpuOwner", "gpuData"}),
    "StartSpill": frozenset({"hostState", "hostKey", "spill", "down", "srcPin"}),
    "EvictHost": frozenset({"hostState", "hostKey", "prefix", "hostData"}),
    "Retire": frozenset({"req"}),
    "ConsumeMeta": frozenset(
        {"loc", "gpuOwner", "gpuData", "srcPin", "spill", "hostState", "hostKey", "prefix"}
        | {"hostData", "up"}
    ),
    "WorkerEnqueue": frozenset({"down", "copying", "wEnq"}),
    "WorkerDrop": frozenset({"down"}),
    "WorkerComplete": frozenset({"hostData", "copying", "wDone"}),
    "WorkerReport": frozenset({"up", "wEnq", "wDone"}),
    "WorkerLoss": frozenset(
        {"down", "up", "wEnq", "wDone", "srcPin", "gpuOwner", "gpuData", "spill"}
        | {"hostState", "hostKey", "prefix", "hostData"}
    ),
}


# --- post-state --------------------------------------------------------------------------


class SpillRecord(_Frozen):
    """An open transfer of the coordinator (``spill[h]``)."""

    src: BlockId
    page: Page
    phase: Literal["sent", "enqueued", "abandoned"]


class Transfer(_Frozen):
    """A command in ``down``."""

    src: BlockId
    dst: BlockId


class WorkerMeta(_Frozen):
    """One element of ``up``."""

    enq: list[BlockId]
    done: list[BlockId]


class TracePost(_Frozen):
    """Full post-state of the variables a step reports; ``None`` = not reported.

    Lists are indexed by block ID; ``null`` entries stand for the spec's sentinels
    (NoPage, NoLoc, NoKey, Idle, NoSpill). Sets are lists without duplicates.
    """

    req: dict[Name, ReqState] | None = None
    loc: list[tuple[Page, Loc | None]] | None = None
    gpuOwner: list[Page | None] | None = None
    srcPin: list[bool] | None = None
    hostState: list[HostState] | None = None
    hostKey: list[Name | None] | None = None
    prefix: dict[Name, list[BlockId]] | None = None
    spill: list[SpillRecord | None] | None = None
    down: list[Transfer] | None = None
    up: list[WorkerMeta] | None = None
    copying: list[Data | None] | None = None
    wEnq: list[BlockId] | None = None
    wDone: list[BlockId] | None = None
    gpuData: list[Data] | None = None
    hostData: list[Data] | None = None

    def reported(self) -> list[str]:
        """Names of the variables this post-state reports, in spec order."""
        return [name for name in POST_FIELDS if getattr(self, name) is not None]


POST_FIELDS: tuple[str, ...] = tuple(TracePost.model_fields)


class TraceStep(_Frozen):
    """One action of the run and the post-state of what it wrote."""

    kind: Literal["step"]
    index: int = Field(ge=1)
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


class Trace(_Frozen):
    """A whole trace: the header and its steps, indexes 1..n."""

    header: TraceHeader
    steps: tuple[TraceStep, ...] = ()


# --- consistency with the header ---------------------------------------------------------


def _dup(items: list[Any]) -> bool:
    return len(items) != len(set(items))


def step_problem(h: TraceHeader, s: TraceStep) -> str | None:
    """Why step ``s`` names something outside ``h`` (or has a malformed domain), or None."""
    pages, keys = set(h.pages()), set(h.key_names())
    data = keys | {"empty", "garbage"}
    gpu, host = range(h.gpu_blocks), range(h.host_blocks)
    a, p = s.args, s.post
    if isinstance(a, RequestArgs) and a.request not in h.requests:
        return f"unknown request {a.request!r}"
    if isinstance(a, SpillArgs) and tuple(a.page) not in pages:
        return f"unknown page {list(a.page)}"
    if isinstance(a, SpillArgs | HostBlockArgs) and a.host_block not in host:
        return f"host block {a.host_block} out of range"
    if isinstance(a, TransferArgs) and (a.src not in gpu or a.dst not in host):
        return f"transfer {a.src}->{a.dst} out of range"
    checks: list[tuple[bool, str]] = [
        (p.req is not None and set(p.req) != set(h.requests), "req must cover every request"),
        (
            p.loc is not None and sorted(tuple(e[0]) for e in p.loc) != sorted(pages),
            "loc must list every page once",
        ),
        (p.prefix is not None and set(p.prefix) != keys, "prefix must cover every key"),
        (p.down is not None and _dup(list(p.down)), "down has duplicates"),
        (p.wEnq is not None and _dup(p.wEnq), "wEnq has duplicates"),
        (p.wDone is not None and _dup(p.wDone), "wDone has duplicates"),
    ]
    for name, length in (
        ("gpuOwner", h.gpu_blocks),
        ("srcPin", h.gpu_blocks),
        ("gpuData", h.gpu_blocks),
        ("hostState", h.host_blocks),
        ("hostKey", h.host_blocks),
        ("spill", h.host_blocks),
        ("copying", h.host_blocks),
        ("hostData", h.host_blocks),
    ):
        value = getattr(p, name)
        checks.append((value is not None and len(value) != length, f"{name} needs {length}"))
    values = [*(p.gpuData or []), *(p.hostData or []), *(x for x in p.copying or [] if x)]
    checks.append((any(v not in data for v in values), "data must be a key, empty or garbage"))
    keyed = [k for k in p.hostKey or [] if k is not None]
    checks.append((any(k not in keys for k in keyed), "hostKey names an unknown key"))
    return next((why for bad, why in checks if bad), None)


# --- files -------------------------------------------------------------------------------


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if line.strip():
                yield number, line


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(x) for x in err["loc"])
    return f"{where}: {err['msg']}" if where else err["msg"]


def read_trace(path: Path | str) -> Trace:
    """Parse and validate a JSON Lines trace; any defect raises ``TraceFormatError``."""
    path = Path(path)
    header: TraceHeader | None = None
    steps: list[TraceStep] = []
    try:
        lines = list(_lines(path))
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceFormatError(path, 0, f"cannot read: {exc}") from exc
    for number, text in lines:
        try:
            line = _LINE.validate_python(json.loads(text))
        except json.JSONDecodeError as exc:
            raise TraceFormatError(path, number, f"not JSON: {exc.msg}") from exc
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
        if why := step_problem(header, line):
            raise TraceFormatError(path, number, why)
        steps.append(line)
    if header is None:
        raise TraceFormatError(path, 0, "empty trace: no header")
    return Trace(header=header, steps=tuple(steps))


def dump_line(line: TraceHeader | TraceStep) -> str:
    """One JSON line (no trailing newline), unset post fields left out."""
    return line.model_dump_json(exclude_none=True)


def write_trace(path: Path | str, trace: Trace) -> None:
    """Write ``trace`` as JSON Lines."""
    lines = [dump_line(trace.header), *(dump_line(s) for s in trace.steps)]
    Path(path).write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")


def trace_json_schema() -> dict[str, Any]:
    """JSON Schema of one line of a trace (header or step, by ``kind``)."""
    schema = _LINE.json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = f"{FORMAT} line"
    return schema
