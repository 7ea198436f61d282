"""Per-child connector figures as Prometheus gauges, in the same registry as
``HiSparseMetrics`` so a MultiConnector's children export side by side:
``kv_connector_stat{connector="offload", stat="restores"}``. Needs the ``metrics``
extra. ``observe`` costs O(children x their stats)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hisparse.metrics import _prometheus


class ConnectorMetrics:
    """One gauge family labelled by child and figure."""

    def __init__(self, registry: Any = None) -> None:
        p = _prometheus()
        self.registry = registry if registry is not None else p.CollectorRegistry()
        self.stat = p.Gauge("kv_connector_stat", "A MultiConnector child's figure",
                            ["connector", "stat"], registry=self.registry)

    def observe(self, stats: Mapping[str, Mapping[str, int]]) -> None:
        for child, figures in stats.items():
            for name, value in figures.items():
                self.stat.labels(connector=child, stat=name).set(value)

    def text(self) -> str:
        p = _prometheus()
        out: bytes = p.generate_latest(self.registry)
        return out.decode()
