"""Rules that survivors of the whole mutation run (docs/mutation-run7, eleventh pass) showed
in the sizing plan."""

from __future__ import annotations

import json

from hisparse.config import GIB
from hisparse.models import MODELS
from hisparse.sizing.plan import plan, plan_lines


def test_a_context_the_reserve_leaves_no_room_for_shows_a_zero_ratio_not_a_missing_one() -> None:
    # the admission reserve is the longest context's pages: with 3 GiB and a 100k-token
    # context beside it, HiSparse holds no 8k request although the unoffloaded GPU holds 8.
    # That ratio is 0.00x, a figure, not "-" (which means the GPU holds none either);
    # sizing/plan.py:157:none:1 took a ratio of 0.0 for a missing one
    g = MODELS["deepseek-v3.2"]
    p = plan(g, gpu_kv_gib=3, host_gib=400, contexts=(8192, 100_000), machine_ram=1024 * GIB)
    short, long = p.rows
    assert (short.disabled_max, short.hisparse_max, short.ratio) == (8, 0, 0.0)
    assert (long.disabled_max, long.hisparse_max, long.ratio) == (0, 0, None)
    assert [r["ratio"] for r in json.loads(json.dumps(p.to_json()))["rows"]] == [0.0, None]
    table = plan_lines(p, g)
    line = next(x for x in table if x.startswith(f"{8192:>8,} |"))
    assert f"| {'0.00x':>6} |" in line
    line = next(x for x in table if x.startswith(f"{100_000:>8,} |"))
    assert f"| {'-':>6} |" in line
