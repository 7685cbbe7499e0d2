"""Simulated swarms for the dashboard's unit tests and bench: real signed PeerRecords with full health dicts,
built with the node's own health helpers (record_health, StalenessHistogram, VersionSeries), encoded and decoded
as the DHT would carry them. No network."""

from __future__ import annotations

import random

from swarmnode.config import load_config
from swarmnode.identity import Identity
from swarmnode.observe.health import HISTORY_LEN, StalenessHistogram, VersionSeries, record_health
from swarmnode.observe.status import status_document
from swarmnode.protocol.peer import PeerRecord

HARDWARE = {"gpu": None, "gpu_count": 0, "gpu_mem_gb": 0.0, "cpus": 2, "ram_gb": 7.8}
GPU = {"gpu": "NVIDIA H100 80GB HBM3", "gpu_count": 1, "gpu_mem_gb": 79.2, "cpus": 16, "ram_gb": 125.0}


def learner_health(
    version: int, rng: random.Random, rewards: list[float] | None = None, invalid_peers: list[str] | None = None
) -> dict:
    """A learner's full health dict (as LearnerRole keeps it) after `version` steps."""
    series, hist = VersionSeries(), StalenessHistogram()
    start = max(0, version - HISTORY_LEN + 1)
    for i, v in enumerate(range(start, version + 1)):
        reward = rewards[i] if rewards is not None and i < len(rewards) else 0.2 + 0.5 * v / max(1, version)
        series.add(v, {"reward_mean": reward, "kl": 0.01 + rng.random() * 0.01, "is_weight_var": rng.random() * 0.1})
        hist.add(rng.choice([0, 1, 1, 2, 3, 5, 9, 17]) for _ in range(8))
    return {
        "version": version,
        "step": version,
        "reward_mean": reward,
        "reward_std": 0.21,
        "kl": 0.012,
        "is_weight_var": 0.05,
        "ratio_peqq_var": 0.012,
        "entropy": 1.4,
        "clip_frac": 0.27,
        "grad_norm": 1.3,
        "staleness_max": 17.0,
        "staleness_mean": 2.2,
        "step_time": 0.41,
        "dropped_stale": 3,
        "groups_received": 8 * version,
        "groups_rejected": 5,
        "max_staleness": 16,
        "uptime": 120.5,
        "staleness_hist": hist.counts,
        **series.as_health(),
        "rejected": {"duplicate": 2, "stale": 3, "invalid": 1 if invalid_peers else 0},
        "invalid_peers": list(invalid_peers or []),
    }


def sampler_health(version: int, lag: int, rng: random.Random) -> dict:
    return {
        "version": version,
        "lag": lag,
        "rollouts_per_s": round(1 + rng.random() * 3, 3),
        "tokens_per_s": round(200 + rng.random() * 800, 2),
        "groups_sent": 100,
        "groups_acked": 98,
        "groups_dropped": 0,
        "paused": "",
        "uptime": 100.0,
    }


def simulated_records(
    n: int = 50,
    *,
    learners: int = 1,
    newest: int = 40,
    seed: int = 0,
    rewards: list[float] | None = None,
    invalid_peers: list[str] | None = None,
    lags: list[int] | None = None,
) -> list[PeerRecord]:
    """`n` peer records: a bootstrap, `learners` learners at `newest`, the rest samplers lagging 0..3 versions."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        me = Identity.generate()
        if i == 0:
            role, version, health, hw = "bootstrap", -1, {"uptime": 3600.0, "peers_seen": n}, HARDWARE
        elif i <= learners:
            role, version, hw = "learner", newest, GPU
            health = learner_health(newest, rng, rewards, invalid_peers)
        else:
            lag = lags[i - learners - 1] if lags and i - learners - 1 < len(lags) else rng.choice([0, 0, 1, 2, 3])
            role, version, hw = "sampler", newest - lag, HARDWARE
            health = sampler_health(version, lag, rng)
        record = PeerRecord.create(
            me,
            role=role,
            version=version,
            versions=[version] if version >= 0 else [],
            hardware=hw,
            throughput=float(health.get("tokens_per_s", 0.0)),
            software="swarmnode/0.1.0",
            health=record_health(health),
        )
        out.append(PeerRecord.decode(record.encode()))
    return out


def simulated_status(n: int = 50, **kwargs) -> dict:
    """The status document of a simulated swarm of `n` peers (as `status --json` prints it, before JSON)."""
    cfg = load_config("tiny-cpu", ["run_id=sim-run"])
    return status_document(cfg, simulated_records(n, **kwargs))
