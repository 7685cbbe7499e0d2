"""Which trackers a node reports to (`metrics.report_to`), checked before `ready` and opened by the roles."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

from swarmnode.config import MetricsConfig, NodeConfig
from swarmnode.errors import missing_package
from swarmnode.trackers.base import PACKAGES, TrackedRun, Tracker
from swarmnode.trackers.hub import Opener, TrackerHub

# tracker name -> (module, class) of its implementation: imported only when named (each needs its own package)
IMPLEMENTATIONS = {
    "trackio": ("swarmnode.trackers.trackio_tracker", "TrackioTracker"),
    "wandb": ("swarmnode.trackers.wandb_tracker", "WandbTracker"),
    "tensorboard": ("swarmnode.trackers.tensorboard_tracker", "TensorboardTracker"),
}
TRACKERS_DIR = "trackers"  # under the node's data directory unless metrics.logging_dir


def check_trackers(metrics: MetricsConfig) -> None:
    """Every tracker `metrics.report_to` names has its package (MissingError, exit code 3, otherwise)."""
    for name in metrics.report_to:
        if importlib.util.find_spec(PACKAGES[name]) is None:
            raise missing_package(PACKAGES[name], f"metrics.report_to={name}", extra="trackers")


def logging_dir(metrics: MetricsConfig, data_dir: Path) -> Path:
    """`metrics.logging_dir`, or `<data dir>/trackers`."""
    return Path(metrics.logging_dir).expanduser() if metrics.logging_dir else Path(data_dir) / TRACKERS_DIR


def tracked_run(cfg: NodeConfig, data_dir: Path, role: str, peer_id: str) -> TrackedRun:
    """The run as the trackers see it: project = `metrics.project` or the run id, name = `<role>-<peer id[-8:]>`."""
    config: dict[str, Any] = {
        "run_id": cfg.run_id,
        "role": role,
        "peer_id": peer_id,
        "model": cfg.model.name,
        "task": cfg.task.name,
    }
    config |= {f"learner.{k}": v for k, v in cfg.learner.model_dump().items() if isinstance(v, (int, float, str))}
    return TrackedRun(
        cfg.metrics.project or cfg.run_id, f"{role}-{peer_id[-8:]}", logging_dir(cfg.metrics, data_dir), config
    )


def _opener(name: str, run: TrackedRun) -> Callable[[], Tracker]:
    module, cls = IMPLEMENTATIONS[name]
    return lambda: getattr(importlib.import_module(module), cls)(run)


def open_trackers(
    cfg: NodeConfig, data_dir: Path, role: str, peer_id: str, emit: Callable[[str], None]
) -> TrackerHub | None:
    """A `TrackerHub` for the trackers `metrics.report_to` names (opened on its thread), or None for none."""
    if not cfg.metrics.report_to:
        return None
    run = tracked_run(cfg, data_dir, role, peer_id)
    openers: list[Opener] = [(name, _opener(name, run)) for name in cfg.metrics.report_to]
    emit(
        f"trackers: {', '.join(cfg.metrics.report_to)} (project {run.project}, run {run.name}, files {run.logging_dir})"
    )
    return TrackerHub(openers, emit)
