"""JSON Lines from outside (a workload file), read a line at a time within bounds.

``json.loads`` recurses in C on nesting (RecursionError) and converts long integers
in quadratic time (ValueError past 4300 digits); pydantic-core's parser bounds both
(200 levels, 4300 digits) and fails with a message. Every failure here names its line.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import pydantic_core

# The longest line read; a longer one is refused before it is parsed.
MAX_LINE_BYTES: Final = 16 << 20


def read_json_lines(
    path: Path, error: Callable[[str], Exception], *, max_line_bytes: int = MAX_LINE_BYTES
) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` for each non-blank line; a defect raises ``error(message)``
    with the message naming ``path:line``. Reads lazily: a caller may stop early."""
    try:
        fh = path.open("rb")
    except OSError as exc:
        raise error(f"cannot read {path}: {exc.strerror}") from exc
    with fh:
        number = 0
        while True:
            number += 1
            try:
                raw = fh.readline(max_line_bytes + 1)
            except OSError as exc:
                raise error(f"{path}:{number}: cannot read: {exc.strerror}") from exc
            if not raw:
                return
            if len(raw) > max_line_bytes:
                raise error(f"{path}:{number}: line longer than {max_line_bytes} bytes")
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise error(f"{path}:{number}: not UTF-8 ({exc.reason})") from exc
            if not text.strip():
                continue
            try:
                value = pydantic_core.from_json(text, allow_inf_nan=False)
            except ValueError as exc:
                raise error(f"{path}:{number}: not JSON ({exc})") from exc
            yield number, value
