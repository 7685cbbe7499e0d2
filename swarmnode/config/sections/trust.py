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
