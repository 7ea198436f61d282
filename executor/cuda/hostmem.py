"""Host memory behind a cache's host pool: private pinned, or one allocation shared by ranks.

Tensor-parallel ranks hold replicated views of one logical host cache (the seed). With
*private* backing each rank's process pins its own copy (``PrivateHost``: one
``cudaHostAlloc`` per cache), so the pool costs W times its size. With *shared* backing
every rank maps the same ``/dev/shm`` file ``MAP_SHARED`` and registers the mapping with
``cudaHostRegister`` in its own process (``SharedHost``), so the pool is paid once; one
rank writes it, the others order their reads after the writer's copy events
(``hisparse.executor.cuda.ipc``).

Both hand out ``HostBuffer`` objects: a host pointer, the device pointer a kernel uses
(zero-copy, mapped), and a NumPy view that keeps the memory alive.
"""

from __future__ import annotations

import ctypes
import mmap
import os
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from hisparse.executor.cuda.backend import load_cupy
from hisparse.executor.errors import ExecutorConfigError

_HOST_ALLOC_PORTABLE = 1  # cudaHostAllocPortable
_HOST_ALLOC_MAPPED = 2  # cudaHostAllocMapped
_HOST_REGISTER_PORTABLE = 1  # cudaHostRegisterPortable
_HOST_REGISTER_MAPPED = 2  # cudaHostRegisterMapped


class HostBuffer:
    """Page-locked, device-mapped host bytes; views keep this object (and its memory) alive.

    NumPy views hold this object through ``__array_interface__``, so a host view handed to
    a caller can never outlive its memory.
    """

    ptr: int
    device_ptr: int
    nbytes: int

    def _expose(self) -> None:
        self.__array_interface__ = {
            "shape": (self.nbytes,),
            "typestr": "|u1",
            "data": (self.ptr, False),
            "version": 3,
        }

    def host_view(self, rows: int, row_bytes: int) -> NDArray[np.uint8]:
        return np.asarray(self).reshape(rows, row_bytes)

    def device_view(self, rows: int, row_bytes: int, dtype: Any = np.uint8) -> Any:
        """The same bytes as a CuPy array, for kernels (mapped device pointer)."""
        cupy = load_cupy()
        mem = cupy.cuda.UnownedMemory(self.device_ptr, self.nbytes, self)
        return cupy.ndarray((rows, row_bytes), dtype=dtype, memptr=cupy.cuda.MemoryPointer(mem, 0))


class PinnedHostBuffer(HostBuffer):
    """``cudaHostAlloc`` (portable, mapped) bytes of this process; freed with the object."""

    def __init__(self, nbytes: int) -> None:
        cupy = load_cupy()
        self._runtime = cupy.cuda.runtime
        self.nbytes = nbytes
        self.ptr = int(self._runtime.hostAlloc(nbytes, _HOST_ALLOC_PORTABLE | _HOST_ALLOC_MAPPED))
        # Under unified addressing this equals ptr; ask rather than assume.
        self.device_ptr = int(self._runtime.pointerGetAttributes(self.ptr).devicePointer)
        self._expose()

    def __del__(self) -> None:
        ptr, self.ptr = getattr(self, "ptr", 0), 0
        if ptr:
            self._runtime.freeHost(ptr)


class HostArena(Protocol):
    """Where ``allocate_pools`` takes each cache's host pool from (the one seam)."""

    def take(self, nbytes: int) -> HostBuffer:
        """The next cache's host bytes, zeroed."""
        ...

    @property
    def pinned_bytes(self) -> int:
        """Host bytes this process has page-locked for pools so far."""
        ...


class PrivateHost:
    """Each cache gets its own pinned allocation in this process (today's backing)."""

    def __init__(self) -> None:
        self.pinned_bytes = 0

    def take(self, nbytes: int) -> HostBuffer:
        buf = PinnedHostBuffer(nbytes)
        np.asarray(buf)[...] = 0
        self.pinned_bytes += nbytes
        return buf


class SharedHostFile:
    """A ``/dev/shm`` file of ``nbytes`` mapped ``MAP_SHARED`` (no CUDA: the CPU half).

    ``create`` makes the file (it must not exist: two runs never share one by accident)
    and sizes it, so its pages read as zeros; every other rank opens it. ``unlink``
    removes the name once every rank has mapped it; the memory lives until the last
    mapping goes.
    """

    def __init__(self, path: Path, nbytes: int, *, create: bool) -> None:
        if nbytes < 1:
            raise ExecutorConfigError(f"a shared host pool needs at least 1 byte, got {nbytes}")
        self.path = path
        self.nbytes = nbytes
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = os.open(path, flags, 0o600)
        try:
            if create:
                os.ftruncate(fd, nbytes)
            elif os.fstat(fd).st_size != nbytes:
                raise ExecutorConfigError(
                    f"{path} holds {os.fstat(fd).st_size} bytes, this rank expects {nbytes}: "
                    "every rank must lay out the same pools"
                )
            self._map = mmap.mmap(fd, nbytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)  # the mapping keeps the file's memory
        self._anchor: Any = ctypes.c_char.from_buffer(self._map)
        self.ptr = ctypes.addressof(self._anchor)

    def unlink(self) -> None:
        self.path.unlink(missing_ok=True)

    def close(self) -> None:
        if self._anchor is not None:
            self._anchor = None
            self._map.close()


class _SharedRegion(HostBuffer):
    """One cache's slice of a registered shared file; keeps the whole mapping alive."""

    def __init__(self, owner: SharedHost, offset: int, nbytes: int) -> None:
        self._owner = owner
        self.nbytes = nbytes
        self.ptr = owner.file.ptr + offset
        self.device_ptr = owner.device_ptr + offset
        self._expose()


class SharedHost:
    """Every cache's host pool carved, in allocation order, from one shared mapping.

    Each rank's process maps the same file and registers the whole mapping once
    (``cudaHostRegister``, portable and mapped): the pool's host memory is paid once
    for all ranks. Ranks allocate their caches in the same order, so cache ``i`` is the
    same bytes on every rank. ``close`` unregisters and unmaps (after the pools are gone).
    """

    def __init__(self, file: SharedHostFile) -> None:
        cupy = load_cupy()
        self._runtime = cupy.cuda.runtime
        self.file = file
        self._runtime.hostRegister(
            file.ptr, file.nbytes, _HOST_REGISTER_PORTABLE | _HOST_REGISTER_MAPPED
        )
        self.registered = True
        self.device_ptr = int(self._runtime.pointerGetAttributes(file.ptr).devicePointer)
        self._used = 0
        self.pinned_bytes = file.nbytes

    def take(self, nbytes: int) -> HostBuffer:
        if self._used + nbytes > self.file.nbytes:
            raise ExecutorConfigError(
                f"the shared host file holds {self.file.nbytes} bytes; {self._used} are taken "
                f"and a cache needs {nbytes} more: size it for every cache"
            )
        region = _SharedRegion(self, self._used, nbytes)
        self._used += nbytes
        return region

    def close(self) -> None:
        if self.registered:
            self.registered = False
            self._runtime.hostUnregister(self.file.ptr)
        self.file.close()
