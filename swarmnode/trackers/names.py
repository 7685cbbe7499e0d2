"""What a node reports to its trackers: TRL's metric names where a figure means what TRL's does, the swarm's own
under `swarm/` (learners) and `sapo/` (SAPO nodes), the held-out evaluation under `eval/`.

The table (docs/trackers.md shows the same): TRL's name <- the steps file's key.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from swarmnode.staleness import bucket_label

# TRL's GRPOTrainer names <- the step record's keys (a key a step does not have is left out)
TRL_NAMES = {
    "reward": "reward_mean",
    "reward_std": "reward_std",
    "frac_reward_zero_std": "zero_signal_fraction",
    "kl": "ref_kl",  # TRL's kl: the policy's KL to the reference model (with beta > 0)
    "entropy": "learner_entropy",  # the policy's own mean token entropy, as TRL computes it
    "clip_ratio/region_mean": "clip_fraction",
    "completions/mean_length": "completion_length_mean",
    "loss": "loss",
    "grad_norm": "grad_norm",
    "learning_rate": "learning_rate",
}
# the swarm's figures of one step <- the step record's keys
SWARM_NAMES = {
    "swarm/version": "version",
    "swarm/sampler_kl": "kl",  # KL(behaviour || learner) per token: how far the samplers' policies were
    "swarm/sampling_entropy": "entropy",  # the behaviour policies' entropy per token
    "swarm/pg_loss": "pg_loss",
    "swarm/is_weight_mean": "is_weight_mean",
    "swarm/is_weight_var": "is_weight_var",
    "swarm/is_weight_max": "is_weight_max",
    "swarm/ratio_peqq_var": "ratio_peqq_var",
    "swarm/advantage_abs_mean": "advantage_abs_mean",
    "swarm/staleness/mean": "staleness_mean",
    "swarm/staleness/median": "staleness_median",
    "swarm/staleness/max": "staleness_max",
    "swarm/groups_drawn": "groups",
    "swarm/groups_trained": "groups_trained",
    "swarm/groups_received": "groups_received",
    "swarm/groups_refused": "groups_rejected",
    "swarm/groups_dropped_stale": "dropped_stale",
    "swarm/groups_self_made": "groups_self_made",
    "swarm/buffer_size": "buffer_size",
    "swarm/step_time": "step_time",
    "swarm/idle_seconds": "idle_seconds",
}
# a SAPO node's own figures <- its step record's keys
SAPO_NAMES = {
    "sapo/own_reward": "own_reward",
    "sapo/external_groups_in_step": "step_external_groups",
    "sapo/local_groups": "local_groups",
    "sapo/external_groups": "external_groups",
    "sapo/reward_lies": "reward_lies",
    "sapo/groups_received": "groups_received",
    "sapo/groups_sent": "groups_sent",
    "sapo/plausibility_floor": "plausibility_floor",
}
# the held-out evaluation's figures <- the keys `swarmnode.node.held_out` adds to a step record
EVAL_NAMES = {
    "eval/reward": "eval_reward",
    "eval/pass_at_k": "eval_pass_at_k",
    "eval/exact": "eval_exact",
    "eval/best_reward": "eval_best",
    "eval/version": "eval_version",
}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def renamed(record: Mapping[str, Any], names: Mapping[str, str]) -> dict[str, float]:
    """{tracker name: value} for each key of `names` whose record value is a number."""
    return {name: float(record[key]) for name, key in names.items() if _number(record.get(key))}


def counts(prefix: str, values: Mapping[str, Any] | None) -> dict[str, float]:
    """`<prefix>/<key>` for each numeric entry of `values` (groups refused by reason, ...)."""
    return {f"{prefix}/{k}": float(v) for k, v in (values or {}).items() if _number(v)}


class StepMetrics:
    """Turns a node's step records into tracker reports: every `every` steps one report, with groups/s and
    completion tokens/s over the steps since the last report (`num_generations` rows per group)."""

    def __init__(self, role: str, num_generations: int, every: int = 1) -> None:
        self.role, self.num_generations, self.every = role, num_generations, max(1, int(every))
        self.since = time.monotonic()
        self.groups = self.tokens = 0.0
        self.steps = 0

    def step(self, record: Mapping[str, Any], refused: Mapping[str, Any] | None = None) -> dict[str, float] | None:
        """This step's report, or None between reports. `refused`: groups refused so far, by reason."""
        trained = float(record.get("groups_trained") or record.get("groups") or 0.0)
        self.groups += float(record.get("groups") or trained)
        self.tokens += trained * self.num_generations * float(record.get("completion_length_mean") or 0.0)
        self.steps += 1
        if self.steps % self.every and "eval_reward" not in record:  # an evaluation is reported when it lands
            return None
        now = time.monotonic()
        elapsed, self.since = max(now - self.since, 1e-9), now
        out = renamed(record, TRL_NAMES) | renamed(record, EVAL_NAMES)
        if self.role == "sapo":
            out |= renamed(record, SAPO_NAMES) | counts("sapo/groups_refused", record.get("refused"))
        else:
            out |= renamed(record, SWARM_NAMES) | counts("swarm/groups_refused", refused)
            samplers = record.get("sampler_ids")
            if isinstance(samplers, list):
                out["swarm/samplers_contributing"] = float(len(samplers))
            hist = record.get("staleness_hist")
            for i, n in enumerate(hist if isinstance(hist, list) else []):
                out[f"swarm/staleness/bucket_{bucket_label(i)}"] = float(n)
        prefix = "sapo" if self.role == "sapo" else "swarm"
        out[f"{prefix}/groups_per_s"] = self.groups / elapsed
        out[f"{prefix}/tokens_per_s"] = self.tokens / elapsed
        self.groups = self.tokens = 0.0
        return out
