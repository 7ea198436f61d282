"""``hisparse plan``: the sizing answer from geometry and budgets alone, instantly.

Per context length: how many requests a GPU KV budget holds at steady state with
HiSparse disabled (every page of every layer resident, plus the indexer keys) and
enabled (per request: its hot rows and LRU state in every indexer-owning layer, two tail
pages, and the indexer keys, which HiSparse leaves on the GPU; once for the pool: room
to admit one longest request, since an admission lands every page on the GPU before
spills move it), the host pool that many requests need, and how many the given host
pool holds. It refuses, as an engine's startup check would, a host pool above 95% of
the machine's RAM and one that cannot hold a single longest request.

Decode growth is not counted (a request is its prompt); a real step also needs
activations and weights outside the KV budget.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any

from pydantic import ValidationError

from hisparse.config import GIB, HiSparseConfig, refusal_line
from hisparse.models import ModelGeometry

TAIL_PAGES = 2  # resident pages a running request keeps (the engine bench's steady state)
HOST_RAM_FRACTION = 0.95  # the most of the machine's RAM a host pool may take
LRU_BYTES_PER_HOT_ROW = 16  # an int64 tag and an int64 stamp per hot row per leader


class PlanRefused(ValueError):
    """Budgets an engine would refuse at startup (the message says what to change)."""


def machine_ram_bytes() -> int:
    """This machine's physical memory."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


@dataclass(frozen=True)
class PlanRow:
    """One context length's answer (bytes per request, requests per budget)."""

    context: int  # tokens
    pages: int
    disabled_bytes: int  # GPU bytes per request, HiSparse disabled
    disabled_max: int  # requests the GPU budget holds, HiSparse disabled
    hisparse_bytes: int  # GPU bytes per request, HiSparse enabled
    hisparse_max: int  # requests the GPU budget holds, HiSparse enabled
    host_bytes: int  # host bytes per request (its whole context)
    host_needed: int  # host bytes that ``hisparse_max`` requests need
    host_holds: int  # requests of this context the given host pool holds
    running: int  # min(hisparse_max, host_holds): what this host pool lets run

    @property
    def ratio(self) -> float | None:
        """``hisparse_max / disabled_max``, or None where the GPU holds no request of this
        context with HiSparse off: it holds none with it on either (the admission
        reserve is at least this context's pages), so there is no ratio to give, and
        strict JSON has no Infinity."""
        return self.hisparse_max / self.disabled_max if self.disabled_max else None


@dataclass(frozen=True)
class Plan:
    """Everything ``hisparse plan`` prints."""

    model: str
    gpu_kv_gib: float
    host_gib: float
    host_blocks: int
    block_bytes: int
    hot_rows: int
    hot_bytes: int  # per request, every layer
    lru_bytes: int  # per request, every indexer-owning layer
    admission_reserve: int  # bytes: one longest request's pages
    longest: int  # tokens
    min_host_blocks: int  # the longest request's pages
    machine_ram: int
    rows: tuple[PlanRow, ...]

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        for row, src in zip(doc["rows"], self.rows, strict=True):
            row["ratio"] = src.ratio
        return doc


def pages_of(tokens: int, block_tokens: int) -> int:
    return -(-tokens // block_tokens)


def plan(
    geometry: ModelGeometry,
    *,
    gpu_kv_gib: float,
    host_gib: float,
    contexts: tuple[int, ...],
    hot_rows: int | None = None,
    machine_ram: int | None = None,
) -> Plan:
    """The plan, or ``PlanRefused`` for budgets an engine would refuse at startup."""
    if not contexts or min(contexts) < 1:
        raise PlanRefused("give at least one context length of 1 token or more")
    ram = machine_ram_bytes() if machine_ram is None else machine_ram
    host_bytes_total = int(host_gib * GIB)
    if host_bytes_total > HOST_RAM_FRACTION * ram:
        raise PlanRefused(
            f"host pool {host_gib:g} GiB is above {HOST_RAM_FRACTION:.0%} of this machine's "
            f"{ram / GIB:.1f} GiB of RAM: lower --host-gib to at most "
            f"{HOST_RAM_FRACTION * ram / GIB:.1f} (or give --machine-ram-gib for another machine)"
        )
    try:
        config = HiSparseConfig(  # the one place block counts come from
            host_pool_gib=host_gib, gpu_kv_gib=gpu_kv_gib, block_tokens=geometry.block_tokens,
            row_bytes=geometry.row_bytes, top_k=geometry.top_k, layers=geometry.layers,
            index_leaders=geometry.index_leaders, hot_rows=hot_rows,
        )
    except ValidationError as exc:  # the engine's own startup refusal, in its words
        raise PlanRefused(refusal_line(exc)) from None
    longest = max(contexts)
    need = pages_of(longest, geometry.block_tokens)
    if config.host_blocks < need:
        raise PlanRefused(
            f"host pool {host_gib:g} GiB ({config.host_blocks:,} blocks) cannot hold one "
            f"longest request ({longest:,} tokens = {need:,} blocks of "
            f"{geometry.block_bytes / 2**20:.2f} MiB): raise --host-gib to at least "
            f"{need * geometry.block_bytes / GIB:.2f}"
        )
    gpu = int(gpu_kv_gib * GIB)
    reserve = need * geometry.block_bytes
    lru = LRU_BYTES_PER_HOT_ROW * config.hot * geometry.indexers
    rows = []
    for c in contexts:
        pages = pages_of(c, geometry.block_tokens)
        index_keys = c * geometry.indexer_bytes_per_token
        off = pages * geometry.block_bytes + index_keys
        on = config.hot_bytes + lru + TAIL_PAGES * geometry.block_bytes + index_keys
        on_max = max(0, (gpu - reserve) // on)
        host_req = pages * geometry.block_bytes
        holds = config.host_blocks // pages
        rows.append(PlanRow(
            context=c, pages=pages, disabled_bytes=off, disabled_max=gpu // off,
            hisparse_bytes=on, hisparse_max=on_max, host_bytes=host_req,
            host_needed=on_max * host_req, host_holds=holds, running=min(on_max, holds),
        ))
    return Plan(
        model=geometry.name, gpu_kv_gib=gpu_kv_gib, host_gib=host_gib,
        host_blocks=config.host_blocks, block_bytes=geometry.block_bytes, hot_rows=config.hot,
        hot_bytes=config.hot_bytes, lru_bytes=lru, admission_reserve=reserve,
        longest=longest, min_host_blocks=need, machine_ram=ram, rows=tuple(rows),
    )


def _ratio(r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}x"


def _mib(n: float) -> str:
    return f"{n / 2**20:,.1f}"


def _gib(n: float) -> str:
    return f"{n / GIB:,.1f}"


def plan_lines(p: Plan, geometry: ModelGeometry) -> list[str]:
    """The plan as text: the sizes, then one table row per context."""
    g = geometry
    out = [
        f"model        {g.name}: {g.layers} layers ({g.indexers} own an indexer), "
        f"{g.row_bytes} B rows, top-K {g.top_k}, {g.block_tokens}-token blocks of "
        f"{_mib(g.block_bytes)} MiB; {g.kv_bytes_per_token / 1024:,.1f} KiB/token sparse "
        f"MLA + {g.indexer_bytes_per_token / 1024:,.1f} KiB/token indexer keys",
        f"budgets      GPU KV {p.gpu_kv_gib:g} GiB; host pool {p.host_gib:g} GiB = "
        f"{p.host_blocks:,} blocks (machine RAM {_gib(p.machine_ram)} GiB)",
        f"per request  HiSparse keeps {p.hot_rows:,} hot rows ({_mib(p.hot_bytes)} MiB over "
        f"every layer), LRU state ({_mib(p.lru_bytes)} MiB), {TAIL_PAGES} tail pages and "
        "its indexer keys on the GPU; the pool keeps room to admit one longest request "
        f"({_gib(p.admission_reserve)} GiB)",
        "",
        f"{'context':>8} | {'off MiB/req':>11} | {'off max':>7} | {'on MiB/req':>10} | "
        f"{'on max':>6} | {'ratio':>6} | {'host GiB for on max':>19} | "
        f"{'host pool holds':>15} | {'running':>7}",
    ]
    for r in p.rows:
        out.append(
            f"{r.context:>8,} | {_mib(r.disabled_bytes):>11} | {r.disabled_max:>7,} | "
            f"{_mib(r.hisparse_bytes):>10} | {r.hisparse_max:>6,} | {_ratio(r.ratio):>6} | "
            f"{_gib(r.host_needed):>19} | {r.host_holds:>15,} | {r.running:>7,}"
        )
    out += [
        "",
        f"minimum host pool for the longest context ({p.longest:,} tokens): "
        f"{p.min_host_blocks:,} blocks ({_gib(p.min_host_blocks * p.block_bytes)} GiB)",
        "off: HiSparse disabled (every page resident); on: HiSparse; running: what the "
        "given host pool lets run at once (min of on max and host pool holds)",
    ]
    return out
