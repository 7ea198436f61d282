"""Rule: when a request ends, the indexer offload forgets it in its connector too, so the
connector's per-request state stays O(live) (``hisparse/engine/offload.py``).

From the guard survivor ``128:call:4`` of the second guard-phase run
(docs/mutation-survivors.md): ``finished`` dropped only its own hashes and not the
``OffloadingScheduler``'s, which then kept answering matched tokens for a request that
had ended (and kept its hashes forever); ``tests/test_engine.py`` checked only
``IndexerOffload.hashes``.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import numpy as np

from hisparse.connectors.base import KVLayout
from hisparse.connectors.offloading import OffloadingScheduler, OffloadingWorker
from hisparse.engine.offload import IndexerOffload


def test_a_finished_request_is_forgotten_by_the_connector() -> None:
    layout = KVLayout(block_tokens=4)
    gpu = np.arange(4 * 8, dtype=np.uint8).reshape(4, 8)
    offload = OffloadingScheduler(layout, 8, 4)
    worker = OffloadingWorker(layout, gpu, 4)
    hs: Any = SimpleNamespace(on_spill=None)  # only its hook is touched here
    ix = IndexerOffload(hs, offload, worker, max_pages=2)
    req: Any = SimpleNamespace(request_id="a", page_keys=("k0", "k1"))
    ix.add(cast(Any, req))
    offload.save("a", [(ix.hashes["a"][0], 0), (ix.hashes["a"][1], 1)])
    ix.flush()
    ix.deliver()
    assert offload.get_num_new_matched_tokens("a", 0) == 8  # stored, and "a" is live
    ix.finished("a")
    assert "a" not in ix.hashes
    assert offload.get_num_new_matched_tokens("a", 0) == 0  # forgotten by the connector
    assert offload.stores_in_flight("a") == 0
