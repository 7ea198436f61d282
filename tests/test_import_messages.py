"""P/D import messages (docs/pd-import.md): what validation accepts and refuses, from
bytes and from objects built without validation (``model_construct``)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from hisparse.msgshape import connector_metadata_problem, worker_meta_imports
from hisparse.spec.errors import MalformedMessage
from hisparse.spec.messages import (
    CONNECTOR_METADATA,
    WORKER_META,
    HiSparseConnectorMetadata,
    HiSparseWorkerMeta,
    ImportCommand,
    ImportFailure,
    ImportLanded,
    PageImport,
    trusted_metadata,
    trusted_worker_meta,
)


def _host_cmd(num_tokens: int = 10, block_size: int = 4, import_id: int = 0) -> ImportCommand:
    n = -(-num_tokens // block_size)
    pages = tuple(
        PageImport(page_index=i, key=f"k{i}", host_block=10 + i,
                   gpu_block=(3 if i == n else None),
                   valid_rows=min(block_size, num_tokens - (i - 1) * block_size))
        for i in range(1, n + 1)
    )
    return ImportCommand(import_id=import_id, request_id="r1", target="host",
                         num_tokens=num_tokens, block_size=block_size, pages=pages)


def test_unaligned_final_block_is_a_normal_command() -> None:
    cmd = _host_cmd(num_tokens=10, block_size=4)
    assert [p.valid_rows for p in cmd.pages] == [4, 4, 2]
    meta = trusted_metadata((), (), imports=(cmd,), import_aborts=(7,))
    assert CONNECTOR_METADATA.validate_json(meta.model_dump_json()) == meta
    assert connector_metadata_problem(meta) is None


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"num_tokens": 13}, "pages, not 3"),
        ({"num_tokens": 11}, "page 3 has 2 valid rows, not 3"),
        ({"target": "device"}, "device-target page 1"),
    ],
)
def test_command_that_disagrees_with_its_size_or_target_is_refused(
    change: dict[str, object], match: str
) -> None:
    values = _host_cmd().model_dump() | change
    with pytest.raises(ValidationError, match=match):
        ImportCommand.model_validate(values)


def test_a_block_named_twice_is_refused() -> None:
    values = _host_cmd().model_dump()
    values["pages"][1]["host_block"] = values["pages"][0]["host_block"]
    with pytest.raises(ValidationError, match="host block 11 named twice"):
        ImportCommand.model_validate(values)


def test_metadata_refuses_repeated_and_started_then_aborted_imports() -> None:
    cmd = _host_cmd()
    with pytest.raises(ValidationError, match="duplicate import_id"):
        HiSparseConnectorMetadata(imports=(cmd, cmd))
    with pytest.raises(ValidationError, match="started and aborted"):
        HiSparseConnectorMetadata(imports=(cmd,), import_aborts=(0,))


def test_unvalidated_metadata_with_a_bad_import_is_named() -> None:
    bad = ImportCommand.model_construct(import_id=0, request_id="r1", target="elsewhere",
                                        num_tokens=4, block_size=4, pages=())
    meta = HiSparseConnectorMetadata.model_construct(
        transfers=(), replacements=(), seq=None, since=None, epoch=None,
        imports=(bad,), import_aborts=())
    assert "target" in (connector_metadata_problem(meta) or "")
    meta2 = HiSparseConnectorMetadata.model_construct(
        transfers=(), replacements=(), seq=None, since=None, epoch=None,
        imports=(), import_aborts=(True,))
    assert "import_aborts" in (connector_metadata_problem(meta2) or "")


def test_worker_import_acks_round_trip_and_refusals() -> None:
    ack = trusted_worker_meta(
        (), (), imports_landed=(ImportLanded(import_id=0, pages=(1, 3)),),
        imports_done=(0,), imports_failed=(ImportFailure(import_id=1, reason="transport",
                                                          detail="NIXL ERR"),))
    assert WORKER_META.validate_json(ack.model_dump_json()) == ack
    landed, done, failed = worker_meta_imports(ack)
    assert (landed[0].pages, done, failed[0].reason) == ((1, 3), (0,), "transport")
    with pytest.raises(ValidationError, match="both done and failed"):
        HiSparseWorkerMeta(imports_done=(1,),
                           imports_failed=(ImportFailure(import_id=1, reason="refused"),))
    with pytest.raises(ValidationError):
        ImportFailure(import_id=1, reason="refused", detail="x" * 241)
    with pytest.raises(ValidationError, match="distinct page indices"):
        ImportLanded(import_id=0, pages=(2, 2))
    forged = HiSparseWorkerMeta.model_construct(
        enqueued=(), completed=(), rank=0, seq=None, since=None, epoch=None,
        imports_landed=(ImportLanded.model_construct(import_id=0, pages=(0,)),),
        imports_done=(), imports_failed=())
    with pytest.raises(MalformedMessage, match="not distinct >= 1"):
        worker_meta_imports(forged)
