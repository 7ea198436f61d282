"""Wire messages of the OffloadingConnector and the MultiConnector (pydantic v2,
frozen, strict, no extras), validated once at the process boundary like
spec/messages.py's. A MultiConnector's messages carry each child's own bytes."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator


class _Wire(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class BlockCopy(_Wire):
    """One whole-block copy between the GPU group and the offload host store."""

    job_id: int = Field(ge=0)
    gpu_block: int = Field(ge=0)
    host_slot: int = Field(ge=0)


class OffloadMetadata(_Wire):
    """Scheduler → worker: stores (GPU → host) and restores (host → GPU), in order."""

    stores: tuple[BlockCopy, ...] = ()
    restores: tuple[BlockCopy, ...] = ()

    @model_validator(mode="after")
    def _unique(self) -> OffloadMetadata:
        jobs = [c.job_id for c in (*self.stores, *self.restores)]
        if len(set(jobs)) != len(jobs):
            raise ValueError("duplicate job_id in one offload metadata")
        slots = [c.host_slot for c in self.stores]
        if len(set(slots)) != len(slots):
            raise ValueError("two stores target one host slot in one offload metadata")
        return self


class OffloadWorkerMeta(_Wire):
    """Worker → scheduler: jobs whose copy completed since the last report."""

    done: tuple[int, ...] = ()

    @model_validator(mode="after")
    def _unique(self) -> OffloadWorkerMeta:
        if len(set(self.done)) != len(self.done) or any(j < 0 for j in self.done):
            raise ValueError("duplicate or negative job ID in done")
        return self


class ChildBytes(_Wire):
    """One child's message inside a MultiConnector message (its own encoding, base64)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True,
                              ser_json_bytes="base64", val_json_bytes="base64")

    child: str = Field(min_length=1)
    data: bytes


class MultiMessage(_Wire):
    """MultiConnector metadata or worker meta: the children's messages, in child order
    (a child without a message this step is absent)."""

    parts: tuple[ChildBytes, ...] = ()

    @model_validator(mode="after")
    def _unique(self) -> MultiMessage:
        names = [p.child for p in self.parts]
        if len(set(names)) != len(names):
            raise ValueError("two parts for one child")
        return self


OFFLOAD_METADATA: TypeAdapter[OffloadMetadata] = TypeAdapter(OffloadMetadata)
OFFLOAD_WORKER_META: TypeAdapter[OffloadWorkerMeta] = TypeAdapter(OffloadWorkerMeta)
MULTI_MESSAGE: TypeAdapter[MultiMessage] = TypeAdapter(MultiMessage)
