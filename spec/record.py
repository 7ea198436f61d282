"""Turn a recording ProtocolMachine into a public trace (spec/trace.py).

Requests are declared as a run goes on, but the spec's constants are fixed up
front. The machine records only what each step changed (``spec.observe.Observer``),
and a request's initial values (``new``, no block, no prefix entry) are the spec's
Init values, so a request declared later needs nothing here. A retired request has
left the state but stays in the header, and reads the same way (the spec's retired
ID is ``new`` again).
"""

from __future__ import annotations

from hisparse.spec.machine import ProtocolMachine
from hisparse.spec.trace import FORMAT, Trace, TraceHeader, TraceStep


def machine_trace(m: ProtocolMachine) -> Trace:
    """The trace of everything ``m`` did since it was created with ``record=True``."""
    if m.steps is None or m.declared is None:
        raise ValueError("the machine was not created with record=True")
    declared = m.declared
    cfg = m.state.config
    header = TraceHeader(
        kind="header",
        format=FORMAT,
        requests={r: list(ks) for r, ks in declared.items()},
        gpu_blocks=cfg.gpu_blocks,
        host_blocks=cfg.host_blocks,
        host_pool_bytes=cfg.host_pool_bytes,
        host_block_bytes=cfg.host_block_bytes,
        ranks=cfg.ranks,
        backing=cfg.backing,
        writer=cfg.writer,
        bug=cfg.bug,
        imports=sorted(m.declared_imports or ()),
        chunks=cfg.chunks,
        staging_slots=cfg.staging_slots,
    )
    steps = tuple(
        TraceStep.model_validate(
            {"kind": "step", "index": i, "action": a, "args": args, "post": post}
        )
        for i, (a, args, post) in enumerate(m.steps, start=1)
    )
    return Trace(header=header, steps=steps)
