"""Shape checks for messages that skipped validation (``model_construct``).

Bytes are validated by the adapters; an object handed over in process may have been
built with ``model_construct``, which checks nothing: an ``int`` where the ID tuple
goes, a list or a float or a bool as an ID. Exact types are required here (``True``
and ``1.0`` compare equal to ``1`` and would pass for transfer 1), before anything
else reads the message. Cost: O(the message's IDs).
"""

from __future__ import annotations

from typing import TypeGuard

from hisparse.spec.errors import BadSequence, MalformedMessage
from hisparse.spec.messages import (
    BlockTableReplacement,
    HiSparseConnectorMetadata,
    HiSparseWorkerMeta,
    SparseKVPageTransfer,
)

_MISSING = object()
_SHOWN = 40  # the longest repr of a bad value quoted in a message


def _shown(value: object) -> str:
    text = repr(value)
    text = text if len(text) <= _SHOWN else text[:_SHOWN] + "..."
    return f"{text} ({type(value).__name__})"


def _is_seq(value: object) -> TypeGuard[tuple[object, ...] | list[object]]:
    return type(value) is tuple or type(value) is list


def id_tuple(value: object, what: str) -> tuple[int, ...]:
    """``value`` as a tuple of IDs (exact ints); MalformedMessage otherwise."""
    if not _is_seq(value):
        raise MalformedMessage(f"{what} must be a tuple of IDs, got {_shown(value)}")
    ids: list[int] = []
    for x in value:
        if type(x) is not int:
            raise MalformedMessage(f"{what} holds {_shown(x)}, not an integer ID")
        ids.append(x)
    return tuple(ids)


def worker_meta_ids(meta: HiSparseWorkerMeta) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A worker meta's (enqueued, completed) IDs, exact ints; MalformedMessage otherwise.
    (An interpreted module: compiled code would check the declared types first.)"""
    return (
        id_tuple(getattr(meta, "enqueued", None), "worker meta enqueued"),
        id_tuple(getattr(meta, "completed", None), "worker meta completed"),
    )


def worker_meta_numbers(meta: HiSparseWorkerMeta) -> tuple[int, int, int] | None:
    """A worker meta's (epoch, since, seq), exact ints; None: unsequenced; BadSequence
    when they are malformed (wrong types, some missing, since after seq). Interpreted, as
    ``worker_meta_ids``: compiled code would check the declared types first."""
    seq = getattr(meta, "seq", None)
    since = getattr(meta, "since", None)
    epoch = getattr(meta, "epoch", None)
    if seq is None and since is None and epoch is None:
        return None
    if not (
        type(seq) is int and type(since) is int and type(epoch) is int
        and 0 <= since <= seq and epoch >= 0
    ):
        raise BadSequence(f"worker meta numbered epoch={epoch!r}, since={since!r}, seq={seq!r}")
    return epoch, since, seq


def _numbers_problem(meta: HiSparseConnectorMetadata) -> str | None:
    """Why a connector metadata's sequence fields are ill-typed, or None."""
    seq = getattr(meta, "seq", None)
    since = getattr(meta, "since", None)
    epoch = getattr(meta, "epoch", None)
    if seq is None and since is None and epoch is None:
        return None
    if type(seq) is not int or seq < 0:
        return f"seq is {_shown(seq)}, not a non-negative int"
    for name, value in (("since", since), ("epoch", epoch)):
        if not (_is_seq(value) and all(type(x) is int and x >= 0 for x in value)):
            return f"{name} is {_shown(value)}, not a tuple of non-negative ints"
    return None


def connector_metadata_problem(meta: object) -> str | None:
    """Why ``meta`` is not a well-typed connector metadata, or None."""
    if not isinstance(meta, HiSparseConnectorMetadata):
        return f"not a HiSparseConnectorMetadata: {_shown(meta)}"
    transfers = getattr(meta, "transfers", _MISSING)
    replacements = getattr(meta, "replacements", _MISSING)
    for name, items, cls in (
        ("transfers", transfers, SparseKVPageTransfer),
        ("replacements", replacements, BlockTableReplacement),
    ):
        if not _is_seq(items):
            return f"{name} must be a tuple, got {_shown(items)}"
        for item in items:
            if not isinstance(item, cls):
                return f"{name} holds {_shown(item)}, not a {cls.__name__}"
    for t in meta.transfers:
        for field in ("transfer_id", "src_gpu_block", "dst_host_block"):
            value = getattr(t, field, _MISSING)
            if type(value) is not int:
                return f"transfer {field} is {_shown(value)}, not an int"
        ranks = getattr(t, "ranks", _MISSING)
        if ranks is not None and not (_is_seq(ranks) and all(type(r) is int for r in ranks)):
            return f"transfer ranks is {_shown(ranks)}, not None or a tuple of ints"
    for r in meta.replacements:
        rid = getattr(r, "request_id", _MISSING)
        if type(rid) is not str:
            return f"replacement request_id is {_shown(rid)}, not a str"
        for field in ("page_index", "host_block"):
            value = getattr(r, field, _MISSING)
            if type(value) is not int:
                return f"replacement {field} is {_shown(value)}, not an int"
    return _numbers_problem(meta)
