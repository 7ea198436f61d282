"""Requests for the engine: prompts, page identities, output lengths, aborts.

Lengths and prefix sharing come from the Mooncake conversation trace (one hash id per
512-token prompt block; equal ids mean equal content) or from a fixed synthetic shape.
A prompt block's tokens are drawn from its hash id, so requests that share a prefix
share its tokens, and a page's prefix identity (its key) is the chain of hash ids up to
its block: two pages have one key only when everything before them is equal too.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from hisparse.engine.config import EngineConfigError, EngineShape
from hisparse.jsonlines import read_json_lines

TRACE_BLOCK_TOKENS = 512
"""Prompt tokens per hash id in the Mooncake trace."""

MOONCAKE_TRACE = Path(
    os.environ.get(
        "HISPARSE_MOONCAKE",
        Path(__file__).resolve().parents[3] / "shared/workloads/mooncake/conversation_trace.jsonl",
    )
)
"""The trace beside a checkout (``../shared/workloads/mooncake``); ``HISPARSE_MOONCAKE``
points elsewhere (e.g. a copy carried to a GPU machine)."""


@dataclass(frozen=True, eq=False)
class EngineRequest:
    """One request: its prompt, the prefix identity of each page it may fill, and how
    it ends (``max_new`` tokens, or an abort ``abort_after`` decode steps in)."""

    request_id: str
    prompt: NDArray[np.int32]
    page_keys: tuple[str, ...]
    max_new: int
    arrival: int
    abort_after: int | None = None

    @property
    def prefill_len(self) -> int:
        """Positions prefill writes: all but the last prompt token, which the first
        decode step consumes."""
        return len(self.prompt) - 1


def pages_needed(prompt_len: int, max_new: int, shape: EngineShape) -> int:
    """Pages covering every position a request can write: the prompt, ``max_new``
    tokens and the drafts of its last verification step."""
    return -(-(prompt_len + max_new + shape.num_speculative_tokens) // shape.block_tokens)


def _own_block_id(request_id: str, block: int) -> int:
    """A block id no trace id equals (negative), stable across processes."""
    digest = hashlib.blake2b(f"{request_id}:{block}".encode(), digest_size=7).digest()
    return -1 - int.from_bytes(digest, "little")


def _block_tokens(hash_id: int, vocab: int) -> NDArray[np.int32]:
    return np.random.default_rng(abs(hash_id)).integers(0, vocab, TRACE_BLOCK_TOKENS, np.int32)


def make_request(
    request_id: str, hash_ids: Sequence[int], prompt_len: int, max_new: int, *,
    shape: EngineShape, vocab: int, arrival: int = 0, abort_after: int | None = None,
) -> EngineRequest:
    """A request whose prompt blocks come from ``hash_ids``; pages that lie inside the
    prefill and inside a whole shared block get chained keys, every other page a key of
    its own."""
    if prompt_len < 2:
        raise EngineConfigError(f"{request_id}: a prompt needs at least 2 tokens")
    if prompt_len + max_new + shape.num_speculative_tokens > shape.max_context:
        raise EngineConfigError(
            f"{request_id}: prompt {prompt_len} + {max_new} new tokens (+ drafts) exceed "
            f"max_context {shape.max_context}"
        )
    if TRACE_BLOCK_TOKENS % shape.block_tokens:
        raise EngineConfigError(
            f"block_tokens {shape.block_tokens} must divide {TRACE_BLOCK_TOKENS}"
        )
    blocks = -(-prompt_len // TRACE_BLOCK_TOKENS)
    ids = list(hash_ids[:blocks])
    ids += [_own_block_id(request_id, b) for b in range(len(ids), blocks)]
    prompt = np.concatenate([_block_tokens(h, vocab) for h in ids])[:prompt_len]
    chain, chains = hashlib.blake2b(digest_size=8), []
    for h in ids:
        chain.update(int(h).to_bytes(8, "little", signed=True))
        chains.append(chain.copy().hexdigest())
    bt = shape.block_tokens
    keys = []
    for j in range(pages_needed(prompt_len, max_new, shape)):
        b = j * bt // TRACE_BLOCK_TOKENS
        shared = (j + 1) * bt <= prompt_len - 1 and (b + 1) * TRACE_BLOCK_TOKENS <= prompt_len
        keys.append(f"h{chains[b]}:{j}" if shared and b < len(hash_ids) else f"{request_id}:{j}")
    return EngineRequest(request_id, prompt, tuple(keys), max_new, arrival, abort_after)


def mooncake_requests(
    shape: EngineShape, *, vocab: int, count: int, min_context: int = 8192,
    max_new: tuple[int, int] = (32, 160), long_context: int = 100_000, abort_every: int = 0,
    arrivals_per_step: int = 4, path: Path = MOONCAKE_TRACE,
) -> list[EngineRequest]:
    """``count`` trace requests with at least ``min_context`` prompt tokens, in trace
    order, with the trace's two longest prompts (if ``long_context`` or more) moved to
    the front so the longest contexts run from the start. Prompts are clipped to fit
    ``max_context``; output lengths are clipped to ``max_new``; every ``abort_every``-th
    request (0: none) aborts part-way."""
    # one pass in bounded memory: the first ``count`` eligible rows (at most two of them
    # can be among the longest) and the two longest, earliest first among equals
    first: list[tuple[int, dict[str, Any]]] = []
    top: list[tuple[int, int, dict[str, Any]]] = []  # (-input_length, index, row)
    for i, r in enumerate(r for r in _read_trace(path) if r["input_length"] >= min_context):
        if len(first) < count:
            first.append((i, r))
        if r["input_length"] >= long_context:
            top = sorted([*top, (-int(r["input_length"]), i, r)], key=lambda t: t[:2])[:2]
    longest = [r for _, _, r in top]
    taken = {i for _, i, _ in top}
    rest = [r for i, r in first if i not in taken]
    chosen = longest + rest[: max(0, count - len(longest))]
    out = []
    lo, hi = max_new
    for i, r in enumerate(chosen):
        new = int(min(max(r["output_length"], lo), hi))
        room = shape.max_context - new - shape.num_speculative_tokens - 1
        plen = min(int(r["input_length"]), room)
        abort = 3 + i % 17 if abort_every and i % abort_every == abort_every - 1 else None
        out.append(make_request(
            f"m{i}", r["hash_ids"], plen, new, shape=shape, vocab=vocab,
            arrival=i // arrivals_per_step, abort_after=abort,
        ))
    return out


def synthetic_requests(
    shape: EngineShape, *, vocab: int, count: int, context: int, max_new: int
) -> list[EngineRequest]:
    """``count`` requests of one prompt length, no shared content, all arriving at once."""
    return [
        make_request(f"s{i}", [], context, max_new, shape=shape, vocab=vocab)
        for i in range(count)
    ]


def _read_trace(path: Path) -> Iterator[dict[str, Any]]:
    """The trace's rows; a malformed line raises EngineConfigError naming its number."""
    if not path.is_file():
        raise EngineConfigError(f"the Mooncake trace is not at {path}")
    for n, row in read_json_lines(path, EngineConfigError):
        if not isinstance(row, dict):
            raise EngineConfigError(f"{path}:{n}: a row must be a JSON object")
        for name in ("input_length", "output_length"):
            value = row.get(name)
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 2**53:
                raise EngineConfigError(f"{path}:{n}: {name} must be an integer in 0..2^53")
        hashes = row.get("hash_ids")
        if not isinstance(hashes, list) or not all(
            isinstance(h, int) and not isinstance(h, bool) for h in hashes
        ):
            raise EngineConfigError(f"{path}:{n}: hash_ids must be a list of integers")
        yield row
