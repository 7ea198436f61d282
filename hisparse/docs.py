"""Generated documentation: files under ``docs/`` that are derived from the code.

They are committed so they can be read on GitHub; ``hisparse docs`` regenerates them and
``hisparse docs --check`` (and a test) fails when a committed copy is stale.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from hisparse.spec.lifecycle import mermaid_document
from hisparse.spec.trace import trace_json_schema
from hisparse.tlc.paths import checkout_root, repo_root

__all__ = ["GENERATED", "checkout_root", "repo_root", "stale", "write"]


def _schema() -> str:
    return json.dumps(trace_json_schema(), indent=2) + "\n"


def _lifecycles() -> str:
    text = mermaid_document()
    return text if text.endswith("\n") else text + "\n"


# Path under the repository root -> its generated content.
GENERATED: dict[str, Callable[[], str]] = {
    "docs/trace.schema.json": _schema,
    "docs/lifecycles.md": _lifecycles,
}


def stale(root: Path | None = None) -> list[str]:
    """Generated files that are missing or differ from what the code generates now."""
    root = root or repo_root()
    out = []
    for rel, make in GENERATED.items():
        path = root / rel
        if not path.is_file() or path.read_text(encoding="utf-8") != make():
            out.append(rel)
    return out


def write(root: Path | None = None) -> list[str]:
    """(Re)write every generated file; returns the ones that changed."""
    root = root or repo_root()
    changed = stale(root)
    for rel in changed:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(GENERATED[rel](), encoding="utf-8")
    return changed
