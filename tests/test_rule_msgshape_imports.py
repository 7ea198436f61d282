"""Rule: the shape checks of messages built without validation (``model_construct``, a
compiled build) accept exactly what validation accepts in the P/D import fields and the
sequence numbers, and name what is wrong instead of raising (``hisparse/msgshape.py``).

From the guard survivors of the second guard-phase run (docs/mutation-survivors.md), none
killed by ``tests/test_import_messages.py`` or ``tests/test_messages.py`` either:

- ``129:drop:0``, ``130:drop:5``: a target (``device``) or a failure reason (``staging``)
  dropped from the accepted cases: here every value of ``ImportTarget`` and
  ``ImportFailReason`` is accepted, and another string refused;
- ``116:collection:2`` (``all`` → ``any``): transfer ranks holding a non-int passed;
- ``154:reorder:2``: an import entry's fields read before checking it is an
  ``ImportCommand``: an entry whose attributes raise made the check raise;
- ``162:bool:12`` (``or`` → ``and``): a command with 0 tokens and positive blocks passed;
- ``70:bool:1`` (``and`` → ``or``): a worker meta with some sequence numbers missing
  was read as unsequenced instead of refused (``BadSequence``);
- ``194:var:40``, ``212:bool:17``, ``213:raise:8``, ``216:var:51``, ``219:raise:9``:
  landed acks that are not a tuple, a failure detail too long or not a str, repeated or
  negative failed / done import IDs: each must be a ``MalformedMessage``.
"""

from __future__ import annotations

from typing import Any, get_args

import pytest

from hisparse.msgshape import connector_metadata_problem, worker_meta_imports, worker_meta_numbers
from hisparse.spec.errors import BadSequence, MalformedMessage
from hisparse.spec.messages import (
    MAX_DETAIL_CHARS,
    HiSparseConnectorMetadata,
    HiSparseWorkerMeta,
    ImportCommand,
    ImportFailReason,
    ImportFailure,
    ImportLanded,
    ImportTarget,
    PageImport,
    SparseKVPageTransfer,
)


def _cmd(target: str, num_tokens: int = 4, block_size: int = 4) -> Any:
    page = PageImport.model_construct(
        page_index=1, key="k1", valid_rows=min(4, max(num_tokens, 1)),
        gpu_block=2 if target == "device" else None,
        host_block=None if target == "device" else 3)
    return ImportCommand.model_construct(import_id=0, request_id="r", target=target,
                                         num_tokens=num_tokens, block_size=block_size,
                                         pages=(page,))


def _meta(imports: tuple[Any, ...] = (), transfers: tuple[Any, ...] = (),
          aborts: Any = (), **numbers: Any) -> Any:
    """A metadata built unvalidated: these commands, unsequenced unless ``numbers`` give
    seq, since or epoch."""
    fields: dict[str, Any] = {"seq": None, "since": None, "epoch": None, **numbers}
    return HiSparseConnectorMetadata.model_construct(
        transfers=transfers, replacements=(), imports=imports, import_aborts=aborts, **fields)


def _ack(**fields: Any) -> Any:
    base: dict[str, Any] = dict(enqueued=(), completed=(), rank=0, seq=None, since=None,
                                epoch=None, imports_landed=(), imports_done=(),
                                imports_failed=())
    return HiSparseWorkerMeta.model_construct(**{**base, **fields})


def _failure(import_id: int = 1, reason: str = "transport", detail: Any = "") -> Any:
    return ImportFailure.model_construct(import_id=import_id, reason=reason, detail=detail)


@pytest.mark.parametrize("target", get_args(ImportTarget))
def test_every_import_target_is_accepted(target: str) -> None:
    assert connector_metadata_problem(_meta((_cmd(target),))) is None


def test_another_target_is_refused_by_name() -> None:
    assert "import target" in (connector_metadata_problem(_meta((_cmd("disk"),))) or "")


@pytest.mark.parametrize("reason", get_args(ImportFailReason))
def test_every_failure_reason_is_accepted(reason: str) -> None:
    _, _, failed = worker_meta_imports(_ack(imports_failed=(_failure(reason=reason),)))
    assert [f.reason for f in failed] == [reason]


def test_another_failure_reason_is_refused() -> None:
    with pytest.raises(MalformedMessage, match="import failure reason"):
        worker_meta_imports(_ack(imports_failed=(_failure(reason="tired"),)))


@pytest.mark.parametrize("ranks", [(0, "1"), ("0",), (0, 1.0)])
def test_transfer_ranks_with_a_non_int_are_named(ranks: tuple[Any, ...]) -> None:
    t = SparseKVPageTransfer.model_construct(transfer_id=0, src_gpu_block=0,
                                             dst_host_block=0, ranks=ranks)
    assert "transfer ranks" in (connector_metadata_problem(_meta(transfers=(t,))) or "")


class Raising:
    """An entry whose every attribute read raises (a broken object, not a command)."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"read {name}")


def test_an_entry_that_is_not_a_command_is_named_without_reading_it() -> None:
    why = connector_metadata_problem(_meta((Raising(),)))
    assert why is not None and "not an ImportCommand" in why


@pytest.mark.parametrize(("num_tokens", "block_size"), [(0, 4), (4, 0), (0, 0)])
def test_a_command_with_no_tokens_or_empty_blocks_is_refused(num_tokens: int,
                                                             block_size: int) -> None:
    why = connector_metadata_problem(_meta((_cmd("host", num_tokens, block_size),)))
    assert why == "import num_tokens and block_size must be positive"


@pytest.mark.parametrize("numbers", [(1, None, None), (None, 0, None), (None, None, 0),
                                     (1, 0, None), (None, 0, 0), (1, None, 0),
                                     # a first message (seq 0) alone is not unsequenced
                                     # (msgshape.py:70:none:0 read 0 as missing)
                                     (0, None, None), (0, 0, None), (0, None, 0)])
def test_a_worker_meta_with_some_numbers_missing_is_refused(
        numbers: tuple[int | None, ...]) -> None:
    seq, since, epoch = numbers
    with pytest.raises(BadSequence):
        worker_meta_numbers(_ack(seq=seq, since=since, epoch=epoch))
    assert worker_meta_numbers(_ack()) is None  # all three missing: unsequenced
    assert worker_meta_numbers(_ack(seq=2, since=1, epoch=0)) == (0, 1, 2)


@pytest.mark.parametrize("landed", [None, {"a": 1}, "xy"])
def test_landed_acks_that_are_not_a_tuple_are_refused(landed: Any) -> None:
    with pytest.raises(MalformedMessage, match="must be tuples"):
        worker_meta_imports(_ack(imports_landed=landed))


@pytest.mark.parametrize("detail", ["x" * (MAX_DETAIL_CHARS + 1), None, 7, b"bytes"])
def test_a_failure_detail_too_long_or_not_a_str_is_refused(detail: Any) -> None:
    with pytest.raises(MalformedMessage, match="import failure detail"):
        worker_meta_imports(_ack(imports_failed=(_failure(detail=detail),)))
    ok = worker_meta_imports(_ack(imports_failed=(_failure(detail="x" * MAX_DETAIL_CHARS),)))
    assert len(ok[2][0].detail) == MAX_DETAIL_CHARS


@pytest.mark.parametrize("field", ["imports_done", "imports_failed", "imports_landed"])
@pytest.mark.parametrize("ids", [(1, 1), (-1,)])
def test_repeated_or_negative_import_ids_are_refused_in_each_list(
        field: str, ids: tuple[int, ...]) -> None:
    values: dict[str, tuple[Any, ...]] = {
        "imports_done": ids,
        "imports_failed": tuple(_failure(import_id=i) for i in ids),
        "imports_landed": tuple(ImportLanded.model_construct(import_id=i, pages=(1,))
                                for i in ids),
    }
    with pytest.raises(MalformedMessage, match=f"worker meta {field} repeats or has a negative"):
        worker_meta_imports(_ack(**{field: values[field]}))


@pytest.mark.parametrize("value", [False, "", ()])
def test_an_optional_block_that_is_empty_but_not_none_is_refused(value: Any) -> None:
    # only None means "no block" (msgshape.py:136:none:10 took any empty value for none)
    cmd = _cmd("host")
    page = cmd.pages[0]
    bad = PageImport.model_construct(page_index=1, key="k1", valid_rows=4, gpu_block=value,
                                     host_block=page.host_block)
    cmd = ImportCommand.model_construct(**{**dict(cmd), "pages": (bad,)})
    why = connector_metadata_problem(_meta((cmd,)))
    assert why is not None and why.startswith(f"import page gpu_block is {value!r} (")
    assert why.endswith("), not a non-negative int")


@pytest.mark.parametrize("rid", ["", 5, None, b"r"])
def test_an_import_request_id_that_is_empty_or_not_a_str_is_refused(rid: Any) -> None:
    """Both halves hold on their own: a str that is empty, and a value that is not a str
    (msgshape.py:158:bool:11, ``or`` → ``and``, refused only a value that was both)."""
    cmd = ImportCommand.model_construct(**{**dict(_cmd("host")), "request_id": rid})
    why = connector_metadata_problem(_meta((cmd,)))
    assert why is not None and why.startswith(f"import request_id is {rid!r} (")
    assert why.endswith("), not a non-empty str")


@pytest.mark.parametrize(("iids", "aborts"), [((0, 0), ()), ((0,), (3, 3)), ((0, 0), (3, 3))])
def test_an_import_id_repeated_in_the_commands_or_the_aborts_is_refused(
        iids: tuple[int, ...], aborts: tuple[int, ...]) -> None:
    """Either list repeating an ID is enough (msgshape.py:181:bool:5, ``or`` → ``and``,
    passed a metadata repeating one list only); distinct IDs in both pass."""
    cmds = tuple(ImportCommand.model_construct(**{**dict(_cmd("host")), "import_id": i})
                 for i in iids)

    def meta(cmds: tuple[Any, ...], aborts: tuple[int, ...]) -> Any:
        return HiSparseConnectorMetadata.model_construct(**{**dict(_meta(cmds)),
                                                            "import_aborts": aborts})
    assert connector_metadata_problem(meta(cmds, aborts)) == \
        "an import ID repeats in one connector metadata"
    assert connector_metadata_problem(meta(cmds[:1], tuple(set(aborts)))) is None


@pytest.mark.parametrize("imports", [None, 5, "xy", {"a": 1}])
def test_imports_that_are_not_a_tuple_are_refused_by_name(imports: Any) -> None:
    """Import commands that are not a tuple (the aborts beside them well formed) are
    refused as such, before any entry is read.
    (kills hisparse/msgshape.py:146:var:27, which checked the aborts in their place)"""
    why = connector_metadata_problem(_meta(imports=imports))
    assert why is not None and why.startswith("imports must be a tuple, got ")


@pytest.mark.parametrize("aborts", [None, 5, {1}, {"a": 1}])
def test_import_aborts_that_are_not_a_tuple_are_refused_by_name(aborts: Any) -> None:
    """Import aborts that are not a tuple are refused as such, however well formed the
    commands beside them (here: none) or the values inside them.
    (kills hisparse/msgshape.py:148:var:28, which checked the commands in their place)"""
    why = connector_metadata_problem(_meta(aborts=aborts))
    assert why is not None and why.startswith("import_aborts is ")
