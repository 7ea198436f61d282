"""``hisparse simulate --indexer-offload``: suffix restores and fallbacks happen, every
indexer row matches the oracle, the check has teeth, the trace (capped arrivals
included) is accepted by ``hisparse check --trace``; HiSparse's capped admission."""

from __future__ import annotations

import copy
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from hisparse.blockpool import BlockPool
from hisparse.config import HiSparseConfig
from hisparse.coordinator import HiSparseCoordinator
from hisparse.indexer_sim import IndexerSimulation, indexer_lines
from hisparse.simulate import SimulateOptions, make_simulation
from hisparse.spec.messages import HiSparseWorkerMeta
from hisparse.spec.suffix import SuffixPlan
from hisparse.tlc import TlcInstall

# synthetic, seed 0: prefix sharing makes restores and fallbacks happen (counts below)
OPTS = SimulateOptions(indexer_offload=True, offload_blocks=96)


def test_restores_and_fallbacks_happen_with_every_row_correct() -> None:
    sim = make_simulation(OPTS)
    assert isinstance(sim, IndexerSimulation)
    rep = sim.run()
    ix = rep.indexer
    assert (rep.violations, rep.data_mismatches, ix["mismatches"]) == (0, 0, 0), rep.notes
    assert ix["suffix_restores"] > 0 and ix["fallbacks"] > 0
    assert ix["restored_blocks"] > 0 and ix["restore_bytes"] == (
        ix["restored_blocks"] * sim.ix.block_bytes)
    assert ix["stored_blocks"] > 0 and ix["offload_evictions"] > 0
    assert ix["host_beyond_gpu"] == ix["suffix_restores"] + ix["fallbacks"]
    assert ix["fallback_pages"] > 0 and ix["fallback_bytes"] == (
        ix["fallback_pages"] * OPTS.host_block_bytes)
    assert ix["rows_checked"] > 0 and ix["open_jobs"] == 0
    # admissions the pools could not take are counted, up (indexer_sim.py:137:arith:11)
    assert rep.admissions_refused > 0
    # every finished request was forgotten by the connectors too: nothing per request is
    # left (indexer_sim.py:186:call:10 never told the MultiConnector)
    assert sim.offload._hashes == {} and sim.multi._loader == {}
    assert ix["children"] == ["hisparse", "offload"]
    assert rep.finished + rep.aborted + rep.still_running == ix["admissions"]
    assert sim.group.num_free == sim.group.blocks  # every indexer block back
    lines = indexer_lines(ix)
    assert len(lines) == 3 and "suffix restores" in lines[0]


def test_a_missing_suffix_without_fallback_is_caught_as_mismatches() -> None:
    """The rule's no_fallback bug in the simulator: the host hit is admitted whole
    although part of the indexer suffix is not restorable; those pages' indexer keys
    are never on the GPU, and the row check counts them."""

    class NoFallback(IndexerSimulation):
        def plan(self, r: str) -> SuffixPlan:
            p = super().plan(r)
            return SuffixPlan(p.host_hit, p.gpu_hit, p.host_hit, p.host_hit, ()) \
                if p.fallback else p

    rep = NoFallback(OPTS).run()
    assert rep.indexer["mismatches"] > 0
    assert rep.data_mismatches >= rep.indexer["mismatches"]


def test_the_indexer_run_takes_one_private_rank() -> None:
    for bad in ({"tp": 2}, {"worker_restarts": 1}, {"indexer_gpu_blocks": 8},
                {"message_faults": 0.05}):
        with pytest.raises(ValueError, match="indexer"):
            make_simulation(SimulateOptions(indexer_offload=True, **bad))


def test_cli_refuses_a_bad_combination_in_one_line() -> None:
    proc = subprocess.run([sys.executable, "-m", "hisparse", "simulate", "--indexer-offload",
                           "--tp", "2", "--no-progress"], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


@pytest.mark.tlc
def test_its_trace_with_capped_arrivals_is_accepted(tlc: TlcInstall, tmp_path: Path) -> None:
    trace = tmp_path / "indexer.jsonl"
    proc = subprocess.run([sys.executable, "-m", "hisparse", "simulate", "--indexer-offload",
                           "--offload-blocks", "96", "--no-progress", "--trace", str(trace)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "fallbacks 2" in proc.stdout, proc.stdout  # the run caps arrivals
    check = subprocess.run([sys.executable, "-m", "hisparse", "check", "--trace", str(trace),
                            "--workers", "1"], capture_output=True, text=True, check=False)
    assert check.returncode == 0 and "accepted" in check.stdout, check.stdout + check.stderr


# --- HiSparse's capped admission --------------------------------------------------------


def _published() -> HiSparseCoordinator:
    cfg = HiSparseConfig(host_pool_blocks=4, block_tokens=4, row_bytes=16, top_k=4)
    c = HiSparseCoordinator(cfg, BlockPool(4), gpu_blocks=4, check=True)
    c.add_request("a", ("k0", "k1"))
    assert c.admit("a") is not None
    tids = tuple(c.spill(page) for page in (("a", 1), ("a", 2)))
    assert None not in tids
    c.take_commands()
    ids = tuple(t for t in tids if t is not None)
    c.on_worker_meta(HiSparseWorkerMeta(enqueued=ids, completed=ids))  # published
    c.finish("a")
    return c


def test_admission_with_a_capped_hit() -> None:
    c = _published()
    c.add_request("b", ("k0", "k1", "k2"))
    assert c.lookup_prefix("b") == 2
    adm = c.admit("b", max_hits=1)
    assert adm is not None and adm.prefix_hits == 1
    assert [w[0] for w in adm.table] == ["host", "gpu", "gpu"]


def test_a_negative_cap_is_refused_with_nothing_changed() -> None:
    c = _published()
    c.add_request("b", ("k0",))
    before = (c.state.clone(), copy.deepcopy(vars(c.kv)))
    with pytest.raises(ValueError, match="max_hits"):
        c.admit("b", max_hits=-1)
    assert (c.state.clone(), copy.deepcopy(vars(c.kv))) == before


def test_blocks_a_store_still_reads_are_freed_only_after_its_ack(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A request that ends while a store of its indexer blocks is in flight keeps them
    (refs held) until the store's ack, restore or not (indexer_sim.py:187:var:9 kept
    them only for restores: a store's source went back to the pool while read)."""
    original = IndexerSimulation._release_workers
    held_at_end = 0

    def checked(self: IndexerSimulation, r: str) -> None:
        nonlocal held_at_end
        blocks = self.ix_blocks.get(r)
        original(self, r)
        if blocks is not None and self.held_jobs.get(r):
            held_at_end += 1
            assert self.to_free[r] == blocks
            assert all(self.group._refs[g] > 0 for g in blocks)

    monkeypatch.setattr(IndexerSimulation, "_release_workers", checked)
    sim = make_simulation(OPTS)
    rep = sim.run()
    assert rep.violations == 0 and rep.data_mismatches == 0
    assert held_at_end > 0  # the case the rule is about was met


def test_admission_stops_only_at_the_concurrency_bound_or_a_refusal(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """After each step's admissions, a request still waits only because the running and
    restoring requests fill the bound or the first waiting one was refused
    (indexer_sim.py:124:var:18 counted requests with store jobs in flight as well)."""
    original = IndexerSimulation._schedule
    stopped_at_bound = 0

    def checked(self: IndexerSimulation) -> None:
        nonlocal stopped_at_bound
        refused = self.report.admissions_refused
        original(self)
        if self.pending:
            full = len(self.running) + len(self.restoring) >= self.o.concurrency
            assert full or self.report.admissions_refused > refused
            stopped_at_bound += full

    monkeypatch.setattr(IndexerSimulation, "_schedule", checked)
    rep = make_simulation(replace(OPTS, concurrency=3)).run()
    assert rep.violations == 0 and stopped_at_bound > 0  # the bound did bind


def test_its_metrics_count_the_spills_and_bytes_of_the_run() -> None:
    # the indexer run feeds HiSparse's metrics as the plain run does
    # (indexer_sim.py:220:call:25 never told them of the commands sent)
    from hisparse.metrics import HiSparseMetrics

    sim = make_simulation(OPTS)
    metrics = sim.metrics = HiSparseMetrics(sim.config)
    rep = sim.run()
    seen = {s.name: s.value for family in metrics.registry.collect() for s in family.samples}
    assert rep.spills > 0
    assert seen["hisparse_spills_total"] == rep.spills
    assert seen["hisparse_device_to_host_bytes_total"] == rep.d2h_bytes


# --- the row check and admission, exactly -----------------------------------------------


def test_a_row_with_a_wrong_key_or_a_wrong_scale_is_one_mismatch() -> None:
    """The row check compares each (block, layer, token) row's FP8 key bytes and its
    float32 scale: a row is one mismatch when either differs, once when both do
    (indexer_sim.py:251:var:1 counted only the keys: a wrong scale went unseen)."""
    found: list[tuple[str, int]] = []

    class Corrupting(IndexerSimulation):
        def _verify(self, result: Any, topk: dict[str, Any]) -> None:
            if found or not topk:
                super()._verify(result, topk)
                return
            ix = self.ix
            block = self.ix_blocks[next(iter(topk))][0]
            uses = sum(self.ix_blocks[r].count(block) for r in topk)  # (a shared prefix)
            layer, token = ix.layers - 1, 3
            base = layer * ix.layer_bytes
            key = base + token * ix.head_dim + 5  # one byte of the row's FP8 key
            scale = base + ix.block_tokens * ix.head_dim + token * 4 + 2  # of its scale
            for what, where in (("key", (key,)), ("scale", (scale,)),
                                ("both", (key, scale))):
                saved = self.group.data[block].copy()
                for b in where:
                    self.group.data[block, b] ^= 0x5A
                before = self.counts["mismatches"]
                super()._verify(result, topk)
                found.append((what, (self.counts["mismatches"] - before) // uses))
                self.group.data[block] = saved
            before = self.counts["mismatches"]
            super()._verify(result, topk)  # restored: nothing wrong
            found.append(("none", self.counts["mismatches"] - before))

    Corrupting(replace(OPTS, requests=3, steps=40)).run()
    assert found == [("key", 1), ("scale", 1), ("both", 1), ("none", 0)]


def test_admission_takes_only_the_gpu_blocks_the_host_hit_does_not_cover() -> None:
    """A request whose host hit is admitted needs GPU blocks only for its other pages:
    it is admitted when exactly those are free, and a refusal means a pool really has no
    room (indexer_sim.py:135:arith:10 asked for the host-hit pages' blocks on top: such
    a request was refused while the pools could take it)."""
    tight = 0

    class Checked(IndexerSimulation):
        def _admit(self, r: str) -> bool:
            nonlocal tight
            p, n, free = self.plan(r), len(self.hashes[r]), self.kv.num_free
            room = self.group.can_allocate(self.hashes[r], min(p.gpu_hit, p.admit_indexer))
            admitted = super()._admit(r)
            if admitted:
                assert free >= n - p.admit_mla
                tight += free < n  # the host hit made it fit
            else:
                assert free < n - p.admit_mla or not room, (r, n, p, free)
            return admitted

    # a roomy indexer group: the GPU KV pool is the one that binds
    rep = Checked(replace(OPTS, requests=8, gpu_blocks=12, indexer_gpu_blocks=36,
                          max_pages=6, concurrency=4, seed=1)).run()
    assert rep.violations == 0 and rep.data_mismatches == 0
    assert tight > 0  # (not vacuous: an admission fit only thanks to its host hit)


def test_requests_still_restoring_at_the_end_are_cut_off_and_give_their_blocks_back() -> None:
    """A request still waiting for its restores when the run's steps run out ends at the
    drain like a running one: ``still_running`` counts both (the two counted here as the
    drain begins), and every indexer block comes back (indexer_sim.py:266:arith:18
    counted a restoring one down; indexer_sim.py:264:call:28 never released it, so its
    indexer blocks stayed taken)."""
    sim = make_simulation(replace(OPTS, seed=2, requests=8, steps=31))
    assert isinstance(sim, IndexerSimulation)
    cut: dict[str, int] = {}
    drain = sim.drain

    def counted() -> None:
        cut.update(restoring=len(sim.restoring), running=len(sim.running))
        drain()

    sim.drain = counted  # type: ignore[method-assign]
    rep = sim.run()
    assert rep.violations == 0 and rep.data_mismatches == 0, rep.notes
    assert cut["restoring"] > 0  # (not vacuous: the run ended with restores pending)
    assert rep.still_running == cut["restoring"] + cut["running"]
    assert sim.ix_blocks == {} and sim.restoring == {}
    assert sim.group.num_free == sim.group.blocks
