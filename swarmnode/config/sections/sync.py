"""The `sync` section: how a sampler follows the learners' versions, and simulated delays."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from swarmnode.config.sections.base import Section
from swarmnode.delay import parse_delay


class SyncConfig(Section):
    """Echo's two protocols and the staleness bound both sides respect."""

    mode: Literal["async", "pull"] = "async"
    max_staleness: int = Field(  # 64: GEPO needed no tighter bound up to 64 steps (bench/latency_sweep.py)
        64, ge=0, le=1_000_000, description="in learner versions"
    )
    simulate_delay: str | None = Field(None, description="e.g. 'fixed:2', 'lognormal:1,0.5', 'weibull:2,1.5' (seconds)")
    delay_target: Literal["weights", "rollouts", "both"] = "weights"
    pacing: Literal["credits", "outbox"] = Field(
        "credits",
        description="credits: a learner's acks tell each sampler how many more groups it takes now "
        "(its buffer's room below learner.buffer_high_water, shared among its samplers) and samplers generate "
        "no more, so none age past max_staleness unused; outbox: samplers generate until 64 groups wait unacked",
    )

    @field_validator("simulate_delay")
    @classmethod
    def _delay_parses(cls, value: str | None) -> str | None:
        parse_delay(value)  # raises DelaySpecError (a ValueError) with the accepted forms
        return value
