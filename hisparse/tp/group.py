"""The ranks' rendezvous: bytes from rank 0 to all, bytes from all to rank 0, barriers.

Everything that crosses between rank processes is bytes (the connector's JSON, the
writer's announcements, the IPC event handles), so the group needs only two
collectives. ``TorchGroup`` is ``torch.distributed`` over gloo (the GPU machine);
``PipeGroup`` is the same over ``multiprocessing`` pipes, for machines without torch
(CI) and for the single-process baseline.
"""

from __future__ import annotations

from multiprocessing.connection import Connection
from typing import Any, Protocol


class Group(Protocol):
    rank: int
    world: int

    def broadcast(self, data: bytes | None) -> bytes:
        """Rank 0's ``data`` on every rank (other ranks pass None)."""
        ...

    def gather(self, data: bytes) -> list[bytes]:
        """Every rank's ``data`` in rank order on rank 0; an empty list elsewhere."""
        ...

    def barrier(self) -> None: ...


class PipeGroup:
    """Rank 0 holds one duplex pipe to each other rank (a star)."""

    def __init__(self, rank: int, world: int, pipes: list[Connection]) -> None:
        self.rank, self.world, self._pipes = rank, world, pipes

    def broadcast(self, data: bytes | None) -> bytes:
        if self.rank == 0:
            assert data is not None
            for p in self._pipes:
                p.send_bytes(data)
            return data
        return self._pipes[0].recv_bytes()

    def gather(self, data: bytes) -> list[bytes]:
        if self.rank == 0:
            return [data, *(p.recv_bytes() for p in self._pipes)]
        self._pipes[0].send_bytes(data)
        return []

    def barrier(self) -> None:
        self.gather(b"")
        self.broadcast(b"" if self.rank == 0 else None)


class TorchGroup:
    """``torch.distributed`` (gloo) on one host: ``init_method`` is a ``tcp://`` address."""

    def __init__(self, rank: int, world: int, init_method: str) -> None:
        import torch.distributed as dist

        dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world)
        self._dist: Any = dist
        self.rank, self.world = rank, world

    def broadcast(self, data: bytes | None) -> bytes:
        box: list[Any] = [data]
        self._dist.broadcast_object_list(box, src=0)
        out: bytes = box[0]
        return out

    def gather(self, data: bytes) -> list[bytes]:
        out: list[Any] | None = [None] * self.world if self.rank == 0 else None
        self._dist.gather_object(data, out, dst=0)
        return list(out) if out is not None else []

    def barrier(self) -> None:
        self._dist.barrier()

    def close(self) -> None:
        self._dist.destroy_process_group()
