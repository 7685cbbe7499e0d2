"""The per-sampler anomaly signal of spot checks: each learner reports, for the samplers it checked, the KL
estimate between their claimed behaviour log-probs and its own (`verified_kl`, nats per token, a moving average);
a sampler far above the run's other samplers is named, even while every one of its checked groups passes, and so is
one above an absolute bound whatever the others' KL (several liars cannot hide each other by raising the median)."""

from __future__ import annotations

import statistics
from typing import Any

KL_RATIO = 10.0  # a sampler is named at this many times the median KL of the learner's other checked samplers
KL_FLOOR = 0.01  # ... and above this (an honest fp32 sampler's KL is ~0; a bf16 one's, about mean(d^2) / 2, is
# ~1e-3 nats per token at a per-token mean |d| of 0.03)
KL_ABSOLUTE = 0.05  # a sampler is named above this whatever the others' KL: 50x a bf16 sampler's, and the most a
# lie inside the check's limits reaches is ~t^2 / 2 per token at t = 0.1 nats on every token, 0.005 (docs/trust.md)


def sampler_kl(health: dict[str, Any]) -> list[tuple[str, float, float | None]]:
    """(sampler id, KL, KL / median of the others' KL or None with no others) from a learner's health record."""
    peers, kls = health.get("verified_peers") or [], health.get("verified_kl") or []
    pairs = [(str(p), float(k)) for p, k in zip(peers, kls)]
    out = []
    for peer, kl in pairs:
        others = [k for p, k in pairs if p != peer]
        median = statistics.median(others) if others else None
        out.append((peer, kl, kl / max(median, KL_FLOOR / KL_RATIO) if median is not None else None))
    return out


def kl_alerts(learners: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One warning per sampler whose KL is over `KL_ABSOLUTE`, or over `KL_FLOOR` and `KL_RATIO` x its learner's
    other samplers'."""
    alerts = []
    for learner in learners:
        for peer, kl, ratio in sampler_kl(learner.get("health", {})):
            relative = kl > KL_FLOOR and ratio is not None and ratio >= KL_RATIO
            if relative or kl > KL_ABSOLUTE:
                why = f"{ratio:.0f}x the run's other samplers" if relative else f"over the bound of {KL_ABSOLUTE}"
                alerts.append(
                    {
                        "kind": "sampler_kl",
                        "severity": "warning",
                        "peer_id": peer,
                        "message": f"sampler {peer[-8:]}: its claimed log-probs are {kl:.3g} nats per token "
                        f"(KL) from learner {learner['peer_id'][-8:]}'s, {why}",
                    }
                )
    return alerts
