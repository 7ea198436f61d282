"""The value shapes of the public trace format (spec/trace.py), shared with the
protocol catalogue (spec/catalogue.py), whose argument models use them."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

NAME_PATTERN = r"^[A-Za-z0-9_.:-]+$"
# The largest ID or count a trace may hold: TLC's integers are 32-bit. Every integer of
# the format has this bound, so no integer of a trace costs more than a machine word.
MAX_INT = 2**31 - 1
# The most tensor-parallel ranks a trace may declare (the reader builds per-rank state).
MAX_RANKS = 256

Name = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]
BlockId = Annotated[int, Field(ge=0, le=MAX_INT)]
Rank = Annotated[int, Field(ge=0, lt=MAX_RANKS)]  # a tensor-parallel rank, 0-based
Chunk = Annotated[int, Field(ge=1, le=MAX_INT)]  # a chunk of an imported page, 1-based
Page = tuple[Name, Annotated[int, Field(ge=1, le=MAX_INT)]]
Loc = tuple[Literal["gpu", "host"], BlockId]
# Bytes held by a block: a key, "empty" or "garbage" (checked against the header).
Data = Name
ReqState = Literal["new", "importing", "running", "finished", "aborted"]
HostState = Literal["free", "leased", "valid"]


class Frozen(BaseModel):
    """A trace value: immutable, and no field the format does not name."""

    model_config = ConfigDict(frozen=True, extra="forbid")
