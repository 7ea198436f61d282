"""Rules of the simulation's lost metadata, the coordinator's completed import, the GPU
budget with HiSparse disabled and the disabled run's scheduler outputs that survivors of
the whole mutation run showed (docs/mutation-run7)."""

from __future__ import annotations

from hisparse.config import GIB, HiSparseConfig
from hisparse.simulate import SimulateOptions, Simulation
from hisparse.sizing.baseline import DisabledRun
from hisparse.workload import Arrival


def test_metadata_lost_with_one_rank_still_reaches_the_ranks_after_it() -> None:
    """With three ranks, a step's connector metadata lost with rank 1's worker is still
    bound by rank 2 (after it in rank order): no rank sees a sequence gap, and the run
    ends every request with no violation. (simulate.py:688:loop:5 stopped at the missed
    rank: rank 2 never got the step's metadata and refused the next one with a
    MessageGap.)"""
    # seed 3: four of the six worker losses lose the step's metadata, of ranks 2, 2, 1, 0
    rep = Simulation(SimulateOptions(requests=16, steps=120, seed=3, worker_restarts=6,
                                     tp=3)).run()
    assert rep.metas_lost == 4 and rep.worker_restarts == 6
    assert rep.violations == 0
    assert (rep.requests, rep.finished, rep.aborted, rep.still_running,
            rep.never_admitted) == (16, 11, 5, 0, 0)


def test_gpu_blocks_with_hisparse_disabled_count_the_gpu_budget_not_the_host_pool() -> None:
    """The disabled-HiSparse GPU pool is the whole ``gpu_kv_gib`` budget in host blocks,
    whatever the host pool is. (config.py:149:var:14 counted ``host_pool_gib`` instead.)"""
    c = HiSparseConfig(host_pool_gib=3, gpu_kv_gib=1, hot_slots=3, block_tokens=16,
                       row_bytes=32, layers=2, top_k=8)
    assert c.gpu_blocks_disabled == GIB // (16 * 32 * 2)
    assert c.host_blocks == 3 * GIB // (16 * 32 * 2)


def test_the_disabled_run_counts_one_scheduler_output_per_step() -> None:
    """Every step of the disabled run builds one scheduler output and counts it.
    (sizing/baseline.py:80:arith:1 counted down.)"""
    arrivals = [Arrival(step=0, request_id="a", page_keys=("k0", "k1"), decode_steps=3),
                Arrival(step=1, request_id="b", page_keys=("k2",), decode_steps=2)]
    run = DisabledRun(arrivals, gpu_blocks=4, max_running=2)
    assert run.outputs == 0
    rep = run.run(100)
    assert rep.finished == 2 and rep.steps == 4  # the 4th step finishes both
    assert run.outputs == rep.steps == 4
