"""Wire messages: JSON round trips through the per-direction adapters; bad input is refused."""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import given
from pydantic import ValidationError

from hisparse.spec.messages import (
    CONNECTOR_METADATA,
    WORKER_META,
    BlockTableReplacement,
    HiSparseConnectorMetadata,
    HiSparseWorkerMeta,
    SparseKVPageTransfer,
    trusted,
    trusted_metadata,
    trusted_replacement,
    trusted_transfer,
    trusted_worker_meta,
)

ids = st.integers(0, 2**31)
transfers = st.lists(
    st.builds(SparseKVPageTransfer, transfer_id=ids, src_gpu_block=ids, dst_host_block=ids),
    unique_by=(lambda t: t.transfer_id, lambda t: t.dst_host_block),
    max_size=8,
)
replacements = st.lists(
    st.builds(
        BlockTableReplacement,
        request_id=st.text(min_size=1, max_size=8),
        page_index=st.integers(1, 10**6),
        host_block=ids,
    ),
    max_size=8,
)


@given(transfers, replacements)
def test_connector_metadata_round_trip(ts: list[SparseKVPageTransfer], rs: list[BlockTableReplacement]) -> None:
    meta = HiSparseConnectorMetadata(transfers=tuple(ts), replacements=tuple(rs))
    assert CONNECTOR_METADATA.validate_json(CONNECTOR_METADATA.dump_json(meta)) == meta


@given(st.lists(ids, unique=True, max_size=8), st.lists(ids, unique=True, max_size=8))
def test_worker_meta_round_trip(enq: list[int], done: list[int]) -> None:
    meta = HiSparseWorkerMeta(enqueued=tuple(enq), completed=tuple(done))
    assert WORKER_META.validate_json(WORKER_META.dump_json(meta)) == meta


@pytest.mark.parametrize(
    "raw",
    [
        b'{"enqueued": [1, 1]}',
        b'{"enqueued": [-1]}',
        b'{"enqueued": ["1"]}',
        b'{"completed": [1], "extra": 2}',
        b'{"enqueued": 3}',
        b"not json",
    ],
)
def test_bad_worker_meta_is_refused(raw: bytes) -> None:
    with pytest.raises(ValidationError):
        WORKER_META.validate_json(raw)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"transfers": [{"transfer_id": 1, "src_gpu_block": 0, "dst_host_block": 0},'
        b' {"transfer_id": 1, "src_gpu_block": 1, "dst_host_block": 1}]}',
        b'{"transfers": [{"transfer_id": 1, "src_gpu_block": 0, "dst_host_block": 0},'
        b' {"transfer_id": 2, "src_gpu_block": 1, "dst_host_block": 0}]}',
        b'{"transfers": [{"transfer_id": 1, "src_gpu_block": -1, "dst_host_block": 0}]}',
        b'{"transfers": [{"transfer_id": 1, "src_gpu_block": 0}]}',
        b'{"transfers": [{"transfer_id": 1, "src_gpu_block": 0, "dst_host_block": 0, "request_id": "r"}]}',
        b'{"replacements": [{"request_id": "", "page_index": 1, "host_block": 0}]}',
        b'{"replacements": [{"request_id": "r", "page_index": 0, "host_block": 0}]}',
    ],
)
def test_bad_connector_metadata_is_refused(raw: bytes) -> None:
    with pytest.raises(ValidationError):
        CONNECTOR_METADATA.validate_json(raw)


def test_messages_are_frozen() -> None:
    t = SparseKVPageTransfer(transfer_id=1, src_gpu_block=2, dst_host_block=3)
    with pytest.raises(ValidationError):
        t.transfer_id = 4


@given(transfers, st.lists(ids, max_size=3, unique=True))
def test_trusted_equals_validated(ts: list[SparseKVPageTransfer], done: list[int]) -> None:
    """``trusted`` (the hot path's constructor) builds what validation builds, frozen."""
    meta = trusted(HiSparseConnectorMetadata, transfers=tuple(ts), replacements=(), seq=None,
                   since=None, epoch=None, imports=(), import_aborts=())
    assert meta == HiSparseConnectorMetadata(transfers=tuple(ts))
    assert CONNECTOR_METADATA.validate_json(meta.model_dump_json()) == meta
    ack = trusted(HiSparseWorkerMeta, enqueued=(), completed=tuple(done), rank=0, seq=None,
                  since=None, epoch=None, imports_landed=(), imports_done=(),
                  imports_failed=())
    assert ack == HiSparseWorkerMeta(completed=tuple(done))
    with pytest.raises(ValidationError):
        ack.enqueued = (1,)


@given(
    transfers,
    replacements,
    st.lists(ids, max_size=3, unique=True),
    st.none() | st.tuples(st.integers(0, 7)),
    st.integers(0, 7),
)
def test_named_trusted_constructors_equal_validated(
    ts: list[SparseKVPageTransfer],
    rs: list[BlockTableReplacement],
    done: list[int],
    ranks: tuple[int, ...] | None,
    rank: int,
) -> None:
    """The per-message hot-path constructors build what validation builds, frozen,
    rank fields included (a command for some ranks only, a rank's own ack)."""
    built = tuple(trusted_transfer(t.transfer_id, t.src_gpu_block, t.dst_host_block) for t in ts)
    assert built == tuple(ts)
    some = tuple(
        trusted_transfer(t.transfer_id, t.src_gpu_block, t.dst_host_block, ranks) for t in ts
    )
    assert some == tuple(
        SparseKVPageTransfer(
            transfer_id=t.transfer_id,
            src_gpu_block=t.src_gpu_block,
            dst_host_block=t.dst_host_block,
            ranks=ranks,
        )
        for t in ts
    )
    reps = tuple(trusted_replacement(r.request_id, r.page_index, r.host_block) for r in rs)
    assert reps == tuple(rs)
    meta = trusted_metadata(built, reps)
    assert meta == HiSparseConnectorMetadata(transfers=tuple(ts), replacements=tuple(rs))
    assert CONNECTOR_METADATA.validate_json(meta.model_dump_json()) == meta
    some_meta = trusted_metadata(some, reps)
    assert CONNECTOR_METADATA.validate_json(some_meta.model_dump_json()) == some_meta
    ack = trusted_worker_meta((), tuple(done))
    assert ack == HiSparseWorkerMeta(completed=tuple(done))
    assert WORKER_META.validate_json(ack.model_dump_json()) == ack
    assert ack.model_fields_set == {"enqueued", "completed", "rank", "seq", "since", "epoch",
                                    "imports_landed", "imports_done", "imports_failed"}
    ranked = trusted_worker_meta(tuple(done), (), rank)
    assert ranked == HiSparseWorkerMeta(enqueued=tuple(done), rank=rank)
    assert WORKER_META.validate_json(ranked.model_dump_json()) == ranked
    with pytest.raises(ValidationError):
        meta.transfers = ()


def test_trusted_needs_every_field_and_no_other() -> None:
    with pytest.raises(TypeError, match="needs exactly"):
        trusted(HiSparseWorkerMeta, enqueued=(1,))
    with pytest.raises(TypeError, match="needs exactly"):
        trusted(HiSparseWorkerMeta, enqueued=(), completed=(), rank=0, seq=None, since=None,
                epoch=None, imports_landed=(), imports_done=(), imports_failed=(), extra=1)


@pytest.mark.parametrize("since", [(3,), (0, 3), (-1,)])
def test_metadata_naming_a_since_after_itself_is_refused(since: tuple[int, ...]) -> None:
    # each rank's since is a number at or before this message's (messages.py:177:raise:6:
    # no test built one)
    epoch = (0,) * len(since)
    with pytest.raises(ValidationError, match="since names a metadata number after this one"):
        HiSparseConnectorMetadata(transfers=(), seq=2, since=since, epoch=epoch)
    ok = HiSparseConnectorMetadata(transfers=(), seq=2, since=(2,) * len(since), epoch=epoch)
    assert ok.since == (2,) * len(since)


def test_trusted_messages_pickle_and_copy_as_validated_ones_do() -> None:
    """An engine ships the scheduler's metadata to its workers by pickling: a message
    built without validation must round-trip exactly as a validated one (messages.py's
    263:call:3 left the private-attribute slot unset, which pickling reads)."""
    import copy
    import pickle

    t = trusted_transfer(3, 1, 2)
    r = trusted_replacement("r", 1, 2)
    built = [t, r, trusted_metadata((t,), (r,), seq=4, since=(1,), epoch=(0,)),
             trusted_worker_meta((3,), (), rank=0, seq=1, since=0, epoch=0),
             trusted(SparseKVPageTransfer, transfer_id=5, src_gpu_block=0, dst_host_block=1,
                     ranks=None)]
    for m in built:
        valid = type(m).model_validate(m.model_dump())
        assert pickle.loads(pickle.dumps(m)) == m == valid
        assert copy.deepcopy(m) == m and m.__pydantic_private__ is None


def test_an_empty_epoch_beside_a_since_is_named_as_too_short() -> None:
    # an empty tuple is not a missing one (messages.py:174:none:13 read it as missing and
    # named the wrong rule)
    with pytest.raises(ValidationError, match="epoch needs one non-negative number per rank"):
        HiSparseConnectorMetadata(transfers=(), seq=1, since=(0,), epoch=())
    with pytest.raises(ValidationError, match="seq, since and epoch come together"):
        HiSparseConnectorMetadata(transfers=(), seq=1, since=(0,), epoch=None)


@pytest.mark.parametrize("field", ["imports_landed", "imports_done", "imports_failed"])
def test_a_worker_meta_names_an_import_once_per_kind_of_ack(field: str) -> None:
    # every kind is checked, landed acks too (messages.py:226:var:24 checked failed twice)
    from hisparse.spec.messages import ImportFailure, ImportLanded

    acks: dict[str, Any] = {
        "imports_landed": (ImportLanded(import_id=4, pages=(1,)),
                           ImportLanded(import_id=4, pages=(2,))),
        "imports_done": (4, 4),
        "imports_failed": (ImportFailure(import_id=4, reason="transport", detail="x"),) * 2,
    }
    with pytest.raises(ValidationError, match=f"duplicate import ID in {field}"):
        HiSparseWorkerMeta.model_validate({"enqueued": (), "completed": (), field: acks[field]})


def test_a_worker_meta_naming_a_since_after_itself_is_refused() -> None:
    # (messages.py:218:raise:12: no test built one)
    with pytest.raises(ValidationError, match="since names a worker meta after this one"):
        HiSparseWorkerMeta(enqueued=(), completed=(), seq=2, since=3, epoch=0)
    assert HiSparseWorkerMeta(enqueued=(), completed=(), seq=2, since=2, epoch=0).since == 2


@pytest.mark.parametrize(("seq", "since", "epoch"),
                         [(2, 1, None), (None, None, 0), (2, None, None), (None, 1, 0)])
def test_a_worker_meta_with_some_numbers_missing_is_refused(
        seq: int | None, since: int | None, epoch: int | None) -> None:
    # seq, since and epoch all three or none: a missing epoch beside seq and since too
    # (messages.py:215:var:43 compared seq twice and never read epoch)
    with pytest.raises(ValidationError, match="seq, since and epoch come together"):
        HiSparseWorkerMeta(enqueued=(), completed=(), seq=seq, since=since, epoch=epoch)
    assert HiSparseWorkerMeta(enqueued=(), completed=(), seq=2, since=1, epoch=0).epoch == 0
    assert HiSparseWorkerMeta(enqueued=(), completed=()).seq is None
