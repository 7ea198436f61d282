"""The value shapes of the public trace format (spec/trace.py), shared with the
protocol catalogue (spec/catalogue.py), whose argument models use them."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

NAME_PATTERN = r"^[A-Za-z0-9_.:-]+$"

Name = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]
BlockId = Annotated[int, Field(ge=0)]
Rank = Annotated[int, Field(ge=0)]  # a tensor-parallel rank, 0-based
Page = tuple[Name, Annotated[int, Field(ge=1)]]
Loc = tuple[Literal["gpu", "host"], BlockId]
# Bytes held by a block: a key, "empty" or "garbage" (checked against the header).
Data = Name
ReqState = Literal["new", "running", "finished", "aborted"]
HostState = Literal["free", "leased", "valid"]


class Frozen(BaseModel):
    """A trace value: immutable, and no field the format does not name."""

    model_config = ConfigDict(frozen=True, extra="forbid")
