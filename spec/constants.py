"""The constants of tla/HiSparse.tla: pool sizes, tensor-parallel ranks, the bug switch.

A pydantic model, kept apart from the protocol state (spec/state.py) so that the state
compiles to a native class in the mypyc build (tools/build_compiled.py), which does not
compile pydantic models.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Backing = Literal["private", "shared"]


class ProtocolConfig(BaseModel):
    """The constants of the spec: pool sizes, tensor-parallel ranks and the bug switch.

    ``host_blocks`` is the universe of host block IDs; the pool's capacity is
    ``host_pool_bytes // host_block_bytes`` (rounded down to whole blocks). Ranks are
    ``0 .. ranks-1`` here (the trace encoding maps them to the spec's ``1..W``);
    ``backing`` says whether every rank copies into its own host pool ("private") or
    only ``writer`` copies into one shared allocation ("shared").
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu_blocks: int = Field(ge=1)
    host_pool_bytes: int = Field(ge=0)
    host_block_bytes: int = Field(ge=1)
    host_blocks: int = Field(default=0, ge=0, description="0 = the realized capacity")
    ranks: int = Field(default=1, ge=1)
    backing: Backing = "private"
    writer: int = Field(default=0, ge=0)
    bug: str = "none"
    # P/D import (docs/pd-import.md): chunks of one page (one transport READ each) and
    # the staging pool's slots (one page each); the spec's Chunks (1..chunks), StagingSlots
    chunks: int = Field(default=1, ge=1)
    staging_slots: int = Field(default=1, ge=1)

    @model_validator(mode="after")
    def _universe(self) -> ProtocolConfig:
        if self.writer >= self.ranks:
            raise ValueError(f"writer {self.writer} is not a rank of 0..{self.ranks - 1}")
        if self.host_blocks == 0:
            object.__setattr__(self, "host_blocks", self.host_capacity)
        if self.host_blocks < 1:
            raise ValueError(
                "the host pool holds no whole block: raise host_pool_bytes to at least "
                f"host_block_bytes ({self.host_block_bytes})"
            )
        return self

    @property
    def host_capacity(self) -> int:
        """Realized host blocks: the budget rounded down to whole blocks."""
        return self.host_pool_bytes // self.host_block_bytes

    @property
    def copiers(self) -> tuple[int, ...]:
        """The ranks that copy GPU-to-host, one physical host pool each (the spec's Copiers)."""
        return (self.writer,) if self.backing == "shared" else tuple(range(self.ranks))

    @property
    def readers(self) -> tuple[int, ...]:
        """The ranks that read a pool another rank writes (the spec's Readers; none with
        private backing)."""
        return tuple(w for w in range(self.ranks) if w not in self.copiers)

    def bank(self, w: int) -> int:
        """The physical host pool rank ``w`` reads (the spec's Bank(w))."""
        return self.writer if self.backing == "shared" else w
