"""`RewardFunc`: one reward function as the config names it, and the name of the task's own (`task`)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

TASK_REWARD = "task"  # the name in task.reward_funcs of the task's own reward


@dataclass(frozen=True)
class RewardFunc:
    """One reward function: its config name, a short name for counters, the callable and its module's file.
    `trl`: called TRL's way, `(prompts, completions, **columns)`; else a task's own, `(prompt, texts)`."""

    spec: str
    name: str
    func: Callable
    module: str | None = None
    source: Path | None = None
    trl: bool = True

    def digest(self) -> str | None:
        """sha256 of its module's source file (None for a function without one)."""
        return hashlib.sha256(self.source.read_bytes()).hexdigest() if self.source else None


def short_name(text: str) -> str:
    """A name fit for a metric: letters, digits and underscores."""
    return re.sub(r"\W+", "_", text).strip("_") or "reward"
