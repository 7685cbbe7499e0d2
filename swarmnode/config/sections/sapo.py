"""The `sapo` section: own-policy mode, where every node samples and trains its own policy."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from swarmnode.config.sections.base import Section


class SapoConfig(Section):
    """`mode: sapo` (SAPO/HDEE): every node trains its own policy on I local + J external groups shared as text."""

    local_groups: int = Field(4, ge=0, le=4096, description="I: own groups per training step (also generated)")
    external_groups: int = Field(4, ge=0, le=4096, description="J: groups from peers per training step")
    max_groups_per_peer: int = Field(2, ge=1, le=4096, description="most groups one peer puts in one batch")
    external_weighting: Literal["on_policy", "sender_likelihood"] = Field(
        "on_policy",
        description="behaviour probability of external text: the current policy (SAPO, ratio 1) or "
        "the sender's sequence likelihood (GEPO-style)",
    )
    pool_per_peer: int = Field(16, ge=1, le=100_000, description="newest groups kept per peer until used")
    max_external_age: float = Field(120.0, gt=0, description="seconds an external group stays usable")
    external_wait: float = Field(1.0, ge=0, le=600, description="seconds a step waits for peers' groups to make up J")
    max_completion_chars: int = Field(
        4096, ge=1, le=1 << 20, description="longest completion text accepted from a peer"
    )
    max_prompt_chars: int = Field(8192, ge=1, le=1 << 20, description="longest prompt text accepted from a peer")
    plausibility_check: bool = Field(
        True,
        description="refuse a peer's group with a completion the own policy "
        "finds implausible: mean per-token log-prob below the own samples' quantile less the margin",
    )
    plausibility_quantile: float = Field(
        0.01,
        ge=0,
        lt=1,
        description="quantile of the own latest completions' mean per-token log-probs that sets the floor",
    )
    plausibility_margin: float = Field(2.0, ge=0, le=100, description="nats per token below that quantile allowed")
    plausibility_window: int = Field(512, ge=1, le=1_000_000, description="own latest completions the floor is set by")
    plausibility_min_samples: int = Field(
        16,
        ge=1,
        le=1_000_000,
        description="own completions needed to set the floor (peers' groups wait in the pool until then)",
    )
    distrust_refused_share: float = Field(
        0.25,
        ge=0,
        le=1,
        description="a peer with more than this share of its "
        "last 32 checked groups (8 at least) refused as implausible gets no place in batches for distrust_seconds",
    )
    distrust_seconds: float = Field(300.0, gt=0, le=86_400, description="how long a distrusted peer stays so")

    @model_validator(mode="after")
    def _some_groups(self) -> SapoConfig:
        if self.local_groups + self.external_groups < 1:
            raise ValueError("sapo.local_groups + sapo.external_groups must be at least 1")
        if self.plausibility_min_samples > self.plausibility_window:
            raise ValueError("sapo.plausibility_min_samples must be at most sapo.plausibility_window")
        return self
