"""Swarm health as data: how a node's health record rides in the PeerRecord, and how the swarm's health
(summary, versions, alerts) is derived from the peers' records. Pure functions, no network.

A node keeps its role's typed record (`swarmnode.observe.health_record`: what `/metrics` renders); `record_health`
turns it into the small form the DHT carries (scalars and short lists, see `swarmnode.protocol.peer.small_map`).
`status --json` and the dashboard read the peers' records and call `swarm_summary` and `find_alerts`.
"""

from __future__ import annotations

import logging
import math
import time
from collections import OrderedDict, deque
from typing import Any

from swarmnode.observe.health_fields import FIELDS, WIRE_FIELDS, check_value
from swarmnode.observe.health_record import NodeHealth, UnknownHealthKey
from swarmnode.observe.sampler_kl import kl_alerts
from swarmnode.protocol.reachability import HEALTH_KEY as REACHABILITY
from swarmnode.protocol.reachability import RELAYED
from swarmnode.staleness import MAX_BUCKETS, StalenessHistogram, bucket_label, bucket_of, too_stale  # noqa: F401 (re-export)

logger = logging.getLogger(__name__)
HISTORY_LEN = 32  # versions kept in a learner's reward/KL/IS-variance history
EVAL_WINDOW, EVAL_DROP = 2, 0.3  # held-out alert: the mean of 2 evaluations 30 % below the best such mean
MAX_REASONS = 12
MAX_INVALID_PEERS = 4

_UNDECLARED: set[str] = set()  # keys left out of a non-strict record_health, logged once each
MAX_VERIFIED_PEERS = 8  # samplers whose spot-check score a learner's record carries (the worst first)


class RateMeter:
    """The rate of a growing total (bytes served, ...) over about the last `window` seconds."""

    def __init__(self, window: float = 30.0) -> None:
        self.window = window
        self.samples: deque[tuple[float, float]] = deque()

    def update(self, total: float, now: float | None = None) -> float:
        """Record the total now; its rate per second since the oldest sample still inside the window."""
        now = time.monotonic() if now is None else now
        self.samples.append((now, total))
        while len(self.samples) > 2 and now - self.samples[1][0] >= self.window:
            self.samples.popleft()
        t0, v0 = self.samples[0]
        return (total - v0) / (now - t0) if now > t0 else 0.0


class VersionSeries:
    """Per-version means of a few per-step figures (reward, KL, IS variance), the last `HISTORY_LEN` versions."""

    FIELDS = {"reward_mean": "reward_history", "kl": "kl_history", "is_weight_var": "is_var_history"}

    def __init__(self, length: int = HISTORY_LEN) -> None:
        self.length = length
        self._sums: OrderedDict[int, dict[str, list[float]]] = OrderedDict()

    def add(self, version: int, figures: dict[str, Any]) -> None:
        slot = self._sums.setdefault(int(version), {k: [0.0, 0] for k in self.FIELDS})
        for key in self.FIELDS:
            value = figures.get(key)
            if isinstance(value, (int, float)) and math.isfinite(value):
                slot[key][0] += float(value)
                slot[key][1] += 1
        while len(self._sums) > self.length:
            self._sums.popitem(last=False)

    def as_health(self) -> dict[str, list]:
        """`reward_versions` plus one list per figure, aligned with it (None where a version had no value)."""
        out: dict[str, list] = {"reward_versions": list(self._sums)}
        for key, name in self.FIELDS.items():
            out[name] = [round(s[key][0] / s[key][1], 5) if s[key][1] else None for s in self._sums.values()]
        return out


def record_health(health: NodeHealth | dict[str, Any], *, strict: bool = True) -> dict[str, Any]:
    """The DHT form of a node's health: the wire fields whose values fit their type (non-finite numbers are left
    out), lists cut to their last `HISTORY_LEN` items, `rejected` (dict) as two parallel lists. A key no health
    record declares raises `UnknownHealthKey` (with `strict=False`, for a dict of a step's figures, it is left
    out and logged once)."""
    values = health.as_dict() if isinstance(health, NodeHealth) else health
    out: dict[str, Any] = {}
    for key, value in values.items():
        spec = WIRE_FIELDS.get(key)
        if spec is None:
            if key in FIELDS:  # declared, but kept local (wire=False), e.g. `rejected`
                continue
            if strict:
                raise UnknownHealthKey(f"no health record declares {key!r}")
            if key not in _UNDECLARED:
                _UNDECLARED.add(key)
                logger.info(
                    "health key %r is declared by no record (swarmnode.observe.health_record): not advertised", key
                )
            continue
        if value is None or not check_value(spec, value):
            continue
        out[key] = list(value)[-HISTORY_LEN:] if isinstance(value, (list, tuple)) else value
    rejected = values.get("rejected")
    if isinstance(rejected, dict) and rejected:
        top = sorted(rejected.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_REASONS]
        out["rejected_reasons"] = [str(k)[:40] for k, _ in top]
        out["rejected_counts"] = [int(v) for _, v in top]
    return out


def spot_check_health(scores: list[tuple[str, float, float]]) -> dict[str, list]:
    """A learner's spot-check scores (sampler id, mean |delta log-prob| per token, KL estimate per token) as
    three parallel lists."""
    return {
        "verified_peers": [peer for peer, _, _ in scores],
        "verified_mismatch": [round(float(score), 6) for _, score, _ in scores],
        "verified_kl": [round(float(kl), 6) for _, _, kl in scores],
    }


def rejected_by_reason(health: dict[str, Any]) -> dict[str, int]:
    """The `rejected` dict back from a record's two parallel lists (or the full dict if present)."""
    if isinstance(health.get("rejected"), dict):
        return {str(k): int(v) for k, v in health["rejected"].items()}
    reasons, counts = health.get("rejected_reasons") or [], health.get("rejected_counts") or []
    return {str(r): int(c) for r, c in zip(reasons, counts) if isinstance(c, (int, float))}


# ---------------------------------------------------------------------------------------------- swarm view


def _num(value: Any, default: float = 0.0) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def generates(role: str, health: dict[str, Any]) -> bool:
    """Whether a peer generates tokens: a sampler, or a SAPO node (it advertises as a learner)."""
    return role == "sampler" or health.get("mode") == "sapo"


def swarm_summary(peers: list[dict[str, Any]]) -> dict[str, Any]:
    """Newest version, swarm throughput and how many samplers hold each version, from peer summaries."""
    versions = [p["version"] for p in peers if p.get("version", -1) >= 0]
    holders: dict[str, int] = {}
    for p in peers:
        if p["role"] == "sampler" and p.get("version", -1) >= 0:
            holders[str(p["version"])] = holders.get(str(p["version"]), 0) + 1
    working = [p for p in peers if not (p.get("health") or {}).get("paused")]  # a paused sampler's last rate is old
    samplers = [p for p in working if p["role"] == "sampler"]
    generating = [p for p in working if generates(p["role"], p.get("health") or {})]
    return {
        "newest_version": max(versions, default=-1),
        "tokens_per_s": round(sum(_num(p.get("health", {}).get("tokens_per_s")) for p in generating), 2),
        "rollouts_per_s": round(sum(_num(p.get("health", {}).get("rollouts_per_s")) for p in samplers), 3),
        "versions": dict(sorted(holders.items(), key=lambda kv: -int(kv[0]))),
    }


def peer_lag(peer: dict[str, Any], newest: int) -> int | None:
    """Versions a sampler is behind `newest` (None for other roles or a sampler holding no version yet)."""
    if peer["role"] != "sampler" or peer.get("version", -1) < 0 or newest < 0:
        return None
    return max(0, newest - peer["version"])


def staleness_bound(peers: list[dict[str, Any]], default: int) -> int:
    """The run's `max_staleness`: the smallest bound its learners publish, else `default` (the reader's config)."""
    bounds = [int(_num(p.get("health", {}).get("max_staleness"), default)) for p in peers if p["role"] == "learner"]
    return min(bounds, default=default)


def reward_collapse(
    rewards: list[float], window: int = 3, drop: float = 0.5, min_best: float = 0.1
) -> tuple[float, float] | None:
    """(best, recent) if the mean of the last `window` rewards fell below (1 - drop) x the best such mean."""
    values = [float(r) for r in rewards if isinstance(r, (int, float)) and math.isfinite(r)]
    if len(values) < 2 * window:
        return None
    means = [sum(values[i : i + window]) / window for i in range(len(values) - window + 1)]
    best, recent = max(means), means[-1]
    if best >= min_best and recent < (1.0 - drop) * best:
        return round(best, 4), round(recent, 4)
    return None


def _alert(kind: str, severity: str, message: str, peer_id: str | None = None) -> dict[str, Any]:
    return {"kind": kind, "severity": severity, "peer_id": peer_id, "message": message}


def find_alerts(peers: list[dict[str, Any]], max_staleness: int) -> list[dict[str, Any]]:
    """What an operator must look at: no learner, samplers beyond the staleness bound (the learners' own, else
    `max_staleness`), peers sending invalid data (as the learners report them), a learner whose reward or
    held-out reward fell well below its best, a sampler whose claimed log-probs sit far from the learner's. Errors first."""
    alerts = []
    learners = [p for p in peers if p["role"] == "learner"]
    if not learners:
        alerts.append(_alert("no_learner", "error", "no learner in the run: nothing is being trained"))
    newest = max((p.get("version", -1) for p in peers), default=-1)
    bound = staleness_bound(peers, max_staleness)
    for p in peers:
        lag = peer_lag(p, newest)
        if lag is not None and too_stale(lag, bound):
            alerts.append(
                _alert(
                    "too_stale",
                    "warning",
                    f"sampler {p['peer_id'][-8:]} is {lag} versions behind "
                    f"(max_staleness {bound}): its rollouts are dropped",
                    p["peer_id"],
                )
            )
        paused = str(p.get("health", {}).get("paused") or "") if p["role"] == "sampler" else ""
        if paused.startswith("undelivered"):
            alerts.append(
                _alert(
                    "sampler_undelivered",
                    "warning",
                    f"sampler {p['peer_id'][-8:]} stopped generating: {paused} (its log says why and what to change)",
                    p["peer_id"],
                )
            )
    for learner in learners:
        health = learner.get("health", {})
        for bad in health.get("invalid_peers") or []:
            alerts.append(
                _alert(
                    "invalid_data",
                    "warning",
                    f"peer {str(bad)[-8:]} sent invalid rollouts to learner {learner['peer_id'][-8:]}",
                    str(bad),
                )
            )
        if health.get(REACHABILITY) == RELAYED:
            alerts.append(
                _alert(
                    "learner_relayed",
                    "warning",
                    f"learner {learner['peer_id'][-8:]} is reached only "
                    "through a relay: every group and weight fetch crosses the bootstrap (forward a "
                    "port to it, or run it on a host with a public address)",
                    learner["peer_id"],
                )
            )
        if health.get("stalled"):
            alerts.append(
                _alert(
                    "learner_stalled",
                    "warning",
                    f"learner {learner['peer_id'][-8:]}: {health['stalled']}",
                    learner["peer_id"],
                )
            )
        collapsed = reward_collapse(health.get("reward_history") or [])
        if collapsed:
            alerts.append(
                _alert(
                    "reward_collapse",
                    "error",
                    f"learner {learner['peer_id'][-8:]}: reward fell from {collapsed[0]:.3f} to {collapsed[1]:.3f}",
                    learner["peer_id"],
                )
            )
        held_out = reward_collapse(health.get("eval_history") or [], window=EVAL_WINDOW, drop=EVAL_DROP)
        if held_out:
            alerts.append(
                _alert(
                    "heldout_drop",
                    "error",
                    f"learner {learner['peer_id'][-8:]}: held-out reward fell from {held_out[0]:.3f} to "
                    f"{held_out[1]:.3f} (mean of {EVAL_WINDOW} evaluations; learner.eval_every)",
                    learner["peer_id"],
                )
            )
    alerts += kl_alerts(learners)  # a sampler whose claims sit far from the learner's (`observe.sampler_kl`)
    return sorted(alerts, key=lambda a: a["severity"] != "error")
