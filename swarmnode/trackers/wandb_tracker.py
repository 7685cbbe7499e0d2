"""wandb: offline by default (`WANDB_MODE=offline` unless the environment sets another mode), the run's files
under `<logging_dir>/wandb/`; `wandb sync <that folder>/offline-run-*` uploads them later."""

from __future__ import annotations

import os

import wandb

from swarmnode.trackers.base import TrackedRun


class WandbTracker:
    """One wandb run per node, in the run's project, named after the node."""

    name = "wandb"

    def __init__(self, run: TrackedRun) -> None:
        run.logging_dir.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            project=run.project,
            name=run.name,
            dir=str(run.logging_dir),
            config=run.config,
            mode=os.environ.get("WANDB_MODE") or "offline",  # type: ignore[arg-type]
            reinit="create_new",
            settings=wandb.Settings(silent=True, console="off", x_disable_stats=True),
        )

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(metrics, step=step)

    def close(self) -> None:
        self.run.finish()
        wandb.teardown()  # waits for wandb-core to finish writing the run file
