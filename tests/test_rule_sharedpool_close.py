"""Rule: closing the shared host pool never unmaps memory that arrays still view
(``hisparse/sharedpool.py``, ``SharedHostPool.close``: "while arrays in this process
still view the allocation it stays mapped until they are gone").

The views were built with ``np.ndarray(shape, dtype, shm.buf, offset=...)``, which keeps
no buffer export on the mapping: ``SharedMemory.close()`` unmapped it, and the next read
of a surviving view (a pool left in a worker, a traceback's repr of one) died of SIGSEGV
(found by the mutant ``workerport.py:130:arith:0``, whose failure report read such a
view). Each case runs in a child process, so a crash fails this test instead of killing
the suite.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

POOL = """
from hisparse.config import HiSparseConfig
from hisparse.sharedpool import SharedHostPool
cfg = HiSparseConfig(host_pool_blocks=4, block_tokens=4, row_bytes=16, top_k=4, layers=1)
pool = SharedHostPool(cfg.pool_layout(4, 2), cfg.layers)
host, events = pool.host(0), pool.events
host[:] = 7
pool.close()
print(int(host.sum()), int(events.sum()))
"""

RUN = """
from hisparse.simulate import SimulateOptions, Simulation
sim = Simulation(SimulateOptions(requests=4, steps=30, tp=2, backing="shared"))
rep = sim.run()  # closes the shared pool at the end
host = sim.local(1).worker.handles[0].runtime.pools.host
print(rep.violations, rep.data_mismatches, int(host.sum()) >= 0)
"""


@pytest.mark.parametrize(("code", "want"), [
    (POOL, None),  # (the sum depends on the layout: checked below)
    (RUN, ["0", "0", "True"]),
], ids=["pool-views", "after-a-shared-run"])
def test_a_view_that_outlives_close_still_reads(code: str, want: list[str] | None) -> None:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, f"rc {proc.returncode}: {proc.stderr[-2000:]}"
    if want is None:
        from hisparse.config import HiSparseConfig

        cfg = HiSparseConfig(host_pool_blocks=4, block_tokens=4, row_bytes=16, top_k=4,
                             layers=1)
        layout = cfg.pool_layout(4, 2)
        want = [str(7 * layout.host_rows * layout.row_bytes), str(-layout.host_blocks)]
    assert proc.stdout.split() == want


def test_a_pool_that_cannot_be_mapped_is_refused_leaving_no_name(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # a refusal changes nothing: the allocation it created is unlinked again
    from pathlib import Path

    from hisparse import sharedpool
    from hisparse.config import HiSparseConfig
    from hisparse.executor.errors import ExecutorError

    def unmappable(shm: Any, size: int) -> None:
        names.append(shm.name)
        assert Path(f"/dev/shm/{shm.name.lstrip('/')}").exists()  # created: then refused
        raise OSError("no /dev/shm here")

    names: list[str] = []
    monkeypatch.setattr(sharedpool, "_view_mapping", unmappable)
    cfg = HiSparseConfig(host_pool_blocks=4, block_tokens=4, row_bytes=16, top_k=4, layers=1)
    with pytest.raises(ExecutorError, match="cannot be mapped: no /dev/shm here"):
        sharedpool.SharedHostPool(cfg.pool_layout(4, 2), cfg.layers)
    [name] = names
    assert not Path(f"/dev/shm/{name.lstrip('/')}").exists()
