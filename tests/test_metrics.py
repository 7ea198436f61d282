"""Prometheus metrics: a real HTTP endpoint on 127.0.0.1 serves figures that agree with
the simulation's own counts, and the decode path never reads counters back itself."""

from __future__ import annotations

import urllib.request
from dataclasses import replace
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from hisparse.config import HiSparseConfig
from hisparse.metrics import HiSparseMetrics
from hisparse.simulate import SimulateOptions, Simulation


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        assert resp.status == 200
        text = resp.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()) if k != "le")
            le = s.labels.get("le")
            key = s.name + (f"{{{labels}}}" if labels else "") + (f"[le={le}]" if le else "")
            out[key] = s.value
    return out


def test_endpoint_serves_figures_that_match_the_run() -> None:
    opts = SimulateOptions(requests=40, steps=400, seed=2, host_blocks=24)
    sim = Simulation(opts)
    metrics = sim.metrics = HiSparseMetrics(sim.config, read_every=8)
    port = metrics.serve(0)
    try:
        rep = sim.run()
        m = scrape(port)
    finally:
        metrics.close()
    assert rep.violations == 0 and rep.spills > 0 and rep.prefix_hits > 0
    assert m['hisparse_cache_hits_total{tier=resident}'] == rep.resident_hits
    assert m['hisparse_cache_hits_total{tier=hot}'] == rep.hot_hits
    assert m["hisparse_cache_misses_total"] == rep.misses > 0
    assert m["hisparse_host_to_device_bytes_total"] == rep.h2d_bytes
    assert m["hisparse_device_to_host_bytes_total"] == rep.d2h_bytes
    assert m["hisparse_spills_total"] == rep.spills
    assert m["hisparse_prefix_hits_total"] == rep.prefix_hits
    assert m["hisparse_host_blocks_total"] == sim.config.host_blocks == 24
    used = sim.coordinator.state.host_used
    assert m["hisparse_host_blocks_used"] == used
    assert m["hisparse_host_blocks_usage"] == used / 24
    assert m["hisparse_pending_spills"] == 0  # every completed ack arrived in the drain
    # a 24-block host pool is overwritten many times; published pages are hit again
    assert m["hisparse_host_block_lifetime_steps_count"] > 0
    assert m["hisparse_host_block_reuse_gap_steps_count"] > 0
    assert m["hisparse_host_block_reuse_gap_steps_count"] <= rep.prefix_hits


class Probe:
    """A decode result that counts how often its counters are read."""

    reads = 0

    def __getattr__(self, name: str) -> Any:
        if name in ("resident_hits", "hot_hits", "misses", "h2d_bytes"):
            Probe.reads += 1
            return 1
        raise AttributeError(name)


def test_decode_counters_are_read_every_n_steps_only() -> None:
    config = HiSparseConfig(host_pool_gib=0.001, block_tokens=8, row_bytes=16, top_k=4)
    metrics = HiSparseMetrics(config, read_every=4)
    for _ in range(3):
        metrics.on_decode(Probe())
    assert Probe.reads == 0
    metrics.on_decode(Probe())
    assert Probe.reads == 16  # four results, four counters each, read in one go
    assert "hisparse_cache_misses_total 4.0" in metrics.text()
    with pytest.raises(ValueError, match="read_every"):
        HiSparseMetrics(config, read_every=0)


def test_simulate_cli_serves_metrics(capsys: pytest.CaptureFixture[str]) -> None:
    from hisparse.cli import main

    assert main(["simulate", "--requests", "8", "--steps", "60", "--no-progress",
                 "--metrics-port", "0"]) == 0
    err = capsys.readouterr().err
    assert "metrics: http://127.0.0.1:" in err


def test_metrics_are_separate_per_registry() -> None:
    config = Simulation(replace(SimulateOptions(), requests=1)).config
    a, b = HiSparseMetrics(config), HiSparseMetrics(config)  # no clash on one name
    assert a.registry is not b.registry
    a.misses.inc(3)
    assert "hisparse_cache_misses_total 3.0" in a.text()
    assert "hisparse_cache_misses_total 0.0" in b.text()


def gauges(metrics: HiSparseMetrics) -> dict[str, float]:
    """Every gauge of the registry, by name (a new gauge shows up here unasked)."""
    return {
        s.name: s.value
        for family in metrics.registry.collect()
        if family.type == "gauge"
        for s in family.samples
    }


def expected_gauges(sim: Simulation) -> dict[str, float]:
    """What each gauge must read, from the protocol state alone."""
    state = sim.coordinator.state
    blocks = sim.config.host_blocks
    return {
        "hisparse_host_blocks_used": state.host_used,
        "hisparse_host_blocks_total": blocks,
        "hisparse_host_blocks_usage": state.host_used / blocks,
        "hisparse_pending_spills": len(state.open_spills),
    }


@pytest.mark.parametrize(
    ("seed", "tp"), [(1, 1), (3, 1), (5, 1), (2, 2)], ids=["s1", "s3", "s5", "tp2-s2"]
)
def test_every_gauge_agrees_with_the_state_after_worker_losses(seed: int, tp: int) -> None:
    """Worker restarts (some losing a step's metadata) and aborts close transfers that
    no completed ack ends: after every step and after the drain, every gauge reads what
    the protocol state says (the pending-spills gauge read 7 after such a run)."""
    opts = SimulateOptions(requests=200, seed=seed, worker_restarts=8, abort_rate=0.05, tp=tp,
                           worker_processes=False)
    sim = Simulation(opts)
    metrics = sim.metrics = HiSparseMetrics(sim.config)
    checked: list[int] = []
    step = sim.step

    def checked_step(t: int) -> None:
        step(t)
        assert gauges(metrics) == expected_gauges(sim), f"step {t}"
        checked.append(len(sim.coordinator.state.open_spills))

    sim.step = checked_step  # type: ignore[method-assign]
    rep = sim.run()
    assert rep.violations == 0 and rep.worker_restarts == 8 and rep.aborted > 0
    assert rep.open_at_loss > 0  # the losses hit open transfers
    assert max(checked) > 0 and len(checked) == rep.steps  # checked mid-run, while busy
    assert gauges(metrics) == expected_gauges(sim)
    assert gauges(metrics)["hisparse_pending_spills"] == 0  # drained


def test_metrics_without_prometheus_client_say_what_to_install(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # (metrics.py:59:raise:0: prometheus-client is installed wherever the suite runs)
    import sys

    from hisparse.metrics import MetricsUnavailable, _prometheus

    assert _prometheus() is sys.modules["prometheus_client"]
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    with pytest.raises(MetricsUnavailable,
                       match=r"^metrics need prometheus-client: pip install 'hisparse\[metrics\]'$"):
        _prometheus()


def test_a_bad_read_every_is_refused_first_even_without_prometheus(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the argument's own refusal comes before the dependency's (metrics.py:73:reorder:0
    # asked for prometheus-client first)
    import sys

    config = HiSparseConfig(host_pool_gib=0.001, block_tokens=8, row_bytes=16, top_k=4)
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    with pytest.raises(ValueError, match=r"^read_every=0 must be at least 1$"):
        HiSparseMetrics(config, read_every=0)


def test_close_flushes_what_is_unread_and_stops_serving() -> None:
    # (metrics.py:180:call:8 left the last steps unread; 182:call:15 kept serving)
    import threading

    config = HiSparseConfig(host_pool_gib=0.001, block_tokens=8, row_bytes=16, top_k=4)
    metrics = HiSparseMetrics(config, read_every=4)
    before = set(threading.enumerate())
    port = metrics.serve(0)
    # serve() starts the endpoint's own thread, running the server's loop
    [serving] = [t for t in threading.enumerate()
                 if t not in before and "serve_forever" in t.name]
    Probe.reads = 0
    metrics.on_decode(Probe())
    assert Probe.reads == 0  # one step of four: not read yet
    metrics.close()
    assert Probe.reads == 4
    assert "hisparse_cache_misses_total 1.0" in metrics.text()
    with pytest.raises(OSError):
        scrape(port)
    # close() stopped that loop before closing its socket, so the thread has ended
    # (182:call:15 only closed the socket: the loop kept polling it, a thread left
    # running per close); the join returns at once once the loop has returned
    serving.join(timeout=10)
    assert not serving.is_alive()
