"""Workloads for ``hisparse simulate``: who arrives when, with which pages, for how long.

A workload is a list of ``Arrival`` sorted by step, built before the run, so the run's
figures depend only on the workload and the seed. Two sources:

- ``synthetic``: requests sharing a few prefixes, arriving at a fixed mean rate (not
  spread over ``--steps``, so a longer run does not thin the load out);
- ``mooncake``: the Mooncake FAST'25 conversation trace (JSON Lines: ``timestamp`` ms,
  ``input_length``, ``output_length``, ``hash_ids`` one per 512-token block). Real
  arrivals, lengths and prefix sharing; equal hash ids give equal page keys, which is
  what the coordinator's prefix lookup matches on.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path

from hisparse.jsonlines import read_json_lines
from hisparse.spec.state import Key, RequestId

MOONCAKE_BLOCK_TOKENS = 512  # tokens per hash id in the Mooncake traces
STEP_MS = 30.0  # trace time one decode step stands for, before compression
WORKLOADS = ("synthetic", "mooncake")
MAX_FIELD = 2**53  # a trace's numbers must be exact as floats (times are divided)


class WorkloadError(ValueError):
    """A workload file that cannot be replayed (missing, malformed, or wrong shape)."""


@dataclass(frozen=True)
class Arrival:
    """One request: when it arrives, its pages' prefix identities, its decode steps."""

    step: int
    request_id: RequestId
    page_keys: tuple[Key, ...]
    decode_steps: int

    def __post_init__(self) -> None:
        # refused where it is made, before a run: no coordinator declares a request with no
        # page, and a prefiller cannot hold its prefill KV (an empty prompt holds no page)
        if not self.page_keys:
            raise WorkloadError(f"request {self.request_id!r} has no page: an empty prompt "
                                "holds no KV page")


@dataclass(frozen=True)
class SyntheticShape:
    """Knobs of the synthetic generator (pages per request, shared prefixes, rate)."""

    requests: int
    arrival_rate: float  # mean requests per step
    min_pages: int
    max_pages: int
    prefixes: int
    prefix_pages: int
    min_decode: int = 5
    max_decode: int = 40


def synthetic(shape: SyntheticShape, seed: int) -> list[Arrival]:
    """Requests with exponential inter-arrival gaps; some share one of a few prefixes."""
    rng = random.Random(f"workload-{seed}")
    out: list[Arrival] = []
    t = 0.0
    for i in range(shape.requests):
        t += rng.expovariate(shape.arrival_rate)
        pages = rng.randint(shape.min_pages, shape.max_pages)
        shared = rng.randrange(shape.prefixes + 1)  # == prefixes: no shared prefix
        r = f"req{i}"
        keys = tuple(
            f"pre{shared}:{j}" if shared < shape.prefixes and j < shape.prefix_pages else f"{r}:{j}"
            for j in range(pages)
        )
        out.append(Arrival(int(t), r, keys, rng.randint(shape.min_decode, shape.max_decode)))
    return out


@dataclass(frozen=True)
class MooncakeShape:
    """How a trace is replayed: request cap, time compression, page size, decode cap."""

    requests: int  # the first N requests of the trace
    time_compression: float  # trace time runs this many times faster
    block_tokens: int  # must divide 512
    max_decode: int | None = None  # cap on output tokens per request (None: as traced)


def _field(doc: object, name: str, where: str) -> int:
    if not isinstance(doc, dict) or name not in doc:
        raise WorkloadError(f"{where}: missing field {name!r}")
    value = doc[name]
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_FIELD:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:40] + "..."
        raise WorkloadError(
            f"{where}: {name} must be a non-negative integer of at most 2^53, got {shown}"
        )
    return value


def mooncake(path: Path, shape: MooncakeShape) -> list[Arrival]:
    """The first ``shape.requests`` requests of a Mooncake trace as arrivals.

    Page ``j`` of a prompt lies in 512-token block ``j * block_tokens // 512``; its key is
    that block's hash id and the page's place in it, so two prompts share a page exactly
    when they share the hash id of the block holding it.
    """
    if MOONCAKE_BLOCK_TOKENS % shape.block_tokens:
        raise WorkloadError(
            f"block_tokens={shape.block_tokens} does not divide the trace's "
            f"{MOONCAKE_BLOCK_TOKENS}-token hash blocks: use 16, 32, 64, 128, 256 or 512"
        )
    per_hash = MOONCAKE_BLOCK_TOKENS // shape.block_tokens
    ms_per_step = STEP_MS * shape.time_compression
    out: list[Arrival] = []
    last_step, lines = 0, read_json_lines(path, WorkloadError)
    for n, doc in lines:
        where = f"{path}:{n}"
        ts, tokens = _field(doc, "timestamp", where), _field(doc, "input_length", where)
        decode = _field(doc, "output_length", where)
        hashes = doc.get("hash_ids")
        if not isinstance(hashes, list) or not all(
            isinstance(h, int) and not isinstance(h, bool) for h in hashes
        ):
            raise WorkloadError(f"{where}: hash_ids must be a list of integers")
        pages = math.ceil(tokens / shape.block_tokens)
        if pages == 0:
            continue  # an empty prompt holds no KV page
        if len(hashes) * per_hash < pages:
            raise WorkloadError(
                f"{where}: {len(hashes)} hash ids cover {len(hashes) * MOONCAKE_BLOCK_TOKENS}"
                f" tokens, fewer than input_length {tokens}"
            )
        keys = tuple(f"m{hashes[j // per_hash]}:{j % per_hash}" for j in range(pages))
        if shape.max_decode is not None:
            decode = min(decode, shape.max_decode)
        step = int(ts / ms_per_step)
        if step < last_step:
            raise WorkloadError(f"{where}: timestamps are not in arrival order")
        last_step = step
        out.append(Arrival(step, f"mc{len(out)}", keys, max(1, decode)))
        if len(out) >= shape.requests:
            break  # (the lines after it are never read)
    if not out:
        raise WorkloadError(f"{path}: no request in the trace")
    return out
