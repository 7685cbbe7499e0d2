"""tensorboard: event files under `<logging_dir>/tensorboard/<run name>` (`tensorboard --logdir` reads them)."""

from __future__ import annotations

from torch.utils.tensorboard import SummaryWriter

from swarmnode.trackers.base import TrackedRun


class TensorboardTracker:
    """Scalars through torch's `SummaryWriter` (the writer transformers' `report_to="tensorboard"` uses)."""

    name = "tensorboard"

    def __init__(self, run: TrackedRun) -> None:
        self.dir = run.logging_dir / "tensorboard" / run.name
        self.writer = SummaryWriter(log_dir=str(self.dir), flush_secs=10)

    def log(self, metrics: dict[str, float], step: int) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, global_step=step)

    def close(self) -> None:
        self.writer.close()
