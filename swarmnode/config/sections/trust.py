"""The `trust` section: whose weights a sampler loads, and the checks of each peer's records."""

from __future__ import annotations

from pydantic import Field, field_validator

from swarmnode.config.addresses import is_peer_id
from swarmnode.config.sections.base import Section


class TrustConfig(Section):
    """Whom a node trusts and how a learner checks samplers (`swarmnode.learner.verify`; docs/trust.md)."""

    learner_keys: list[str] = Field(default_factory=list, description="peer ids allowed to publish weights")

    @field_validator("learner_keys")
    @classmethod
    def _peer_ids(cls, value: list[str]) -> list[str]:
        bad = [key for key in value if not is_peer_id(key)]
        if bad:  # a typo here would only show as "no learner" much later
            raise ValueError(
                f"{bad[0]!r} is not a peer id (`swarmnode identity --identity-path LEARNER_KEY` prints a learner's)"
            )
        return value

    accept_any_learner: bool = Field(
        False,
        description="insecure: with no learner_keys, samplers load weights "
        "whichever key announces them (throwaway local runs only)",
    )
    verify_fraction: float = Field(
        0.05,
        ge=0,
        le=1,
        description="share of a trusted sampler's groups whose behaviour log-probs the learner "
        "recomputes (0 = no checks, claims trusted)",
    )
    verify_tolerance: float = Field(
        0.1,
        gt=0,
        le=100,
        description="t: a checked group is refused and its sampler caught when its median "
        "|claimed - recomputed| log-prob per token exceeds t, its or a completion's mean (signed or absolute) "
        "exceeds about t, or over 1 % of its tokens exceed 4t (docs/trust.md)",
    )
    verify_keep_bytes: int = Field(
        4 << 30,
        ge=0,
        description="CPU memory for the published versions kept for checks (adapters alone under "
        "LoRA); the learner accepts only claims it can check, so a smaller window narrows sync.max_staleness",
    )
    probation_checks: int = Field(
        8,
        ge=0,
        le=100_000,
        description="clean checks a new sampler key needs before its check rate starts "
        "falling from 1 towards verify_fraction (rate = probation_checks / clean checks)",
    )
    unchecked_share: float = Field(
        0.5,
        gt=0,
        le=1,
        description="most of a step's groups one sampler key may pass unchecked; its further "
        "groups wait for a later step, or are checked when the step needs them (1 = no limit)",
    )
    probation_share: float = Field(
        0.25,
        gt=0,
        le=1,
        description="most of a step's groups that may be checks of keys checked at rate 1 "
        "(on probation or caught; at least 1 per step); their further groups wait in the buffer",
    )
    seeded_groups: bool = Field(
        False,
        description="on for a run whose owner sets it (the card pins it): samplers take each group's prompt and "
        "sampling randomness from a seed of (run, key, start, counter) and learners refuse groups without one or "
        "with another prompt, replay a checked group's tokens from their own logits and distrust a key that keeps "
        "back more than gap_share of its groups (docs/trust.md)",
    )
    draw_tolerance: float = Field(
        0.02,
        gt=0,
        le=0.5,
        description="a replayed token counts as drawn when its seeded uniform lies within this much of the "
        "token's interval of the learner's CDF (engines' logits differ slightly)",
    )
    gap_share: float = Field(
        0.25,
        gt=0,
        le=1,
        description="most of a sampler key's last gap_window counters that may be missing (groups made and "
        "kept back) before the learner refuses its groups",
    )
    gap_window: int = Field(256, ge=16, le=1_000_000, description="counters of a key over which gap_share is judged")
    accept_unreplayed: bool = Field(
        False,
        description="accept seeded groups an engine could not draw replayably (vLLM): their prompts and "
        "counters are checked, their tokens only scored",
    )
    typicality_z: float = Field(
        12.0,
        ge=0,
        description="a trained group whose tokens are this many standard deviations less likely than the "
        "policy's entropy says (plus a few nats) marks its sampler caught (0: off)",
    )
