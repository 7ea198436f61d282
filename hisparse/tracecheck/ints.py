"""Integer identities for the replay module: requests, pages and keys numbered 1..N.

TLC 2.18 looks a function up in O(1) only when it is a sequence (a ``TupleValue``, or made
from one); otherwise ``FcnRcdValue.select`` compares the argument with each element of
its domain in turn. With string request and key names and ``<<request, i>>`` pages, every
``loc[p]``, ``req[r]`` and ``prefix[k]`` cost O(pages), O(requests) or O(keys) string or
tuple comparisons: 0.15 s per state on a 500-request trace. Numbered from 1, ``req``,
``loc`` and ``prefix`` can be sequences (``module.initial``, the spec's ``SetAt``).
So the generated module numbers requests (header order), pages (each request's pages
in turn) and keys (first-seen order) from 1, GPU blocks by their IDs and host blocks
after them (``host``), and its cfg
binds the spec's page accessors (``PageReq``, ``PageIdx``, ``PageAt``), ``Pages``,
``PagesOf``, ``KeyOf`` and the sentinels to integer versions (``bindings``). Every
sentinel stays outside the values it is compared with (0 or negative), so the spec's
comparisons keep their meaning; the renaming is a bijection on every constant set,
so a trace is a behaviour of the integer instance iff it is one of the named one.
"""

from __future__ import annotations

from collections.abc import Iterable

from hisparse.spec.trace import TraceHeader

# The spec's definitions the cfg rebinds, each to the module's ``Tr<name>``.
OVERRIDDEN = (
    "PageReq", "PageIdx", "PageAt", "Pages", "PagesOf", "KeyOf",
    "NoPage", "NoLoc", "NoKey", "Idle", "Empty", "Garbage", "NoSpill",
)

# Sentinels: never a request, page, key or block number (those are >= 0, keys >= 1).
NO_PAGE, NO_KEY, EMPTY, GARBAGE, IDLE, NO_BLOCK = 0, 0, -1, -2, -3, -1
# A page the header does not declare (the reader checks only some fields' pages): no
# value the spec builds, so a step reporting it matches no successor, as the named
# <<request, i>> did; never another request's page number.
UNKNOWN_PAGE = -4


def _tuple(items: Iterable[int]) -> str:
    return "<<" + ", ".join(str(i) for i in items) + ">>"


class Ids:
    """The numbering of one header's requests, pages and keys (all 1-based)."""

    def __init__(self, header: TraceHeader) -> None:
        self.gpu_blocks = header.gpu_blocks
        self.requests = {r: n for n, r in enumerate(header.requests, start=1)}
        self.keys = {k: n for n, k in enumerate(header.key_names(), start=1)}
        self.base: dict[str, int] = {}
        self.length: dict[str, int] = {}
        self.page_keys: list[list[int]] = []
        total = 0
        for r, ks in header.requests.items():
            self.base[r] = total
            self.length[r] = len(ks)
            total += len(ks)
            self.page_keys.append([self.keys[k] for k in ks])
        self.pages = total

    def host(self, h: int) -> int:
        """Host block ``h`` as ``gpu_blocks + h``: GPU and host block numbers never meet,
        as the named blocks did, so a host block can never pass for a GPU location (the
        JSON trace's block IDs carry no kind; the spec's values do)."""
        return self.gpu_blocks + h

    def request(self, r: str) -> int:
        return self.requests[r]

    def page(self, r: str, i: int) -> int:
        if not 1 <= i <= self.length.get(r, 0):
            return UNKNOWN_PAGE
        return self.base[r] + i

    def key(self, k: str) -> int:
        return self.keys[k]

    def data(self, d: str) -> str:
        """A block's bytes: a key's number, or the spec's ``Empty``/``Garbage``."""
        if d == "empty":
            return "Empty"
        if d == "garbage":
            return "Garbage"
        return str(self.keys[d])

    def definitions(self) -> list[tuple[str, str]]:
        """The module's ``Tr<name>`` for each of ``OVERRIDDEN`` (and its tables)."""
        owner = [n for n, ks in enumerate(self.page_keys, start=1) for _ in ks]
        bases = [self.base[r] for r in self.requests]
        flat = [k for ks in self.page_keys for k in ks]
        return [
            ("TrBase", _tuple(bases) if bases else "<<>>"),
            ("TrOwner", _tuple(owner) if owner else "<<>>"),
            ("TrKeyTab", _tuple(flat) if flat else "<<>>"),
            ("TrPageReq(p)", "TrOwner[p]"),
            ("TrPageIdx(p)", "p - TrBase[TrOwner[p]]"),
            ("TrPageAt(r, i)", "TrBase[r] + i"),
            ("TrPages", f"1..{self.pages}"),
            ("TrPagesOf(r)", "(TrBase[r] + 1)..(TrBase[r] + Len(PageKeys[r]))"),
            ("TrKeyOf(p)", "TrKeyTab[p]"),
            ("TrNoPage", str(NO_PAGE)),
            ("TrNoLoc", f'<<"nowhere", {NO_BLOCK}>>'),
            ("TrNoKey", str(NO_KEY)),
            ("TrIdle", str(IDLE)),
            ("TrEmpty", str(EMPTY)),
            ("TrGarbage", str(GARBAGE)),
            (
                "TrNoSpill",
                f'[src |-> {NO_BLOCK}, page |-> {NO_PAGE}, phase |-> "none", '
                "enq |-> {}, need |-> {}]",
            ),
        ]


def bindings() -> list[tuple[str, str]]:
    """The cfg's ``<name> <- Tr<name>`` for each overridden definition."""
    return [(name, f"Tr{name}") for name in OVERRIDDEN]
