"""Turn a recording ProtocolMachine into a public trace (spec/trace.py).

Requests are declared as a run goes on, but the spec's constants are fixed up
front: posts recorded before a request was declared are completed here with its
initial values (``new``, no block, an empty prefix entry). A retired request has
left the state but stays in the header, and reads the same way (the spec's retired
ID is ``new`` again).
"""

from __future__ import annotations

from typing import Any

from hisparse.spec.machine import ProtocolMachine
from hisparse.spec.trace import Trace, TraceHeader, TraceStep


def _complete(
    post: dict[str, Any], declared: dict[str, tuple[str, ...]]
) -> dict[str, Any]:
    out = dict(post)
    if "req" in out:
        out["req"] = {r: out["req"].get(r, "new") for r in declared}
    if "loc" in out:
        known = {(p[0], p[1]) for p, _ in out["loc"]}
        out["loc"] = out["loc"] + [
            [[r, i], None]
            for r, ks in declared.items()
            for i in range(1, len(ks) + 1)
            if (r, i) not in known
        ]
    if "prefix" in out:
        keys = {k for ks in declared.values() for k in ks}
        out["prefix"] = {k: out["prefix"].get(k, []) for k in sorted(keys)}
    return out


def machine_trace(m: ProtocolMachine) -> Trace:
    """The trace of everything ``m`` did since it was created with ``record=True``."""
    if m.steps is None or m.declared is None:
        raise ValueError("the machine was not created with record=True")
    declared = m.declared
    cfg = m.state.config
    header = TraceHeader(
        kind="header",
        format="hisparse-trace/1",
        requests={r: list(ks) for r, ks in declared.items()},
        gpu_blocks=cfg.gpu_blocks,
        host_blocks=cfg.host_blocks,
        host_pool_bytes=cfg.host_pool_bytes,
        host_block_bytes=cfg.host_block_bytes,
        bug=cfg.bug,
    )
    steps = tuple(
        TraceStep.model_validate(
            {
                "kind": "step",
                "index": i,
                "action": a,
                "args": args,
                "post": _complete(post, declared),
            }
        )
        for i, (a, args, post) in enumerate(m.steps, start=1)
    )
    return Trace(header=header, steps=steps)
