"""Prometheus metrics for every node, read at scrape time from the same health dict the DHT and dashboard use.

One source of truth: the node keeps a `health` dict (see `HEALTH_METRICS` for the keys); `/metrics` renders it,
the heartbeat publishes it, `status --json` shows it. Metric names are documented in README's Metrics section.
"""

from __future__ import annotations

from typing import Callable, Iterable

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

# health key -> (metric name, kind, help). Counters end in _total as Prometheus expects.
HEALTH_METRICS: dict[str, tuple[str, str, str]] = {
    "version": ("swarmnode_policy_version", "gauge", "policy version this node holds (learner: publishes)"),
    "lag": ("swarmnode_version_lag", "gauge", "versions behind the newest announced version"),
    "step": ("swarmnode_learner_steps", "counter", "optimiser steps taken"),
    "reward_mean": ("swarmnode_reward_mean", "gauge", "mean recomputed reward of the last step"),
    "kl": ("swarmnode_learner_sampler_kl", "gauge", "KL(behaviour || learner) per token, (r-1)-log r estimate, last step"),
    "is_weight_var": ("swarmnode_is_weight_variance", "gauge", "the loss's own importance-weight variance, last step"),
    "ratio_peqq_var": ("swarmnode_ratio_peqq_variance", "gauge",
                       "the GEPO paper's IS-weight variance (p_i/E_q[q], 8-row micro-batches), last step"),
    "entropy": ("swarmnode_policy_entropy", "gauge", "sampling policy entropy per token (nats), last step"),
    "clip_frac": ("swarmnode_clip_fraction", "gauge", "fraction of clipped importance weights, last step"),
    "grad_norm": ("swarmnode_grad_norm", "gauge", "gradient norm before clipping, last step"),
    "staleness_max": ("swarmnode_staleness_max", "gauge", "largest staleness in the last batch (versions)"),
    "step_time": ("swarmnode_step_seconds", "gauge", "wall time of the last learner step"),
    "dropped_stale": ("swarmnode_dropped_stale", "counter", "groups dropped as too stale"),
    "groups_received": ("swarmnode_groups_received", "counter", "rollout groups accepted"),
    "groups_sent": ("swarmnode_groups_sent", "counter", "rollout groups sent"),
    "groups_acked": ("swarmnode_groups_acked", "counter", "rollout groups acknowledged by a learner"),
    "groups_dropped": ("swarmnode_groups_dropped", "counter", "rollout groups dropped from a full outbox"),
    "rollouts_per_s": ("swarmnode_rollouts_per_second", "gauge", "rollout groups generated per second"),
    "tokens_per_s": ("swarmnode_tokens_per_second", "gauge", "tokens generated per second"),
    "fetch_mb_s": ("swarmnode_weight_fetch_mb_per_second", "gauge", "rate of the last weight fetch (MB/s fetched)"),
    "fetch_seconds": ("swarmnode_weight_fetch_seconds", "gauge", "wall time of the last weight fetch"),
    "served_mb": ("swarmnode_weight_served_mb", "counter", "MB of weight chunks served to peers"),
    "serve_mb_s": ("swarmnode_weight_serve_mb_per_second", "gauge", "MB/s of weight chunks served, last 30 s"),
    "uptime": ("swarmnode_uptime_seconds", "gauge", "seconds since the node started"),
    "peers_seen": ("swarmnode_peers_seen", "gauge", "live peers in the run's DHT"),
    "local_groups": ("swarmnode_sapo_local_groups", "counter", "sapo: own groups trained on"),
    "external_groups": ("swarmnode_sapo_external_groups", "counter", "sapo: peers' text groups trained on"),
    "reward_lies": ("swarmnode_sapo_reward_lies", "counter", "sapo: peers' groups whose claimed rewards were false"),
}
REJECTED_METRIC = "swarmnode_groups_rejected"  # label: reason
STALENESS_METRIC = "swarmnode_staleness_groups"  # label: bucket ("0", "1", "2-3", "4-7", ...)
MISMATCH_METRIC = "swarmnode_sampler_logprob_mismatch"  # label: sampler (peer id)


class HealthCollector(Collector):
    """Renders a node's health dict as Prometheus metric families on every scrape."""

    def __init__(self, get_health: Callable[[], dict], role: str) -> None:
        self._get_health = get_health
        self._role = role

    def collect(self) -> Iterable:
        health = dict(self._get_health() or {})
        for key, (name, kind, doc) in HEALTH_METRICS.items():
            value = health.get(key)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            family = (CounterMetricFamily if kind == "counter" else GaugeMetricFamily)(name, doc, labels=["role"])
            family.add_metric([self._role], float(value))
            yield family
        rejected = health.get("rejected")
        if isinstance(rejected, dict):
            family = CounterMetricFamily(REJECTED_METRIC, "rollout groups rejected, by reason", labels=["reason"])
            for reason, count in sorted(rejected.items()):
                family.add_metric([str(reason)], float(count))
            yield family
        buckets = health.get("staleness_hist")
        if isinstance(buckets, list) and buckets:
            from swarmnode.health import bucket_label

            family = CounterMetricFamily(STALENESS_METRIC, "groups trained on, by staleness bucket (versions)",
                                         labels=["bucket"])
            for index, count in enumerate(buckets):
                family.add_metric([bucket_label(index)], float(count))
            yield family
        peers, scores = health.get("verified_peers"), health.get("verified_mismatch")
        if isinstance(peers, list) and isinstance(scores, list) and peers:
            family = GaugeMetricFamily(MISMATCH_METRIC, "spot-checked samplers' mean |claimed - recomputed| "
                                       "behaviour log-prob per token (moving average)", labels=["sampler"])
            for peer, score in zip(peers, scores):
                family.add_metric([str(peer)], float(score))
            yield family


def serve_metrics(port: int, get_health: Callable[[], dict], role: str, addr: str = "127.0.0.1") -> int:
    """Serve `/metrics` for this node on `port` (0 = any free port) in a daemon thread; returns the port."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(HealthCollector(get_health, role))
    server, _thread = start_http_server(port, addr=addr, registry=registry)
    return server.server_address[1]
