"""Prometheus metrics for every node, read at scrape time from the node's typed health record.

One source of truth: the metric names, kinds and help texts are declared on the health fields
(`swarmnode.observe.health_record`); `/metrics` renders the record, the heartbeat publishes it, `status --json` shows it.
The Metrics table of docs/status-and-metrics.md is generated from the same fields.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from swarmnode.observe.health_fields import FIELDS
from swarmnode.observe.health_record import NodeHealth
from swarmnode.staleness import bucket_label

# health key -> (metric name, kind, help) of the unlabelled families. Counters get _total as Prometheus expects.
HEALTH_METRICS: dict[str, tuple[str, str, str]] = {
    k: (f.metric, f.kind, f.help) for k, f in FIELDS.items() if f.metric and not f.label
}
LABELLED_METRICS = {k: f for k, f in FIELDS.items() if f.metric and f.label}
REJECTED_METRIC = FIELDS["rejected"].metric  # label: reason
STALENESS_METRIC = FIELDS["staleness_hist"].metric  # label: bucket ("0", "1", "2-3", "4-7", ...)
MISMATCH_METRIC = FIELDS["verified_mismatch"].metric  # label: sampler (peer id)

Health = NodeHealth | dict[str, Any]


def _family(kind: str) -> type:
    return CounterMetricFamily if kind == "counter" else GaugeMetricFamily


class HealthCollector(Collector):
    """Renders a node's health record (or its dict) as Prometheus metric families on every scrape."""

    def __init__(self, get_health: Callable[[], Health | None], role: str) -> None:
        self._get_health = get_health
        self._role = role

    def collect(self) -> Iterable:
        health = self._get_health()
        health = health.as_dict() if isinstance(health, NodeHealth) else dict(health or {})
        for key, (name, kind, doc) in HEALTH_METRICS.items():
            value = health.get(key)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            family = _family(kind)(name, doc, labels=["role"])
            family.add_metric([self._role], float(value))
            yield family
        for key, spec in LABELLED_METRICS.items():
            value = health.get(key)
            if isinstance(value, dict):
                items = [(str(k), v) for k, v in sorted(value.items())]
            elif isinstance(value, list) and spec.labels_from:
                items = [(str(k), v) for k, v in zip(health.get(spec.labels_from) or [], value)]
            elif isinstance(value, list) and spec.label == "bucket":
                items = [(bucket_label(i), v) for i, v in enumerate(value)]
            elif isinstance(value, str):  # a state (e.g. reachability): 1 under its label
                items = [(value, 1)]
            else:
                continue
            if not items:
                continue
            family = _family(spec.kind)(spec.metric, spec.help, labels=[spec.label])
            for label, count in items:
                family.add_metric([label], float(count))
            yield family


def serve_metrics(port: int, get_health: Callable[[], Health | None], role: str, addr: str = "127.0.0.1") -> int:
    """Serve `/metrics` for this node on `port` (0 = any free port) in a daemon thread; returns the port."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(HealthCollector(get_health, role))
    server, _thread = start_http_server(port, addr=addr, registry=registry)
    return server.server_address[1]
