"""Rule: the connectors' small contracts hold at their edges: a child's bytes exactly at
the size limit pass and one byte more is refused, naming what and which child; a
one-token block layout is valid; one offload metadata never repeats a job ID (across
stores and restores) nor sends two stores to one host slot; a GPU block freed more
often than it was allocated is refused; the indexer oracle's bytes change at every key
byte and every scale when the content or the layer changes
(``hisparse/connectors/{base,wire,gpu_group,indexer_rows}.py``).

From the guard survivors of the third guard-phase run (docs/mutation-survivors.md):
``base.py:62:cmp:0`` (bytes at the limit refused), ``base.py:27:int:0`` (``ge=1`` → ``ge=2``),
``base.py:52:var:1`` (the message named the child twice), ``base.py:46:var:2`` (``child``
held the message kind), ``wire.py:32:raise:0``, ``wire.py:35:raise:1`` (the two
uniqueness refusals deleted), ``gpu_group.py:90:raise:0`` (a double free accepted),
``indexer_rows.py:49:arith:2`` (``% 256`` → ``// 256``: neighbouring contents shared
most key bytes, so a restore of the wrong block could pass its oracle check).
From the second round: ``wire.py:71:raise:3`` (a MultiConnector message with two parts
for one child accepted: the reader's ``{child: data}`` kept the last and dropped the
other silently).
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from hisparse.connectors.base import KVLayout, MalformedChildMessage, check_size, parse_child
from hisparse.connectors.gpu_group import PrefixCachedGroup
from hisparse.connectors.indexer_rows import SCALE_BYTES, IndexerLayout, oracle_block
from hisparse.connectors.wire import (
    MULTI_MESSAGE,
    BlockCopy,
    ChildBytes,
    MultiMessage,
    OffloadMetadata,
)
from hisparse.spec.messages import MAX_MESSAGE_BYTES


@pytest.mark.parametrize("limit", [0, 1, 7, 64])
def test_bytes_at_the_limit_pass_and_one_more_is_refused_naming_child_and_kind(
    limit: int,
) -> None:
    check_size(b"x" * limit, limit, "offload", "worker meta")
    with pytest.raises(MalformedChildMessage) as exc:
        check_size(b"x" * (limit + 1), limit, "offload", "worker meta")
    assert exc.value.child == "offload"
    assert str(exc.value) == (f"worker meta for child 'offload': {limit + 1} bytes, "
                              f"over the limit of {limit}")


def test_parse_child_refuses_oversized_bytes_naming_the_kind_then_the_child() -> None:
    raw = b"1" * (MAX_MESSAGE_BYTES + 1)
    with pytest.raises(MalformedChildMessage, match=r"^metadata for child 'hisparse': ") as e:
        parse_child(TypeAdapter(int), raw, "hisparse", "metadata")
    assert e.value.child == "hisparse"
    assert parse_child(TypeAdapter(int), b"12", "hisparse", "metadata") == 12


def test_a_one_token_block_layout_is_valid_and_zero_is_not() -> None:
    assert KVLayout(block_tokens=1).block_tokens == 1
    with pytest.raises(ValidationError):
        KVLayout(block_tokens=0)


def test_one_offload_metadata_repeats_no_job_and_stores_no_slot_twice() -> None:
    def copy(job: int, slot: int) -> BlockCopy:
        return BlockCopy(job_id=job, gpu_block=0, host_slot=slot)

    with pytest.raises(ValidationError, match="duplicate job_id"):
        OffloadMetadata(stores=(copy(1, 0),), restores=(copy(1, 1),))
    with pytest.raises(ValidationError, match="duplicate job_id"):
        OffloadMetadata(restores=(copy(2, 0), copy(2, 1)))
    with pytest.raises(ValidationError, match="two stores target one host slot"):
        OffloadMetadata(stores=(copy(1, 3), copy(2, 3)))
    ok = OffloadMetadata(stores=(copy(1, 3),), restores=(copy(2, 3), copy(3, 3)))
    assert len(ok.restores) == 2  # restores from one slot are fine


def test_a_block_freed_more_often_than_allocated_is_refused() -> None:
    group = PrefixCachedGroup(3, 8)
    blocks = group.allocate(["a", "b"], 0)
    assert blocks is not None
    group.free(blocks)
    free = group.num_free
    with pytest.raises(RuntimeError, match=f"GPU block {blocks[0]} freed more often"):
        group.free(blocks[:1])
    assert group.num_free == free


@given(key=st.integers(0, 1000), layer_count=st.integers(1, 3), tokens=st.integers(1, 4),
       head_dim=st.integers(1, 16))
def test_the_indexer_oracle_changes_every_byte_with_the_content_or_the_layer(
    key: int, layer_count: int, tokens: int, head_dim: int
) -> None:
    ix = IndexerLayout(block_tokens=tokens, layers=layer_count, head_dim=head_dim)

    def parts(k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        block = oracle_block(ix, k)
        assert block.shape == (ix.block_bytes,)
        out = []
        for la in range(layer_count):
            region = block[la * ix.layer_bytes:(la + 1) * ix.layer_bytes]
            keys, scales = region[: tokens * head_dim], region[tokens * head_dim:]
            assert scales.size == tokens * SCALE_BYTES
            out.append((keys, scales.view(np.float32)))
        return out

    mine, nxt = parts(key), parts(key + 1)
    for (k0, s0), (k1, s1) in zip(mine, nxt, strict=True):
        assert np.all(k0 != k1)  # every key byte names its content
        assert np.all(s0 != s1)  # and every scale
        assert np.all((s0 >= 1.0) & (s0 < 2.6))
    for (k0, s0), (k1, s1) in pairwise(mine):
        assert np.all(k0 != k1) and np.all(s0 != s1)  # and its layer


@settings(deadline=None)  # CI runs on 2 busy cores: no per-example time limit
@given(names=st.lists(st.sampled_from(["hisparse", "offload", "x"]), max_size=5))
def test_a_multi_message_holds_at_most_one_part_per_child(names: list[str]) -> None:
    parts = tuple(ChildBytes(child=n, data=bytes([i])) for i, n in enumerate(names))
    raw = b'{"parts":[' + b",".join(p.model_dump_json().encode() for p in parts) + b"]}"
    if len(set(names)) == len(names):
        msg = MultiMessage(parts=parts)
        assert [p.child for p in msg.parts] == names
        assert MULTI_MESSAGE.validate_json(raw) == msg
        return
    with pytest.raises(ValidationError, match="two parts for one child"):
        MultiMessage(parts=parts)
    with pytest.raises(ValidationError, match="two parts for one child"):
        MULTI_MESSAGE.validate_json(raw)
