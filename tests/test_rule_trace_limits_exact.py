"""Rule: the reader's size limits are exact (``spec/trace.py`` ``_lines``): a file of
exactly ``max_bytes`` bytes and a line of exactly ``MAX_LINE_BYTES`` bytes (its newline
included) are read; one byte more is refused, by name.

``tests/test_trace_limits.py`` shows that files and lines far past the limits are
refused in bounded memory; a limit off by one (mutants ``cmp``: ``>`` -> ``>=`` on the
bytes read so far and on a line's length) refused a file that fits exactly.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hisparse.spec.trace import FORMAT, MAX_LINE_BYTES, TraceFormatError, read_trace

HEADER = json.dumps({
    "kind": "header", "format": FORMAT, "requests": {"r1": ["k1"]}, "gpu_blocks": 2,
    "host_blocks": 2, "host_pool_bytes": 5, "host_block_bytes": 2,
})
ARRIVE = json.dumps({
    "kind": "step", "index": 1, "action": "Arrive", "args": {"request": "r1"},
    "post": {"req": {"r1": "running"}, "loc": [[["r1", 1], ["gpu", 0]]],
             "gpuOwner": {"0": ["r1", 1]}, "gpuData": {"0": "k1"}},
})


def test_a_file_of_exactly_max_bytes_is_read(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(HEADER + "\n" + ARRIVE + "\n")
    size = path.stat().st_size
    assert len(read_trace(path, max_bytes=size).steps) == 1
    with pytest.raises(TraceFormatError, match=f"over the limit of {size - 1} bytes"):
        read_trace(path, max_bytes=size - 1)


def _padded_header(tmp_path: Path, line_bytes: int) -> Path:
    """A header line padded with JSON whitespace to ``line_bytes`` bytes, newline included."""
    path = tmp_path / f"h{line_bytes}.jsonl"
    pad = line_bytes - len(HEADER) - 1
    path.write_bytes(HEADER.encode() + b" " * pad + b"\n" + ARRIVE.encode() + b"\n")
    return path


def test_a_line_of_exactly_the_line_limit_is_read(tmp_path: Path) -> None:
    assert len(read_trace(_padded_header(tmp_path, MAX_LINE_BYTES)).steps) == 1
    with pytest.raises(TraceFormatError, match=f"longer than the limit of {MAX_LINE_BYTES}"):
        read_trace(_padded_header(tmp_path, MAX_LINE_BYTES + 1))
