"""The declared lifecycles of a request, a transfer and a host page.

The tables below are the single source of truth. They are declared with the
``transitions`` library (so they can be validated, drawn and reasoned about as a
machine) and compiled once into plain dict lookups for the hot path, because a
``transitions`` trigger costs tens of microseconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from transitions import Machine

from hisparse.spec.errors import IllegalTransition
from hisparse.spec.native import mypyc_attr

# (trigger, source states, destination)
Row = tuple[str, tuple[str, ...], str]


@mypyc_attr(native_class=False)  # (spec/native.py: why)
@dataclass(frozen=True)
class Lifecycle:
    """One declared state machine and its compiled transition table."""

    name: str
    states: tuple[str, ...]
    initial: str
    rows: tuple[Row, ...]
    table: dict[tuple[str, str], str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        table: dict[tuple[str, str], str] = {}
        for trigger, sources, dest in self.rows:
            for src in sources:
                if (src, trigger) in table:
                    raise ValueError(f"{self.name}: {trigger!r} from {src!r} declared twice")
                table[(src, trigger)] = dest
        object.__setattr__(self, "table", table)

    def next(self, state: str, trigger: str) -> str:
        """The state after ``trigger``; raises IllegalTransition if not declared."""
        try:
            return self.table[(state, trigger)]
        except KeyError:
            raise IllegalTransition(self.name, state, trigger) from None

    def allows(self, state: str, trigger: str) -> bool:
        return (state, trigger) in self.table

    def machine(self, model: object) -> Machine:
        """A ``transitions`` machine bound to ``model``, built from the same rows."""
        return Machine(
            model=model,
            states=list(self.states),
            initial=self.initial,
            transitions=[
                {"trigger": t, "source": list(srcs), "dest": d} for t, srcs, d in self.rows
            ],
            auto_transitions=False,
            ignore_invalid_triggers=False,
        )

    def mermaid(self) -> str:
        """A mermaid stateDiagram of the declared rows."""
        lines = ["stateDiagram-v2", f"    [*] --> {self.initial}"]
        for trigger, sources, dest in self.rows:
            for src in sources:
                lines.append(f"    {src} --> {dest}: {trigger}")
        return "\n".join(lines)


REQUEST = Lifecycle(
    name="request",
    states=("new", "importing", "running", "finished", "aborted", "retired"),
    initial="new",
    rows=(
        ("arrive", ("new",), "running"),
        # P/D import (docs/pd-import.md): admitted with destinations leased, bytes landing
        ("admit_import", ("new",), "importing"),
        ("import_done", ("importing",), "running"),
        ("import_failed", ("importing", "aborted"), "aborted"),
        ("finish", ("running",), "finished"),
        ("abort", ("new", "importing", "running"), "aborted"),
        # the request leaves the protocol state; its ID may be declared again
        ("retire", ("finished", "aborted"), "retired"),
    ),
)

# A transfer is open from StartSpill until its completed ack is consumed, or until a
# worker loss closes it. "abandoned": closed by a loss while its copy may still run.
TRANSFER = Lifecycle(
    name="transfer",
    states=("sent", "enqueued", "abandoned", "closed"),
    initial="sent",
    rows=(
        ("enqueued_ack", ("sent",), "enqueued"),
        ("completed_ack", ("enqueued", "abandoned"), "closed"),
        ("lost_running", ("sent", "abandoned"), "abandoned"),
        ("lost_idle", ("sent", "enqueued", "abandoned"), "closed"),
    ),
)

# "leased" is the destination lease; "valid" means published for prefix reuse.
HOST_PAGE = Lifecycle(
    name="host_page",
    states=("free", "leased", "valid"),
    initial="free",
    rows=(
        ("lease", ("free",), "leased"),
        ("publish", ("leased",), "valid"),
        ("discard", ("leased",), "free"),
        ("evict", ("valid",), "free"),
    ),
)

LIFECYCLES: tuple[Lifecycle, ...] = (REQUEST, TRANSFER, HOST_PAGE)


def mermaid_document() -> str:
    """The docs page with every lifecycle diagram (docs/lifecycles.md)."""
    parts = [
        "# Protocol lifecycles",
        "",
        "Generated from `spec/lifecycle.py` by `python -m hisparse docs`; do not edit.",
        "",
    ]
    for lc in LIFECYCLES:
        parts += [f"## {lc.name}", "", "```mermaid", lc.mermaid(), "```", ""]
    return "\n".join(parts)
