"""Prometheus metrics for HiSparse (optional extra ``metrics``: ``prometheus-client``).

Names follow vLLM's HiSparse metrics. Scheduler-side figures come from what already
crosses the connector (transfers down, acks up, admissions), so each call costs
O(this step's commands), never O(pool) or O(requests seen). Decode counters live in
each step's result, which on an accelerator is device memory: ``on_decode`` only keeps
a reference and the counters are read back every ``read_every`` steps, all at once, so
the decode path itself never synchronizes for metrics.

Metrics (counters get Prometheus' ``_total`` suffix on the wire):

- ``hisparse_cache_hits{tier="resident"|"hot"}``, ``hisparse_cache_misses``: top-K
  lookups, summed over leader layers; a miss is served from the host tier;
- ``hisparse_host_to_device_bytes``, ``hisparse_device_to_host_bytes``;
- ``hisparse_spills``, ``hisparse_prefix_hits`` (pages);
- ``hisparse_host_blocks_used`` / ``_total`` / ``_usage``, ``hisparse_pending_spills``
  (open transfers); every gauge is read from the protocol state in ``on_step``;
- ``hisparse_host_block_lifetime_steps``: steps from a transfer writing a host block to
  the next transfer overwriting that block (how long its content was kept);
- ``hisparse_host_block_reuse_gap_steps``: steps from a host page's publish (or its
  previous prefix hit) to its next prefix hit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from hisparse.config import HiSparseConfig
from hisparse.spec.messages import HiSparseConnectorMetadata, HiSparseWorkerMeta

if TYPE_CHECKING:
    from hisparse.coordinator import Admission, HiSparseCoordinator

STEP_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)


class DecodeCounts(Protocol):
    """A decode step's counters (``DecodeResult`` reads them from the device when asked;
    a worker in another process sends them as numbers)."""

    @property
    def resident_hits(self) -> int: ...
    @property
    def hot_hits(self) -> int: ...
    @property
    def misses(self) -> int: ...
    @property
    def h2d_bytes(self) -> int: ...


class MetricsUnavailable(RuntimeError):
    """prometheus-client is not installed."""


def _prometheus() -> Any:
    try:
        import prometheus_client
    except ImportError as exc:
        raise MetricsUnavailable(
            "metrics need prometheus-client: pip install 'hisparse[metrics]'"
        ) from exc
    return prometheus_client


class HiSparseMetrics:
    """Counters, gauges and histograms fed by the scheduler and worker sides."""

    def __init__(
        self, config: HiSparseConfig, *, registry: Any = None, read_every: int = 16
    ) -> None:
        if read_every < 1:
            raise ValueError(f"read_every={read_every} must be at least 1")
        p = _prometheus()
        self.registry = registry if registry is not None else p.CollectorRegistry()
        self.config, self.read_every = config, read_every
        reg = {"registry": self.registry}
        self.hits = p.Counter("hisparse_cache_hits", "Top-K lookups served on the GPU",
                              ["tier"], **reg)
        self.misses = p.Counter("hisparse_cache_misses",
                                "Top-K lookups served from the host tier", **reg)
        self.h2d = p.Counter("hisparse_host_to_device_bytes", "Bytes copied host to device",
                             **reg)
        self.d2h = p.Counter("hisparse_device_to_host_bytes",
                             "Bytes spilled device to host", **reg)
        self.spills = p.Counter("hisparse_spills", "Pages whose spill was sent", **reg)
        self.prefix_hits = p.Counter("hisparse_prefix_hits",
                                     "Pages admitted from published host pages", **reg)
        self.used = p.Gauge("hisparse_host_blocks_used", "Host blocks leased or valid", **reg)
        self.total = p.Gauge("hisparse_host_blocks_total", "Host blocks in the pool", **reg)
        self.usage = p.Gauge("hisparse_host_blocks_usage", "Host pool usage (0..1)", **reg)
        self.pending = p.Gauge("hisparse_pending_spills",
                               "Open transfers: spills not yet closed by their acks or a "
                               "worker loss", **reg)
        self.lifetime = p.Histogram(
            "hisparse_host_block_lifetime_steps",
            "Steps from a transfer writing a host block to the next overwriting it",
            buckets=STEP_BUCKETS, **reg)
        self.reuse_gap = p.Histogram(
            "hisparse_host_block_reuse_gap_steps",
            "Steps from a host page's publish or last prefix hit to its next prefix hit",
            buckets=STEP_BUCKETS, **reg)
        self.total.set(config.host_blocks)
        self._dst: dict[int, int] = {}  # open transfer ID -> destination host block
        self._written: dict[int, int] = {}  # host block -> step its content was sent
        self._touched: dict[int, int] = {}  # host block -> step published or last hit
        self._decodes: list[DecodeCounts] = []
        self._server: Any = None

    # -- scheduler side ------------------------------------------------------------

    def on_connector_meta(self, meta: HiSparseConnectorMetadata, step: int) -> None:
        """The commands sent this step: spills and their bytes, block overwrite times."""
        for t in meta.transfers:
            h = t.dst_host_block
            if h in self._written:
                self.lifetime.observe(step - self._written[h])
            self._written[h] = step
            self._dst[t.transfer_id] = h
        n = len(meta.transfers)
        self.spills.inc(n)
        self.d2h.inc(n * self.config.host_block_bytes)

    def on_worker_meta(self, meta: HiSparseWorkerMeta, step: int) -> None:
        """Completed acks publish pages (the reuse clock starts) and end pending spills."""
        for tid in meta.completed:
            h = self._dst.pop(tid, None)
            if h is not None:
                self._touched[h] = step

    def on_admission(self, admission: Admission, step: int) -> None:
        """Prefix hits: the admitted table's host entries are published pages reused."""
        for where, block in admission.table:
            if where == "host":
                h = int(block)
                if h in self._touched:
                    self.reuse_gap.observe(step - self._touched[h])
                self._touched[h] = step
        self.prefix_hits.inc(admission.prefix_hits)

    def on_step(self, coordinator: HiSparseCoordinator) -> None:
        """Every gauge from the protocol state, where each fact lives (not from a copy
        kept here: a worker loss closes transfers that no completed ack ever ends).
        O(open transfers): the ones seen here that have closed since are dropped."""
        state = coordinator.state
        used = state.host_used
        self.used.set(used)
        self.usage.set(used / self.config.host_blocks)
        self.pending.set(len(state.open_spills))
        machine = coordinator.machine
        for tid in [t for t in self._dst if machine.open_transfer(t) is None]:
            del self._dst[tid]  # closed by a worker loss (abandoned or published)

    # -- worker side -----------------------------------------------------------------

    def on_decode(self, result: DecodeCounts) -> None:
        """Keep the step's result; its counters are read every ``read_every`` steps."""
        self._decodes.append(result)
        if len(self._decodes) >= self.read_every:
            self.flush()

    def flush(self) -> None:
        """Read back the held decode counters (one synchronization for all of them)."""
        held, self._decodes = self._decodes, []
        for r in held:
            self.hits.labels(tier="resident").inc(r.resident_hits)
            self.hits.labels(tier="hot").inc(r.hot_hits)
            self.misses.inc(r.misses)
            self.h2d.inc(r.h2d_bytes)

    # -- exposition ---------------------------------------------------------------------

    def serve(self, port: int = 0, addr: str = "127.0.0.1") -> int:
        """Serve ``/metrics`` over HTTP in a daemon thread; returns the bound port."""
        server, _ = _prometheus().start_http_server(port, addr=addr, registry=self.registry)
        self._server = server
        return int(server.server_port)

    def close(self) -> None:
        """Stop serving (if serving) after a last flush."""
        self.flush()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def text(self) -> str:
        """The exposition text, as a scrape would get it (after a flush)."""
        self.flush()
        return str(_prometheus().generate_latest(self.registry).decode())
