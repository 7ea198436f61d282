"""Rules that survivors of the whole mutation run showed (docs/mutation-run7): block 0 is a
block like any other in an import command's checks, a staged page must be one whole host
block (a scalar is not), an out-of-range host block is refused by name before anything
else reads it, and token ``offset`` of host block ``b`` lives in host row ``b * block_tokens
+ offset``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray
from pydantic import ValidationError

from hisparse.executor import BadPlan, PoolLayout, ReferenceExecutor, ReferencePools
from hisparse.executor.validate import check_host_block
from hisparse.msgshape import connector_metadata_problem
from hisparse.spec.messages import ImportCommand, PageImport, import_command_problem
from tests.test_executor_reference import make_batch, pos_bytes
from tests.test_rule_msgshape_imports import _meta

Blocks = tuple[tuple[int | None, int | None], ...]
"""An import's pages as (host_block, gpu_block), pages 1..n, four full rows each."""

LAYOUT = PoolLayout(gpu_blocks=2, host_blocks=4, block_tokens=4, row_bytes=16, hot_rows=4,
                    slots=1)


def _fields(target: str, pages: Blocks) -> dict[str, Any]:
    return dict(import_id=0, request_id="r", target=target, num_tokens=4 * len(pages),
                block_size=4)


def _plain(pages: Blocks) -> list[dict[str, Any]]:
    return [dict(page_index=i, key=f"k{i}", valid_rows=4, host_block=h, gpu_block=g)
            for i, (h, g) in enumerate(pages, start=1)]


def _refused_everywhere(target: str, pages: Blocks, why: str) -> None:
    """Validation refuses the command with exactly ``why``, and so do the shape checks of
    the same command built unvalidated (``model_construct``)."""
    with pytest.raises(ValidationError) as err:
        ImportCommand(**_fields(target, pages),
                      pages=tuple(PageImport(**p) for p in _plain(pages)))
    assert [e["msg"] for e in err.value.errors()] == [f"Value error, {why}"]
    assert [e["type"] for e in err.value.errors()] == ["value_error"]
    cmd = ImportCommand.model_construct(
        **_fields(target, pages),
        pages=tuple(PageImport.model_construct(**p) for p in _plain(pages)))
    assert import_command_problem(cmd) == why
    assert connector_metadata_problem(_meta((cmd,))) == why


# --- an import command: block 0 is a block --------------------------------------------


@pytest.mark.parametrize(("pages", "page"), [
    (((None, None),), 1),
    (((None, 1), (None, None)), 2),
    (((3, 1),), 1),
    (((None, 0), (3, 1)), 2),
])
def test_a_device_page_with_no_gpu_block_or_with_a_host_block_is_refused_by_name(
        pages: Blocks, page: int) -> None:
    # a device-target page needs a GPU block AND no host block: either fault alone is
    # refused (kills spec/messages.py:109:bool:7, which refused only a page with a host
    # block and no GPU block: a page with no block at all, or with both, passed)
    _refused_everywhere("device", pages,
                        f"device-target page {page} needs a GPU block and no host block")


@pytest.mark.parametrize("pages", [((0, 1),), ((None, 1), (0, 0))])
def test_a_device_page_naming_host_block_0_is_refused_by_name(pages: Blocks) -> None:
    # host block 0 is a host block (kills spec/messages.py:109:none:10, which read
    # host_block 0 as "no host block": the device page passed)
    page = len(pages)
    _refused_everywhere("device", pages,
                        f"device-target page {page} needs a GPU block and no host block")


@pytest.mark.parametrize("pages", [((0, None), (0, None)), ((1, None), (0, 2), (0, None))])
def test_a_host_import_naming_host_block_0_for_two_pages_is_refused_by_name(
        pages: Blocks) -> None:
    # kills spec/messages.py:113:none:2, which skipped host block 0 in the duplicate check
    _refused_everywhere("host", pages, "host block 0 named twice")


def test_a_host_import_mirroring_two_pages_into_gpu_block_0_is_refused_by_name() -> None:
    # a mirrored host import (host blocks with GPU blocks too) names GPU block 0 once
    # (kills spec/messages.py:117:none:3, which skipped GPU block 0 in the duplicate check)
    _refused_everywhere("host", ((1, 0), (2, None), (3, 0)), "GPU block 0 named twice")


@pytest.mark.parametrize(("target", "pages"), [
    ("device", ((None, 0), (None, 1))),
    ("host", ((0, None), (1, 0), (2, None))),
    ("host", ((1, 1), (0, 0))),
])
def test_block_0_named_once_is_accepted(target: str, pages: Blocks) -> None:
    # the refusals above are about block 0 named twice or in the wrong place, not block 0
    cmd = ImportCommand(**_fields(target, pages),
                        pages=tuple(PageImport(**p) for p in _plain(pages)))
    assert import_command_problem(cmd) is None
    assert connector_metadata_problem(_meta((cmd,))) is None
    assert [(p.host_block, p.gpu_block) for p in cmd.pages] == list(pages)


# --- a staged page into a host block ---------------------------------------------------


def _fresh() -> tuple[ReferenceExecutor, ReferencePools]:
    ex = ReferenceExecutor()
    pools = ex.allocate(LAYOUT)
    for r in range(LAYOUT.host_rows):
        pools.host[r] = pos_bytes(r, LAYOUT.row_bytes)
    return ex, pools


def _snapshot(ex: ReferenceExecutor, pools: ReferencePools) -> dict[str, bytes]:
    return {k: v.tobytes() for k, v in ex.snapshot(pools).items()}


@pytest.mark.parametrize("data", [np.array(7, dtype=np.uint8), np.uint8(7)])
def test_a_scalar_is_not_a_staged_page_and_is_refused_by_shape(data: Any) -> None:
    # a 0-d array or NumPy scalar (shape ()) would broadcast over the whole block: it is
    # refused by its shape, changing nothing (kills executor/validate.py:170:none:1, which
    # read the empty shape () as "no shape given" and filled host block 1 with 7s)
    ex, pools = _fresh()
    before = _snapshot(ex, pools)
    with pytest.raises(BadPlan, match=r"^a host block is 4 rows of 16 bytes, got \(\)$"):
        ex.write_host_block(pools, 1, data)
    assert _snapshot(ex, pools) == before
    with pytest.raises(BadPlan, match=r"^a host block is 4 rows of 16 bytes, got \(\)$"):
        check_host_block(LAYOUT, 1, ())
    check_host_block(LAYOUT, 1, (4, 16))  # a whole block, and no shape at all, pass
    check_host_block(LAYOUT, 1)


@pytest.mark.parametrize("block", [4, 9, -1])
def test_an_out_of_range_host_block_given_as_an_array_is_refused_by_name(block: int) -> None:
    # the range check comes first, whatever the block's type: a 0-d NumPy array (which
    # cannot be hashed) outside the pool is refused as BadPlan by its number, the pools
    # unchanged (kills executor/reference.py:153:reorder:3, which looked the block up
    # among the queued copies first: TypeError "unhashable type" instead of the refusal)
    ex, pools = _fresh()
    ex.enqueue_spill(pools, 0, 0, 2)  # a copy in flight: the queued copies are consulted
    before = _snapshot(ex, pools)
    page = np.full((4, 16), 7, np.uint8)
    with pytest.raises(BadPlan, match=rf"^host block {block} outside 0\.\.3$"):
        ex.write_host_block(pools, np.asarray(block), page)  # type: ignore[arg-type]
    assert _snapshot(ex, pools) == before
    assert ex.queued() == [0]


# --- the host row of a token -----------------------------------------------------------


def test_a_tokens_host_row_holds_that_token_of_its_host_block() -> None:
    # host_row(b, offset) = b * block_tokens + offset: the row a CPU reader and a decode
    # miss read token ``offset`` of a staged page from (kills executor/layout.py:71:arith:4,
    # b * block_tokens - offset: row 7 read as token 1 of block 2 instead of row 9)
    ex, pools = _fresh()
    page = np.stack([pos_bytes(100 + t, LAYOUT.row_bytes) for t in range(4)])
    ex.write_host_block(pools, 2, page)
    rows = [LAYOUT.host_row(2, t) for t in range(4)]
    assert rows == [8, 9, 10, 11]
    assert np.array_equal(ex.read_host_rows(pools, np.array(rows, dtype=np.int64)), page)
    # a decode step missing on tokens 1 and 3 of the page brings exactly their bytes
    hot: NDArray[np.int64] = np.array([LAYOUT.hot_row(0, i) for i in range(2)])
    batch = make_batch(1, [(0, [41, 43], None, [LAYOUT.host_row(2, 1), LAYOUT.host_row(2, 3)])])
    result = ex.resolve(pools, batch)
    assert result.misses == 2
    got = ex.read_device_rows(pools, result.rows.reshape(-1).astype(np.int64))
    assert sorted(result.rows.reshape(-1).tolist()) == hot.tolist()
    assert np.array_equal(got, page[[1, 3]])


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.integers(1, 6), st.data())
def test_every_token_of_a_host_block_has_its_own_row_in_that_block(
        host_blocks: int, block_tokens: int, data: st.DataObject) -> None:
    # the host rows of block b are b * block_tokens .. + block_tokens - 1, one per token
    # in order: exactly the rows ``write_host_block`` writes (same mutant as above)
    layout = PoolLayout(gpu_blocks=1, host_blocks=host_blocks, block_tokens=block_tokens,
                        row_bytes=16, hot_rows=1, slots=1)
    b = data.draw(st.integers(0, host_blocks - 1))
    ex = ReferenceExecutor()
    pools = ex.allocate(layout)
    page = np.stack([pos_bytes(t, 16, salt=1) for t in range(block_tokens)])
    ex.write_host_block(pools, b, page)
    for t in range(block_tokens):
        row = layout.host_row(b, t)
        assert row == b * block_tokens + t
        assert np.array_equal(ex.read_host_rows(pools, np.array([row], dtype=np.int64))[0],
                              page[t])
