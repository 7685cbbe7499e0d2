"""The interface every tracker implements, and the run it reports."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

# tracker name (TRL's `report_to`) -> the package it needs (installed with the `trackers` extra)
PACKAGES = {"trackio": "trackio", "wandb": "wandb", "tensorboard": "tensorboard"}


@dataclass(frozen=True)
class TrackedRun:
    """What a tracker is told about the run: the project (default the run id), this node's run name in it
    (`<role>-<peer id's last 8>`), the folder for files (tensorboard, wandb) and the config to record."""

    project: str
    name: str
    logging_dir: Path
    config: dict[str, Any] = field(default_factory=dict)


class Tracker(Protocol):
    """One tracker: opened for a `TrackedRun` by its module's `open_tracker`, then `log` per report."""

    name: str

    def log(self, metrics: dict[str, float], step: int) -> None:
        """Record the scalars `metrics` at `step` (the node's optimiser step)."""

    def close(self) -> None:
        """Flush and finish the run (files complete on disk)."""
