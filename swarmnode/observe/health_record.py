"""One typed health record per role: the single definition of every health field.

Each field is declared once, below, with its type, help text and (when it has one) its Prometheus metric and
kind. Everything else is derived from these classes: the fields as the outputs see them (`health_fields`), the
Prometheus families (`swarmnode.observe.metrics`), the `health` part of the status JSON schema
(`swarmnode.observe.status_schema`), the DHT form (`record_health` in `swarmnode.observe.health`) and the tables of
docs/status-and-metrics.md (`health_tables`, checked by tests/test_health_record.py). Setting a key no record
declares raises `UnknownHealthKey`, so a renamed key fails loudly instead of vanishing.

No imports beyond the standard library: the loss, the loops and the CLI may all read it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar


class UnknownHealthKey(KeyError):
    """A health key that no role's record declares (a typo or a rename the records did not follow)."""


def _field(
    help: str,
    *,
    metric: str | None = None,
    kind: str = "gauge",
    label: str | None = None,
    labels_from: str | None = None,
    minimum: float | None = None,
    maximum: float | None = None,
    wire: bool = True,
) -> Any:
    """A health field: `help` text; `metric` (+ `kind`, and `label` for a labelled family whose label values are
    a dict's keys, staleness buckets, or the aligned list `labels_from`) if Prometheus shows it;
    `minimum`/`maximum` for the JSON schema; `wire=False` for what stays local (not in the DHT record)."""
    return dataclasses.field(
        default=None,
        metadata={
            "help": help,
            "metric": metric,
            "kind": kind,
            "label": label,
            "labels_from": labels_from,
            "minimum": minimum,
            "maximum": maximum,
            "wire": wire,
        },
    )


def _tokens_per_s() -> Any:
    """The generation rate field: samplers and SAPO nodes generate."""
    return _field("tokens generated per second", metric="swarmnode_tokens_per_second", minimum=0)


@dataclasses.dataclass
class NodeHealth:
    """What every node's record holds. Fields left at None are not set yet (left out of every output)."""

    ROLES: ClassVar[tuple[str, ...]] = ()

    uptime: float | None = _field("seconds since the node started", metric="swarmnode_uptime_seconds", minimum=0)
    reachability: str | None = _field(
        "who can dial this node: public, relayed (through a bootstrap's relay), "
        "client-only (nobody: it works over its own connections), unknown",
        metric="swarmnode_reachability",
        label="reachability",
    )

    def update(self, **values: Any) -> None:
        """Set fields by name; an unknown name raises `UnknownHealthKey`."""
        known = {f.name for f in dataclasses.fields(self)}
        for key, value in values.items():
            if key not in known:
                raise UnknownHealthKey(f"{type(self).__name__} has no health field {key!r}")
            setattr(self, key, value)

    def as_dict(self) -> dict[str, Any]:
        """The fields that are set (what /metrics renders and `record_health` shrinks for the DHT)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if getattr(self, f.name) is not None}


@dataclasses.dataclass
class BootstrapHealth(NodeHealth):
    """A bootstrap peer's record."""

    ROLES: ClassVar[tuple[str, ...]] = ("bootstrap",)

    peers_seen: int | None = _field("live peers in the run's DHT", metric="swarmnode_peers_seen", minimum=0)
    peers_by_reachability: dict[str, int] | None = _field(
        "live peers by reachability (public, relayed: holding a relay reservation, client-only, unknown)",
        metric="swarmnode_peers_by_reachability",
        label="reachability",
        wire=False,
    )


@dataclasses.dataclass
class HolderHealth(NodeHealth):
    """What samplers and learners share: the version held and the weight chunks served to peers."""

    version: int | None = _field(
        "policy version this node holds (learner: publishes)", metric="swarmnode_policy_version", minimum=-1
    )
    served_mb: float | None = _field(
        "MB of weight chunks served to peers", metric="swarmnode_weight_served_mb", kind="counter", minimum=0
    )
    serve_mb_s: float | None = _field(
        "MB/s of weight chunks served, last 30 s", metric="swarmnode_weight_serve_mb_per_second", minimum=0
    )
    disk_full: str | None = _field(
        "why the node writes no new version or checkpoint now: the full directory and "
        "the space it needs (empty: there is room)",
        wire=False,
    )


@dataclasses.dataclass
class SamplerHealth(HolderHealth):
    """A sampler's record."""

    ROLES: ClassVar[tuple[str, ...]] = ("sampler",)

    lag: int | None = _field("versions behind the newest announced version", metric="swarmnode_version_lag", minimum=0)
    rollouts_per_s: float | None = _field(
        "rollout groups generated per second", metric="swarmnode_rollouts_per_second", minimum=0
    )
    tokens_per_s: float | None = _tokens_per_s()
    groups_sent: int | None = _field("rollout groups sent", metric="swarmnode_groups_sent", kind="counter", minimum=0)
    groups_acked: int | None = _field(
        "rollout groups acknowledged by a learner", metric="swarmnode_groups_acked", kind="counter", minimum=0
    )
    groups_dropped: int | None = _field(
        "rollout groups that reached no learner (outbox full, or no learner known)",
        metric="swarmnode_groups_dropped",
        kind="counter",
        minimum=0,
    )
    groups_wasted: int | None = _field(
        "rollout groups made that no learner took (refused, dropped, or never acknowledged)",
        metric="swarmnode_groups_wasted",
        kind="counter",
        minimum=0,
    )
    paused: str | None = _field(
        "why generation is paused: 'too stale', 'no learner', 'undelivered: ...' (groups "
        "made and none acknowledged) (empty: it is not)"
    )
    prompts_told: int | None = _field(
        "prompts its learners told it came back all-solved or all-failed (the ack's `s`), now mostly redrawn",
        metric="swarmnode_prompts_told_saturated",
        minimum=0,
    )
    prompts_redrawn: int | None = _field(
        "prompt draws replaced because the prompt was told all-solved or all-failed",
        metric="swarmnode_prompts_redrawn",
        kind="counter",
        minimum=0,
    )
    fetch_mb_s: float | None = _field(
        "rate of the last weight fetch (MB/s fetched)", metric="swarmnode_weight_fetch_mb_per_second", minimum=0
    )
    fetch_seconds: float | None = _field(
        "wall time of the last weight fetch", metric="swarmnode_weight_fetch_seconds", minimum=0
    )


@dataclasses.dataclass
class LearnerHealth(HolderHealth):
    """A learner's record: the last step's figures, counters, and short per-version histories."""

    ROLES: ClassVar[tuple[str, ...]] = ("learner",)

    step: int | None = _field("optimiser steps taken", metric="swarmnode_learner_steps", kind="counter", minimum=0)
    reward_mean: float | None = _field("mean recomputed reward of the last step", metric="swarmnode_reward_mean")
    reward_std: float | None = _field("reward standard deviation of the last step")
    kl: float | None = _field(
        "KL(behaviour || learner) per token, (r-1)-log r estimate, last step", metric="swarmnode_learner_sampler_kl"
    )
    is_weight_var: float | None = _field(
        "the loss's own importance-weight variance, last step", metric="swarmnode_is_weight_variance", minimum=0
    )
    ratio_peqq_var: float | None = _field(
        "the GEPO paper's IS-weight variance (p_i/E_q[q], 8-row micro-batches), last step",
        metric="swarmnode_ratio_peqq_variance",
        minimum=0,
    )
    entropy: float | None = _field(
        "sampling policy entropy per token (nats), last step", metric="swarmnode_policy_entropy", minimum=0
    )
    clip_frac: float | None = _field(
        "fraction of clipped importance weights, last step", metric="swarmnode_clip_fraction", minimum=0, maximum=1
    )
    masked_frac: float | None = _field(
        "share of the last step's rows (tokens at token level) the off-policy corrections left out of the loss "
        "(learner.vllm_importance_sampling_*, off_policy_mask_threshold, mask_truncated_completions)",
        metric="swarmnode_masked_fraction",
        minimum=0,
        maximum=1,
    )
    grad_norm: float | None = _field("gradient norm before clipping, last step", metric="swarmnode_grad_norm")
    staleness_max: float | None = _field(
        "largest staleness in the last batch (versions)", metric="swarmnode_staleness_max"
    )
    staleness_mean: float | None = _field("mean staleness in the last batch (versions)")
    step_time: float | None = _field("wall time of the last learner step", metric="swarmnode_step_seconds", minimum=0)
    max_staleness: int | None = _field("the learner's staleness bound (older groups are dropped)", minimum=0)
    dropped_stale: int | None = _field(
        "groups dropped as too stale", metric="swarmnode_dropped_stale", kind="counter", minimum=0
    )
    groups_received: int | None = _field(
        "rollout groups accepted", metric="swarmnode_groups_received", kind="counter", minimum=0
    )
    groups_rejected: int | None = _field("rollout groups refused, all reasons", minimum=0)
    stalled: str | None = _field(
        "why the learner takes no step while groups arrive: zero-signal groups, prompts or completions cut at "
        "their caps (`observe.stall`; empty: it steps)"
    )
    idle_seconds: float | None = _field(
        "seconds the learner waited for enough rollout groups to step, cumulative",
        metric="swarmnode_learner_idle_seconds",
        kind="counter",
        minimum=0,
    )
    staleness_hist: list[int] | None = _field(
        "groups trained on, by staleness bucket (0, 1, 2-3, 4-7, ...), cumulative",
        metric="swarmnode_staleness_groups",
        kind="counter",
        label="bucket",
        minimum=0,
    )
    reward_versions: list[int] | None = _field("the last versions, aligned with the histories", minimum=0)
    reward_history: list[float | None] | None = _field("mean reward per version")
    kl_history: list[float | None] | None = _field("mean KL per version")
    is_var_history: list[float | None] | None = _field("mean importance-weight variance per version")
    rejected: dict[str, int] | None = _field(
        "rollout groups rejected, by reason",
        metric="swarmnode_groups_rejected",
        kind="counter",
        label="reason",
        wire=False,
    )
    eval_reward: float | None = _field(
        "held-out reward (mean@k) of the last evaluated version (learner.eval_every)", metric="swarmnode_heldout_reward"
    )
    eval_pass_at_k: float | None = _field(
        "held-out prompts with a full-reward completion among k, last evaluated version",
        metric="swarmnode_heldout_pass_at_k",
        minimum=0,
        maximum=1,
    )
    eval_best: float | None = _field(
        "the best held-out reward of this learner's evaluations", metric="swarmnode_heldout_best_reward"
    )
    eval_version: int | None = _field(
        "the version the last held-out figures are of", metric="swarmnode_heldout_version", minimum=-1
    )
    eval_history: list[float] | None = _field("held-out reward of the last evaluations, oldest first")
    rejected_reasons: list[str] | None = _field("the most frequent rejection reasons")
    rejected_counts: list[int] | None = _field("their counts, aligned with rejected_reasons", minimum=0)
    invalid_peers: list[str] | None = _field("peers that recently sent invalid rollouts")
    verified_peers: list[str] | None = _field("spot-checked samplers, the worst first")
    verified_mismatch: list[float] | None = _field(
        "spot-checked samplers' mean |claimed - recomputed| behaviour log-prob per token (moving average), aligned "
        "with verified_peers",
        metric="swarmnode_sampler_logprob_mismatch",
        label="sampler",
        labels_from="verified_peers",
        minimum=0,
    )
    verified_kl: list[float] | None = _field(
        "spot-checked samplers' KL estimate between claimed and recomputed behaviour log-probs per token (moving "
        "average), aligned with verified_peers",
        metric="swarmnode_sampler_logprob_kl",
        label="sampler",
        labels_from="verified_peers",
        minimum=0,
    )
    averaging_rounds: int | None = _field(
        "several learners: averaging rounds completed", metric="swarmnode_averaging_rounds", kind="counter", minimum=0
    )
    averaging_failures: int | None = _field(
        "several learners: averaging rounds that failed (no group in time, a "
        "peer lost mid-round, part of the result lost); training went on locally",
        metric="swarmnode_averaging_failures",
        kind="counter",
        minimum=0,
    )
    averaging_learners: int | None = _field(
        "several learners: live learners of the run this learner sees, itself included", minimum=1
    )
    averaging_group: int | None = _field(
        "several learners: learners in the last completed round", metric="swarmnode_averaging_group_size", minimum=2
    )
    averaging_seconds: float | None = _field(
        "several learners: wall time of the last completed round (finding the group included)",
        metric="swarmnode_averaging_seconds",
        minimum=0,
    )
    averaging_mb: float | None = _field(
        "several learners: MB this learner sent plus received in the last round (from the tensor sizes)", minimum=0
    )
    averaging_outer_lr: float | None = _field(
        "several learners: the outer step the last completed round took "
        "(learner.averaging_outer_lr, or 1: the plain mean)",
        minimum=0,
    )


@dataclasses.dataclass
class SapoHealth(LearnerHealth):
    """A node in `mode: sapo` (it samples and trains its own policy; it advertises as a learner)."""

    ROLES: ClassVar[tuple[str, ...]] = ("sapo",)

    mode: str | None = _field("sapo: the node's mode")
    tokens_per_s: float | None = _tokens_per_s()
    local_groups: int | None = _field(
        "sapo: own groups trained on", metric="swarmnode_sapo_local_groups", kind="counter", minimum=0
    )
    external_groups: int | None = _field(
        "sapo: peers' text groups trained on", metric="swarmnode_sapo_external_groups", kind="counter", minimum=0
    )
    reward_lies: int | None = _field(
        "sapo: peers' groups whose claimed rewards were false",
        metric="swarmnode_sapo_reward_lies",
        kind="counter",
        minimum=0,
    )
    external_peers: list[str] | None = _field("sapo: whose groups the node trained on (most first)")
    external_counts: list[int] | None = _field("sapo: how many, aligned with external_peers", minimum=0)
    implausible_groups: int | None = _field(
        "sapo: peers' groups refused as implausible under the own policy",
        metric="swarmnode_sapo_implausible_groups",
        kind="counter",
        minimum=0,
    )
    implausible_peers: list[str] | None = _field("sapo: whose groups were refused as implausible (most first)")
    implausible_counts: list[int] | None = _field("sapo: how many, aligned with implausible_peers", minimum=0)
    distrusted_peers: list[str] | None = _field("sapo: peers whose groups are not taken now (too many refused)")
    plausibility_floor: float | None = _field(
        "sapo: lowest mean per-token log-prob a peer's completion may have", metric="swarmnode_sapo_plausibility_floor"
    )


RECORDS: tuple[type[NodeHealth], ...] = (SamplerHealth, LearnerHealth, SapoHealth, BootstrapHealth)
ROLE_RECORDS: dict[str, type[NodeHealth]] = {role: cls for cls in RECORDS for role in cls.ROLES}
