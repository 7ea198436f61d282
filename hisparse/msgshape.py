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
    MAX_DETAIL_CHARS,
    BlockTableReplacement,
    HiSparseConnectorMetadata,
    HiSparseWorkerMeta,
    ImportCommand,
    ImportFailure,
    ImportLanded,
    PageImport,
    SparseKVPageTransfer,
    import_command_problem,
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
    return _numbers_problem(meta) or _imports_problem(meta)


_TARGETS = ("device", "host")
_REASONS = ("refused", "transport", "prefiller_lost", "staging", "worker_lost")


def _int_fields(obj: object, what: str, names: tuple[str, ...], optional: bool) -> str | None:
    for field in names:
        value = getattr(obj, field, _MISSING)
        if not (type(value) is int and value >= 0) and not (optional and value is None):
            return f"{what} {field} is {_shown(value)}, not a non-negative int"
    return None


def _imports_problem(meta: HiSparseConnectorMetadata) -> str | None:
    """Why a connector metadata's import commands or aborts are ill-shaped, or None.
    O(the imports' pages)."""
    imports = getattr(meta, "imports", _MISSING)
    aborts = getattr(meta, "import_aborts", _MISSING)
    if not _is_seq(imports):
        return f"imports must be a tuple, got {_shown(imports)}"
    if not (_is_seq(aborts) and all(type(i) is int and i >= 0 for i in aborts)):
        return f"import_aborts is {_shown(aborts)}, not a tuple of non-negative ints"
    iids: list[int] = []
    for cmd in imports:
        if not isinstance(cmd, ImportCommand):
            return f"imports holds {_shown(cmd)}, not an ImportCommand"
        why = _int_fields(cmd, "import", ("import_id", "num_tokens", "block_size"), False)
        if why is not None:
            return why
        rid = getattr(cmd, "request_id", _MISSING)
        if type(rid) is not str or not rid:
            return f"import request_id is {_shown(rid)}, not a non-empty str"
        if getattr(cmd, "target", _MISSING) not in _TARGETS:
            return f"import target is {_shown(getattr(cmd, 'target', None))}, not device or host"
        if cmd.num_tokens < 1 or cmd.block_size < 1:
            return "import num_tokens and block_size must be positive"
        pages = getattr(cmd, "pages", _MISSING)
        if not _is_seq(pages) or not pages:
            return f"import pages is {_shown(pages)}, not a non-empty tuple"
        for pg in pages:
            if not isinstance(pg, PageImport):
                return f"import pages holds {_shown(pg)}, not a PageImport"
            why = _int_fields(pg, "import page", ("page_index", "valid_rows"), False)
            why = why or _int_fields(pg, "import page", ("host_block", "gpu_block"), True)
            if why is not None:
                return why
            key = getattr(pg, "key", _MISSING)
            if type(key) is not str or not key:
                return f"import page key is {_shown(key)}, not a non-empty str"
        why = import_command_problem(cmd)
        if why is not None:
            return why
        iids.append(cmd.import_id)
    if len(set(iids)) != len(iids) or len(set(aborts)) != len(aborts):
        return "an import ID repeats in one connector metadata"
    return None


def worker_meta_imports(
    meta: HiSparseWorkerMeta,
) -> tuple[tuple[ImportLanded, ...], tuple[int, ...], tuple[ImportFailure, ...]]:
    """A worker meta's (landed, done, failed) import acks, exactly shaped;
    MalformedMessage otherwise. O(the acks). Interpreted, as ``worker_meta_ids``."""
    landed = getattr(meta, "imports_landed", ())
    failed = getattr(meta, "imports_failed", ())
    done = id_tuple(getattr(meta, "imports_done", ()), "worker meta imports_done")
    if not _is_seq(landed) or not _is_seq(failed):
        raise MalformedMessage("worker meta imports_landed and imports_failed must be tuples")
    good_landed: list[ImportLanded] = []
    good_failed: list[ImportFailure] = []
    for a in landed:
        if not isinstance(a, ImportLanded) or type(getattr(a, "import_id", None)) is not int:
            raise MalformedMessage(f"imports_landed holds {_shown(a)}, not an ImportLanded")
        good_landed.append(a)
        pages = id_tuple(getattr(a, "pages", None), "imports_landed pages")
        if not pages or any(p < 1 for p in pages) or len(set(pages)) != len(pages):
            raise MalformedMessage(f"imports_landed pages {_shown(pages)} are not distinct >= 1")
    for f in failed:
        if not isinstance(f, ImportFailure) or type(getattr(f, "import_id", None)) is not int:
            raise MalformedMessage(f"imports_failed holds {_shown(f)}, not an ImportFailure")
        good_failed.append(f)
        if getattr(f, "reason", None) not in _REASONS:
            raise MalformedMessage(f"import failure reason {_shown(getattr(f, 'reason', None))}")
        detail = getattr(f, "detail", None)
        if type(detail) is not str or len(detail) > MAX_DETAIL_CHARS:
            raise MalformedMessage(f"import failure detail {_shown(detail)}")
    ids = [a.import_id for a in good_landed]
    fids = [f.import_id for f in good_failed]
    named = (("imports_landed", ids), ("imports_done", list(done)), ("imports_failed", fids))
    for name, xs in named:
        if len(set(xs)) != len(xs) or any(x < 0 for x in xs):
            raise MalformedMessage(f"worker meta {name} repeats or has a negative import ID")
    return tuple(good_landed), done, tuple(good_failed)
