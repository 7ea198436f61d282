"""Rule: the indexer offload counts each admission's plan exactly: an admission, a host
hit when there was one, a suffix restore when it restores, a fallback when the host hit
was cut back, and as fallback pages exactly the pages of host hit not admitted
(``hisparse/engine/offload.py`` ``admitted``).

From the sampled whole-suite run's survivor ``108:arith:6`` (``host_hit - admit_mla`` →
``+``): the only test of the count (a GPU-free engine test) had a fallback with no MLA
pages admitted, where the two agree; and ``105:int:1`` (a hit of one page not counted).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np

from hisparse.connectors.base import KVLayout
from hisparse.connectors.offloading import OffloadingScheduler, OffloadingWorker
from hisparse.engine.offload import IndexerOffload
from hisparse.spec.suffix import SuffixPlan


def test_each_plan_is_counted_and_fallback_pages_are_the_hit_not_admitted() -> None:
    layout = KVLayout(block_tokens=4)
    gpu = np.zeros((4, 8), np.uint8)
    hs: Any = SimpleNamespace(on_spill=None)
    ix = IndexerOffload(hs, OffloadingScheduler(layout, 8, 4), OffloadingWorker(layout, gpu, 4),
                        max_pages=2)
    req: Any = SimpleNamespace(request_id="a", page_keys=("k0", "k1"))
    plans = [
        SuffixPlan(host_hit=3, gpu_hit=3, admit_mla=3, admit_indexer=3, restore=()),  # whole
        SuffixPlan(host_hit=5, gpu_hit=2, admit_mla=2, admit_indexer=2, restore=()),  # cut
        SuffixPlan(host_hit=0, gpu_hit=0, admit_mla=0, admit_indexer=0, restore=()),  # miss
        SuffixPlan(host_hit=1, gpu_hit=1, admit_mla=1, admit_indexer=1, restore=()),  # one
    ]
    for plan in plans:
        assert ix.admitted(req, 0, plan) == 0  # nothing to restore: prefill from 0
    c = ix.counts
    assert (c.admissions, c.host_hits, c.suffix_restores, c.fallbacks, c.fallback_pages) \
        == (4, 3, 0, 1, 3)
