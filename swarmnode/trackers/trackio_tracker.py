"""trackio (TRL's recommended tracker): its local store (`TRACKIO_DIR`, default
~/.cache/huggingface/trackio); `trackio show --project <project>` opens its dashboard on it."""

from __future__ import annotations

import trackio

from swarmnode.trackers.base import TrackedRun


class TrackioTracker:
    """One trackio run per node, in the run's project, named after the node; local only (no Space)."""

    name = "trackio"

    def __init__(self, run: TrackedRun) -> None:
        self.run = trackio.init(
            project=run.project,
            name=run.name,
            config=run.config,
            embed=False,
            resume="allow",
            auto_log_gpu=False,
            auto_log_cpu=False,
        )

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(metrics, step=step)

    def close(self) -> None:
        self.run.finish()
