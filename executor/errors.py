"""Typed errors of the executors.

Every refusal is raised before any byte or hot-state entry changes, so a caller that
catches one holds exactly the pools it had before the call.
"""

from __future__ import annotations

# The hot-row minimum, as every message states it (executor/layout.py computes it).
HOT_ROWS_RULE = "(num_speculative_tokens + 1) x top_k"


class ExecutorError(Exception):
    """Base class of every error an executor raises."""


class ExecutorConfigError(ExecutorError):
    """A pool specification cannot be laid out; the message says which field to change."""


class BadTransfer(ExecutorError):
    """A spill names coordinates outside the pools, or collides with a copy still queued."""


class BadBatch(ExecutorError):
    """A resolve batch has the wrong shape, dtype, slot, row range or step."""


class BadPlan(ExecutorError):
    """A miss plan handed to ``replay`` names rows outside the follower's pools."""


class HotCapacityError(ExecutorError):
    """A slot's hot rows not already in use by this batch cannot hold an entry's misses.

    Configuration prevents it (``hot_rows >= HOT_ROWS_RULE``, ``min_hot_rows``); seeing it
    means the pools were sized for fewer speculative steps or a smaller top-K than the
    batch uses.
    """

    def __init__(self, entry: int, slot: int, needed: int, free: int) -> None:
        super().__init__(
            f"entry {entry} (slot {slot}) misses {needed} positions but only {free} hot rows "
            f"are not in use by this batch; raise hot_rows to at least {HOT_ROWS_RULE}"
        )
        self.entry = entry
        self.slot = slot
        self.needed = needed
        self.free = free


class BadHostRead(ExecutorError):
    """A direct CPU read names host rows outside the host pool."""


class PendingHostWrite(ExecutorError):
    """A direct CPU read touches a host block that a queued copy has not yet written.

    The bytes there are not the ones the accelerator will leave; read again after the
    copy's transfer ID has been reported by ``completed()``.
    """

    def __init__(self, host_block: int, transfer_id: int) -> None:
        super().__init__(
            f"host block {host_block} still has copy {transfer_id} queued into it; "
            "wait until completed() reports it"
        )
        self.host_block = host_block
        self.transfer_id = transfer_id


class LaunchRefused(ExecutorError):
    """Blocks of a resolver launch refused on the device; raised by the next host call.

    A refused block changes no pool state and leaves its entry empty (rows -1, no plan),
    so nothing downstream reads a stale or uninitialized row; the host learns of it from
    mapped pinned memory at its next call, with no sync on the decode path.
    """

    def __init__(self, pools_what: str, blocks: int, advice: str) -> None:
        super().__init__(f"{blocks} resolver block(s) refused: {pools_what}; {advice}")
        self.blocks = blocks


class StaleStep(LaunchRefused):
    """A launch's step was not above the last completed launch's on the same pools (a
    CUDA-graph replay without a new step): the whole launch refused, nothing changed."""

    def __init__(self, blocks: int) -> None:
        super().__init__(
            "the launch's step did not exceed the last completed launch's step on these "
            "pools (a graph replay without a new step)", blocks,
            "raise the step before every launch; the pools are unchanged",
        )


class LaunchConflict(LaunchRefused):
    """Another launch held the pools (two launches at once, or one that never finished):
    the pools are poisoned and every launch refuses until ``CudaExecutor.recover``."""

    def __init__(self, blocks: int) -> None:
        super().__init__(
            "another launch held these pools (concurrent launches on one cache, or a "
            "launch that never finished)", blocks,
            "every launch on these pools refuses until CudaExecutor.recover(pools)",
        )


class CopyWaitExpired(LaunchRefused):
    """A copy helper's bounded wait for a published plan expired (an invariant broke):
    its share of the copies was skipped; recover the pools."""

    def __init__(self, blocks: int) -> None:
        super().__init__(
            "a copy helper waited too long for a miss plan and skipped its copies", blocks,
            "the hot rows may be incomplete: CudaExecutor.recover(pools)",
        )
