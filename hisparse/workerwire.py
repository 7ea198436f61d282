"""Frames between the simulator and a worker process: one operation per frame.

A frame is a 4-byte little-endian header length, a JSON header (the operation, its
small arguments, and the dtype and shape of each array that follows) and the arrays'
raw bytes. Connector metadata and worker metas travel inside as their own wire bytes
(a ``uint8`` array), so the worker validates them exactly as an engine's would.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

_LEN = struct.Struct("<I")
# dtypes a frame may carry (nothing that needs pickling)
_DTYPES = frozenset({"|u1", "<i4", "<i8"})


class FrameError(ValueError):
    """Bytes that are not a well-formed frame; nothing was applied."""


@dataclass(frozen=True, eq=False)
class Frame:
    op: str
    head: dict[str, Any] = field(default_factory=dict)
    arrays: tuple[NDArray[Any], ...] = ()


def blob(raw: bytes) -> NDArray[np.uint8]:
    """Bytes as an array a frame carries (no copy)."""
    return np.frombuffer(raw, dtype=np.uint8)


def pack(op: str, head: dict[str, Any] | None = None, arrays: Sequence[NDArray[Any]] = ()) -> bytes:
    """One frame; arrays go as C-contiguous little-endian bytes."""
    arrs = [np.ascontiguousarray(a) for a in arrays]
    for a in arrs:
        if a.dtype.str not in _DTYPES:
            raise FrameError(f"a frame carries {sorted(_DTYPES)}, not {a.dtype.str}")
    spec = [[a.dtype.str, list(a.shape)] for a in arrs]
    header = json.dumps({"op": op, "head": head or {}, "arrays": spec}).encode()
    return b"".join([_LEN.pack(len(header)), header, *(a.tobytes() for a in arrs)])


def unpack(raw: bytes) -> Frame:
    """The frame in ``raw``; ``FrameError`` names what is wrong with it."""
    if len(raw) < _LEN.size:
        raise FrameError("frame shorter than its length prefix")
    (n,) = _LEN.unpack_from(raw)
    end = _LEN.size + n
    try:
        doc = json.loads(raw[_LEN.size:end])
        op, head, spec = doc["op"], doc["head"], doc["arrays"]
    except (ValueError, KeyError, TypeError) as exc:
        raise FrameError(f"bad frame header: {exc}") from None
    if not isinstance(op, str) or not isinstance(head, dict) or not isinstance(spec, list):
        raise FrameError("bad frame header: op, head or arrays of the wrong type")
    arrays = []
    at = end
    for entry in spec:
        if not (isinstance(entry, list) and len(entry) == 2):
            raise FrameError(f"bad array in frame: {entry!r}")
        dtype, shape = entry
        if dtype not in _DTYPES or not isinstance(shape, list) or not all(
                type(d) is int and d >= 0 for d in shape):
            raise FrameError(f"bad array in frame: {dtype} {shape}")
        size = math.prod(shape) * np.dtype(dtype).itemsize  # exact: no int64 wrap-around
        if at + size > len(raw):
            raise FrameError("frame shorter than its arrays")
        arrays.append(np.frombuffer(raw, dtype=dtype, count=size // np.dtype(dtype).itemsize,
                                    offset=at).reshape(shape))
        at += size
    if at != len(raw):
        raise FrameError(f"{len(raw) - at} stray bytes after the frame's arrays")
    return Frame(op, head, tuple(arrays))
