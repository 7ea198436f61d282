"""Host-side checks of resolve batches and miss plans, done once per call.

They run before an executor touches anything, which is what makes ``resolve`` and
``replay`` atomic: a batch is either wholly acceptable or refused with no state change.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from hisparse.executor.base import NO_ENTRY, ResolveBatch, SpillCopy
from hisparse.executor.errors import BadBatch, BadHostRead, BadPlan, BadTransfer
from hisparse.executor.layout import PoolLayout


def _int32_array(name: str, value: object, ndim: int) -> NDArray[np.int32]:
    if not isinstance(value, np.ndarray) or value.dtype != np.int32 or value.ndim != ndim:
        got = (
            f"{value.dtype}[{value.ndim}-d]" if isinstance(value, np.ndarray)
            else type(value).__name__
        )
        raise BadBatch(f"{name} must be a {ndim}-d int32 array, got {got}")
    return value


def _first(mask: NDArray[np.bool_]) -> tuple[int, ...]:
    """Index of the first True in ``mask`` (row-major): names the offender in messages."""
    return tuple(int(i) for i in np.argwhere(mask)[0])


def check_batch(layout: PoolLayout, batch: ResolveBatch, last_step: int | None) -> None:
    """Raise ``BadBatch`` unless ``batch`` is well-formed for pools of ``layout``.

    ``last_step`` is the step of the previous successful resolve on the same pools (None
    before the first); ``batch.step`` must be a non-negative int above it, so a fresh
    stamp always outranks every stored stamp and the -1 of empty rows.
    """
    step = batch.step
    if not isinstance(step, int | np.integer) or isinstance(step, bool):
        raise BadBatch(f"step must be an int, got {type(step).__name__}")
    if step < 0:
        raise BadBatch(f"step must be >= 0, got {step}")
    if last_step is not None and step <= last_step:
        raise BadBatch(f"step {step} must exceed the previous resolve's step {last_step}")

    slots = _int32_array("slots", batch.slots, 1)
    topk = _int32_array("topk", batch.topk, 2)
    resident = _int32_array("resident_row", batch.resident_row, 2)
    host = _int32_array("host_row", batch.host_row, 2)
    n = slots.shape[0]
    if topk.shape[0] != n:
        raise BadBatch(f"topk has {topk.shape[0]} entries but slots has {n}")
    for name, arr in (("resident_row", resident), ("host_row", host)):
        if arr.shape != topk.shape:
            raise BadBatch(f"{name} has shape {arr.shape}, topk has {topk.shape}")

    bad_slot = (slots < 0) | (slots >= layout.slots)
    if bad_slot.any():
        e = _first(bad_slot)[0]
        raise BadBatch(f"entry {e}: slot {slots[e]} outside 0..{layout.slots - 1}")
    starts = slots[np.r_[True, slots[1:] != slots[:-1]]] if n else slots
    if len(np.unique(starts)) != len(starts):
        raise BadBatch("entries of one slot must be consecutive (one run per slot per batch)")

    if (topk < NO_ENTRY).any():
        e, i = _first(topk < NO_ENTRY)
        raise BadBatch(f"entry {e} position {i}: topk {topk[e, i]} is below -1")
    real = topk != NO_ENTRY
    bad_res = real & ((resident < NO_ENTRY) | (resident >= layout.resident_rows))
    if bad_res.any():
        e, i = _first(bad_res)
        raise BadBatch(
            f"entry {e} position {i}: resident_row {resident[e, i]} outside "
            f"-1..{layout.resident_rows - 1}"
        )
    needs_host = real & (resident == NO_ENTRY)
    bad_host = needs_host & ((host < 0) | (host >= layout.host_rows))
    if bad_host.any():
        e, i = _first(bad_host)
        raise BadBatch(
            f"entry {e} position {i}: non-resident position needs host_row in "
            f"0..{layout.host_rows - 1}, got {host[e, i]}"
        )


def check_plan(layout: PoolLayout, plan: NDArray[np.int32]) -> None:
    """Raise ``BadPlan`` unless ``plan`` is an int32 [m, 2] of (hot row, host row) pairs.

    Hot rows must lie in the hot region and be distinct (a resolve fills each hot row at
    most once), so the copies may run in any order, or all at once.
    """
    if not isinstance(plan, np.ndarray) or plan.dtype != np.int32 or plan.ndim != 2 or (
        plan.shape[1] != 2
    ):
        raise BadPlan("plan must be an int32 array of shape [m, 2]")
    hot, src = plan[:, 0], plan[:, 1]
    bad_hot = (hot < layout.resident_rows) | (hot >= layout.device_rows)
    if bad_hot.any():
        k = _first(bad_hot)[0]
        raise BadPlan(
            f"plan row {k}: device row {hot[k]} outside the hot region "
            f"{layout.resident_rows}..{layout.device_rows - 1}"
        )
    bad_src = (src < 0) | (src >= layout.host_rows)
    if bad_src.any():
        k = _first(bad_src)[0]
        raise BadPlan(f"plan row {k}: host row {src[k]} outside 0..{layout.host_rows - 1}")
    if len(np.unique(hot)) != len(hot):
        raise BadPlan("plan fills one hot row twice")


def check_host_rows(layout: PoolLayout, rows: object) -> NDArray[np.int64]:
    """``rows`` as a 1-d integer array of host rows, or ``BadHostRead``."""
    arr = np.asarray(rows)
    if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
        raise BadHostRead("rows must be a 1-d integer array")
    bad = (arr < 0) | (arr >= layout.host_rows)
    if bad.any():
        raise BadHostRead(f"host row {arr[bad][0]} outside 0..{layout.host_rows - 1}")
    return arr.astype(np.int64, copy=False)


def check_spills(layout: PoolLayout, spills: Sequence[SpillCopy]) -> list[SpillCopy]:
    """``spills`` as plain ints, or ``BadTransfer``: every coordinate in range, and no
    transfer ID or destination host block twice in the batch. Collisions with copies
    already queued are the executor's to check (it holds the queue)."""
    checked: list[SpillCopy] = []
    gpu, host = layout.gpu_blocks, layout.host_blocks
    for spill in spills:
        if len(spill) == 3:  # the common case, plain ints in range: no per-field loop
            t, s, d = spill
            if (type(t) is int and type(s) is int and type(d) is int
                    and t >= 0 and 0 <= s < gpu and 0 <= d < host):
                checked.append((t, s, d))
                continue
        else:
            raise BadTransfer(
                f"a spill is (transfer_id, src_gpu_block, dst_host_block), got {spill!r}")
        for name, value, limit in zip(
            ("transfer_id", "src_gpu_block", "dst_host_block"),
            spill,
            (None, layout.gpu_blocks, layout.host_blocks),
            strict=True,
        ):
            if not isinstance(value, int | np.integer) or isinstance(value, bool):
                raise BadTransfer(f"{name} must be an int, got {type(value).__name__}")
            if value < 0 or (limit is not None and value >= limit):
                bound = "must be >= 0" if limit is None else f"must be in 0..{limit - 1}"
                raise BadTransfer(f"{name} {value} {bound}")
        checked.append((int(spill[0]), int(spill[1]), int(spill[2])))
    tids = [t for t, _, _ in checked]
    dsts = [d for _, _, d in checked]
    if len(set(tids)) != len(tids):
        raise BadTransfer("a transfer ID appears twice: one transfer moves one page per cache")
    if len(set(dsts)) != len(dsts):
        raise BadTransfer("a host block is the destination of two copies in one batch")
    return checked


def check_host_block(layout: PoolLayout, host_block: int, shape: tuple[int, ...] | None = None
                     ) -> None:
    """A staged page's host block (``write_host_block``): in the pool, and, given the
    data's ``shape``, one whole block of rows; ``BadPlan`` otherwise. Every executor
    refuses with these words, so a refusal reads the same on the reference and the GPU."""
    if not 0 <= host_block < layout.host_blocks:
        raise BadPlan(f"host block {host_block} outside 0..{layout.host_blocks - 1}")
    if shape is not None and shape != (layout.block_tokens, layout.row_bytes):
        raise BadPlan(f"a host block is {layout.block_tokens} rows of "
                      f"{layout.row_bytes} bytes, got {shape}")

