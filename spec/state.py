"""The protocol state: exactly the variables of tla/HiSparse.tla, in Python.

Names follow the TLA+ variables (``gpuOwner`` → ``gpu_owner``). Sentinels of the
spec map to ``None`` (NoPage, NoLoc, NoKey, Idle, NoSpill). Blocks are integers
``0 .. n-1``; pages are ``(request_id, i)`` with ``i`` 1-based as in the spec.
"""

from __future__ import annotations

import copy
from collections import deque
from dataclasses import dataclass, field
from itertools import repeat
from typing import Literal, NamedTuple

from hisparse.spec.constants import ProtocolConfig
from hisparse.spec.native import mypyc_attr

RequestId = str
Key = str
Page = tuple[RequestId, int]
Tier = Literal["gpu", "host"]
Loc = tuple[Tier, int]
ReqState = Literal["new", "importing", "running", "finished", "aborted"]
ImportTarget = Literal["none", "device", "host"]
ImportPhase = Literal["none", "announced", "landing", "landed", "failed"]
# an import whose destinations are leased and not yet returned or published
LIVE_IMPORT = frozenset({"landing", "landed", "failed"})
HostState = Literal["free", "leased", "valid"]
Phase = Literal["sent", "enqueued", "abandoned"]

EMPTY = "empty"
GARBAGE = "garbage"
# Strings the spec uses as sentinels; no request ID or key may equal one.
SENTINELS = frozenset({"nopage", "nowhere", "none", "nokey", "idle", EMPTY, GARBAGE})


@mypyc_attr(native_class=False)  # (an int subclass: a Python class)
class HostBlock(int):
    """A host block ID: a distinct type so it can never pass for a GPU pool index.

    The seed's source group has ``block_pool_id=None``; code must narrow before
    indexing a device pool. Here the narrowing is a type check (TypeOK).
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return f"HostBlock({int(self)})"


class Spill(NamedTuple):
    """The coordinator's record of an open transfer, keyed by its destination host block.

    ``enq``: the ranks whose enqueued ack was consumed; ``need``: the ranks that still
    owe an ack (the spec's fields of the same names)."""

    src: int
    page: Page
    phase: Phase
    transfer_id: int
    enq: frozenset[int] = frozenset()
    need: frozenset[int] = frozenset()


class Imp(NamedTuple):
    """A request's import (the spec's imp[r]): its landing target, chosen once, and its
    phase ("landed"/"failed": the worker's ack in flight)."""

    target: ImportTarget
    phase: ImportPhase


class PgImp(NamedTuple):
    """A page's import (the spec's pg[p]): its host source block (None: NoLoc), the
    chunks at its destination, the chunks in its staging slot, whether it holds one."""

    host: int | None
    landed: frozenset[int]
    staged: frozenset[int]
    slot: bool


NO_IMP = Imp("none", "none")
NO_PG = PgImp(None, frozenset(), frozenset(), False)


class Transfer(NamedTuple):
    """A command in flight to the worker (a SparseKVPageTransfer, internal form)."""

    transfer_id: int
    src: int
    dst: int


class Meta(NamedTuple):
    """A worker meta in flight to the scheduler (internal form of HiSparseWorkerMeta)."""

    enqueued: tuple[int, ...]
    completed: tuple[int, ...]


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)  # (spec/native.py)
@dataclass
class ProtocolState:
    """All variables of the spec. Mutated only by ProtocolMachine actions."""

    config: ProtocolConfig
    page_keys: dict[RequestId, tuple[Key, ...]] = field(default_factory=dict)
    # scheduler: requests and the block table
    req: dict[RequestId, ReqState] = field(default_factory=dict)
    loc: dict[Page, Loc | None] = field(default_factory=dict)
    # scheduler: HMA's device pool and leases
    gpu_owner: list[Page | None] = field(default_factory=list)
    src_pin: list[bool] = field(default_factory=list)
    # scheduler: the coordinator's host blocks
    host_state: list[HostState] = field(default_factory=list)
    host_key: list[Key | None] = field(default_factory=list)
    prefix: dict[Key, set[int]] = field(default_factory=dict)
    spill: list[Spill | None] = field(default_factory=list)
    # channels, one pair per rank (indexed by rank)
    down: list[dict[int, Transfer]] = field(default_factory=list)
    up: list[deque[Meta]] = field(default_factory=list)
    # faulty channels: per rank, an unnoticed gap (a lost connector metadata or worker meta)
    lost: list[bool] = field(default_factory=list)
    # workers, per rank
    copying: list[list[Key | None]] = field(default_factory=list)
    waits: list[set[int]] = field(default_factory=list)  # reader streams ordered after the writer
    reading: list[set[int]] = field(default_factory=list)  # blocks a reader's queued reads may read
    w_enq: list[list[int]] = field(default_factory=list)
    w_done: list[list[int]] = field(default_factory=list)
    # the bytes, abstractly: the GPU pool (the same on every rank), each physical host pool
    gpu_data: list[Key] = field(default_factory=list)
    host_data: dict[int, list[Key]] = field(default_factory=dict)  # copier rank -> its pool
    # P/D import: the entries that are not NoImp / NoPg (absent: the Init value), so
    # they cost O(live imports); ``imports`` is the spec's constant Imports
    imp: dict[RequestId, Imp] = field(default_factory=dict)
    pg: dict[Page, PgImp] = field(default_factory=dict)
    imports: set[RequestId] = field(default_factory=set)
    # auxiliary: the GPU block an importing page holds (the spec's GpuOf), until
    # completion (a mirrored or device page then has it in ``loc``) or failure
    imp_gpu: dict[Page, int] = field(default_factory=dict)
    # auxiliary (not spec variables): transfer ID allocation and lookup
    next_transfer_id: int = 0
    transfer_dst: dict[int, int] = field(default_factory=dict)
    copying_tid: list[dict[int, int]] = field(default_factory=list)  # per rank: host -> ID
    host_refs: dict[int, int] = field(default_factory=dict)  # block-table entries per host block
    host_used: int = 0  # host blocks not free (host_in_use() recomputes it for invariants)
    open_spills: set[int] = field(default_factory=set)  # host blocks h with spill[h] set
    # per request: resident leases and open transfers naming its pages (Referenced)
    req_refs: dict[RequestId, int] = field(default_factory=dict)
    # every key declared while invariants are checked (the spec's constant Keys): with
    # W ranks a copy may still run from a source a retired request's page had reused
    keys_seen: set[Key] = field(default_factory=set)

    @classmethod
    def initial(cls, config: ProtocolConfig) -> ProtocolState:
        """The spec's Init."""
        g, h, w = config.gpu_blocks, config.host_blocks, range(config.ranks)
        return cls(
            config=config,
            gpu_owner=[None] * g,
            src_pin=[False] * g,
            host_state=["free"] * h,
            host_key=[None] * h,
            spill=[None] * h,
            down=[{} for _ in w],
            up=[deque() for _ in w],
            lost=[False for _ in w],
            copying=[[None] * h for _ in w],
            waits=[set() for _ in w],
            reading=[set() for _ in w],
            w_enq=[[] for _ in w],
            w_done=[[] for _ in w],
            gpu_data=[EMPTY] * g,
            host_data={b: [EMPTY] * h for b in config.copiers},
            copying_tid=[{} for _ in w],
        )

    def clone(self) -> ProtocolState:
        """A deep copy (tests compare states before and after refused actions)."""
        return copy.deepcopy(self)

    def pages_of(self, r: RequestId) -> list[Page]:
        n = len(self.page_keys[r])
        return list(zip(repeat(r, n), range(1, n + 1), strict=True))  # no frame per page

    def known(self, p: Page) -> bool:
        """p is a page of a request in the protocol state (not retired, not undeclared)."""
        keys = self.page_keys.get(p[0])
        return keys is not None and 1 <= p[1] <= len(keys)

    def key_of(self, p: Page) -> Key:
        return self.page_keys[p[0]][p[1] - 1]

    def pages(self) -> list[Page]:
        return [p for r in self.page_keys for p in self.pages_of(r)]

    def imp_of(self, r: RequestId) -> Imp:
        return self.imp.get(r, NO_IMP)

    def pg_of(self, p: Page) -> PgImp:
        return self.pg.get(p, NO_PG)

    def slots(self) -> int:
        """Staging slots in use (the spec's Cardinality(Slots)). O(import pages)."""
        return sum(1 for x in self.pg.values() if x.slot)

    def host_in_use(self) -> int:
        return sum(1 for s in self.host_state if s != "free")

    def in_flight(self, h: int) -> bool:
        """h in the spec's InFlightBlocks: on some rank a command, copy or ack still names
        host block h, or a transfer into h is open."""
        dst = self.transfer_dst
        return self.spill[h] is not None or any(
            any(t.dst == h for t in self.down[w].values())
            or self.copying[w][h] is not None
            or any(dst.get(t) == h for t in self.w_enq[w])
            or any(dst.get(t) == h for t in self.w_done[w])
            or any(dst.get(t) == h for m in self.up[w] for t in (*m.enqueued, *m.completed))
            for w in range(self.config.ranks)
        )

    def stream_host_data(self, w: int, h: int) -> Key:
        """The bytes rank w's reads of host block h see (the spec's StreamHostData): a copy
        into the pool w reads is seen once ordered before the read, always on the rank's
        own stream, for a reader of a shared pool only through ``waits``."""
        b = self.config.bank(w)
        c = self.copying[b][h]
        return c if c is not None and (b == w or h in self.waits[w]) else self.host_data[b][h]
