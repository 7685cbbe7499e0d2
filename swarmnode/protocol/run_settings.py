"""The run's generation settings a rollout group shows, checked by the learner that receives it: the sampling
temperature, G and the completion length. A group made under other settings is refused with the status
`settings`; the ack carries the run's values (`run_values`), and the sampler's log names what differs
(`differences`): "your settings differ from the run's: sampler.temperature 0.7, run 1.0"."""

from __future__ import annotations

import math
from typing import Any

from swarmnode.config import SamplerConfig

SETTINGS_STATUS = "settings"  # the ack status of a group made under other settings (final: not resent)


def run_values(sc: SamplerConfig) -> dict[str, Any]:
    """The generation settings a group is checked against (what a `settings` ack carries)."""
    return {
        "sampler.temperature": sc.temperature,
        "sampler.num_generations": sc.num_generations,
        "sampler.max_completion_length": sc.max_completion_length,
    }


def group_mismatch(group: Any, run: dict[str, Any]) -> list[str]:
    """The settings `group` (a RolloutGroup) was evidently not made under; empty when it fits the run."""
    found = []
    if not math.isclose(float(group.temperature), float(run["sampler.temperature"]), rel_tol=1e-6, abs_tol=1e-6):
        found.append("sampler.temperature")
    if len(group.completions) != run["sampler.num_generations"]:
        found.append("sampler.num_generations")
    if any(len(c) > run["sampler.max_completion_length"] for c in group.completions):
        found.append("sampler.max_completion_length")
    return found


def differences(own: dict[str, Any], run: Any) -> str | None:
    """`key mine, run theirs` for each setting that differs between this node's and the run's (from an ack's
    `run`); None when the ack carries nothing readable or nothing differs."""
    if not isinstance(run, dict):
        return None
    diffs = [
        f"{key} {own[key]!r}, run {run[key]!r}"
        for key in own
        if key in run and isinstance(run[key], (int, float)) and not isinstance(run[key], bool) and run[key] != own[key]
    ]
    return ", ".join(diffs) or None
