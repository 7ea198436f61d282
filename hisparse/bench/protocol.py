"""Per-action cost of the protocol machine (``hisparse bench protocol``).

Runs whole spill lifecycles (Arrive → StartSpill → WorkerEnqueue →
WorkerComplete → WorkerReport → ConsumeMeta → Finish → EvictHost) with
invariant checking off (production) and on (tests), and compares one
``transitions`` trigger with one lookup in the compiled table.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

from hisparse.spec.constants import ProtocolConfig
from hisparse.spec.lifecycle import HOST_PAGE
from hisparse.spec.machine import ProtocolMachine

ACTIONS = (
    "Arrive", "StartSpill", "WorkerEnqueue", "WorkerComplete",
    "WorkerReport", "ConsumeMeta", "Finish", "EvictHost",
)


def _lifecycles(n: int, check: bool, requests: int) -> dict[str, float]:
    """Mean µs per action over ``n`` lifecycles with ``requests`` others resident."""
    cfg = ProtocolConfig(gpu_blocks=requests + 1, host_pool_bytes=4, host_block_bytes=2)
    m = ProtocolMachine.create(cfg, check=check)
    for i in range(requests):  # background load the invariants must scan
        m.add_request(f"bg{i}", [f"bgk{i}"])
        m.Arrive(f"bg{i}")
    spent = dict.fromkeys(ACTIONS, 0.0)
    clock = time.perf_counter
    for i in range(n):
        r = f"r{i}"
        m.add_request(r, [f"k{i}"])
        steps: list[tuple[str, Callable[[], Any]]] = [
            ("Arrive", partial(m.Arrive, r)),
            ("StartSpill", partial(m.StartSpill, (r, 1), 0)),
            ("WorkerEnqueue", lambda: m.WorkerEnqueue(next(iter(m.state.down[0])))),
            ("WorkerComplete", lambda: m.WorkerComplete(0)),
            ("WorkerReport", m.WorkerReport),
            ("ConsumeMeta", m.ConsumeMeta),
            ("Finish", partial(m.Finish, r)),
            ("EvictHost", lambda: m.EvictHost(0)),
        ]
        for name, call in steps:
            t0 = clock()
            call()
            spent[name] += clock() - t0
    s = m.state
    if n and (s.req.get(f"r{n - 1}") != "finished" or s.host_state[0] != "free"
              or any(s.req[f"bg{i}"] != "running" for i in range(requests))):
        # every lifecycle ends finished with its host block evicted, beside the running
        # background: else what was timed is not what the figures say
        raise RuntimeError("the protocol bench's lifecycles did not run to their end")
    return {k: v / n * 1e6 for k, v in spent.items()}


def _trigger_costs(n: int) -> dict[str, float]:
    class Page:
        pass

    page = Page()
    HOST_PAGE.machine(page)
    clock = time.perf_counter
    t0 = clock()
    for _ in range(n):
        page.lease()  # type: ignore[attr-defined]
        page.publish()  # type: ignore[attr-defined]
        page.evict()  # type: ignore[attr-defined]
    lib = (clock() - t0) / (3 * n) * 1e6
    state = "free"
    t0 = clock()
    for _ in range(n):
        state = HOST_PAGE.next(state, "lease")
        state = HOST_PAGE.next(state, "publish")
        state = HOST_PAGE.next(state, "evict")
    table = (clock() - t0) / (3 * n) * 1e6
    return {"transitions_trigger_us": lib, "compiled_table_us": table}


def run(lifecycles: int = 2000, background: int = 0) -> dict[str, Any]:
    """The benchmark's figures (µs)."""
    off = _lifecycles(lifecycles, check=False, requests=background)
    on = _lifecycles(lifecycles, check=True, requests=background)
    return {
        "lifecycles": lifecycles,
        "background_requests": background,
        "per_action_us_check_off": off,
        "per_action_us_check_on": on,
        "lifecycle_us_check_off": sum(off.values()),
        "lifecycle_us_check_on": sum(on.values()),
        **_trigger_costs(20000),
    }
