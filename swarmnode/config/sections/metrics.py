"""The `metrics` section: the Prometheus endpoint, the health logs and the trackers (`report_to`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from swarmnode.config.sections.base import Section

TRACKERS = ("trackio", "wandb", "tensorboard")  # TRL's `report_to` names (swarmnode.trackers)


class MetricsConfig(Section):
    port: int | None = Field(None, ge=0, le=65535, description="Prometheus port; none = off")
    addr: str = Field("127.0.0.1", min_length=1, max_length=64, description="address /metrics listens on")
    report_to: list[Literal["trackio", "wandb", "tensorboard"]] = Field(
        default_factory=list,
        description="trackers learners and SAPO nodes report to, as TRL names them: trackio, wandb, "
        "tensorboard, a list of them, all, or none (the steps file is written either way)",
    )
    logging_dir: str | None = Field(
        None, description="where tensorboard event files and wandb's offline runs go; default <data dir>/trackers"
    )
    logging_steps: int = Field(1, ge=1, le=1_000_000, description="optimiser steps between two tracker reports")
    project: str | None = Field(
        None, max_length=128, description="the trackers' project (wandb, trackio); default the run id"
    )

    @field_validator("report_to", mode="before")
    @classmethod
    def _report_to(cls, value: Any) -> Any:
        """TRL's forms: one name or a list; "all" is every tracker, "none" (or nothing) none."""
        names = [value] if isinstance(value, str) else list(value or [])
        if "all" in names:
            return list(TRACKERS)
        return [n for n in dict.fromkeys(names) if n != "none"]
