"""Write a long machine trace for the trace-validation scale figures (README).

A seeded random walk of enabled actions (``tests.protocol_helpers.random_walk``, every
action equally likely, retired requests declared again) on a recording
``ProtocolMachine``, until ``--steps`` actions are recorded. Run from the repository
root, then time ``hisparse check --trace`` on the file:

    python tools/trace_scale.py --steps 10000 --out /tmp/t10k.jsonl
    /usr/bin/time -v hisparse check --trace /tmp/t10k.jsonl
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hisparse.spec.record import machine_trace
from hisparse.spec.trace import write_trace
from tests.protocol_helpers import make_machine, random_walk


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=10_000, help="actions to record")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gpu-blocks", type=int, default=6)
    p.add_argument("--host-blocks", type=int, default=6, help="host pool, in blocks")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args()
    m = make_machine(gpu_blocks=a.gpu_blocks, host_pool_bytes=2 * a.host_blocks, record=True)
    assert m.steps is not None
    chunk = 0
    while len(m.steps) < a.steps:  # add_request moves are taken but not recorded
        random_walk(m, a.steps - len(m.steps), a.seed + chunk)
        chunk += 1
    trace = machine_trace(m)
    write_trace(a.out, trace.model_copy(update={"steps": trace.steps[: a.steps]}))
    size = a.out.stat().st_size
    print(f"{a.out}: {a.steps} steps, {size:,} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
