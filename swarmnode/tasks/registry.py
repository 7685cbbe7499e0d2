"""`build_task`: the task a configuration names, found through the `swarmnode.tasks` entry-point group.

Every task registers the same way: an entry point `name = "module:factory"` in the group `swarmnode.tasks`, whose
factory takes the `TaskConfig` and returns a `Task` (swarmnode's own in its pyproject; a third-party package in
its own). `BUILTIN` holds swarmnode's entries too, so they are found where the installed metadata is older than
the source; the entry points found are merged over it. The built task gets the config's system prompt,
chat-template arguments and reward functions laid over it (`swarmnode.tasks.configured`).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from importlib import metadata

from swarmnode.config import TaskConfig
from swarmnode.errors import ExitCode
from swarmnode.tasks.base import Task, TaskError
from swarmnode.tasks.configured import configure

GROUP = "swarmnode.tasks"
OWN = "swarmnode"
BUILTIN = {
    "arithmetic": "swarmnode.tasks.builtin:arithmetic",
    "digitmap": "swarmnode.tasks.builtin:digitmap",
    "math": "swarmnode.tasks.builtin:math",
    "word_problems": "swarmnode.tasks.builtin:word_problems",
    "dataset": "swarmnode.tasks.dataset_task:make",
    "reasoning_gym": "swarmnode.tasks.reasoning_gym_task:make",
    "verifiers": "swarmnode.tasks.verifiers_task:make",
}
PROVIDERS = {"reasoning_gym": "reasoning-gym", "verifiers": "verifiers"}  # packages a task of ours needs


@dataclass(frozen=True)
class TaskEntry:
    """A registered task: its name, `module:factory`, and the distribution that registers it."""

    name: str
    target: str
    dist: str
    version: str


def _own_version() -> str:
    try:
        return metadata.version(OWN)
    except metadata.PackageNotFoundError:
        return "0+source"


def registered() -> dict[str, TaskEntry]:
    """Every task name this machine can build (swarmnode's own merged under the entry points found)."""
    own = _own_version()
    found = {name: TaskEntry(name, target, OWN, own) for name, target in BUILTIN.items()}
    for ep in metadata.entry_points(group=GROUP):
        dist = ep.dist.metadata["Name"] if ep.dist is not None else "?"
        if dist == OWN and ep.name in found:
            continue  # this source's own table is newer than an installed copy's metadata
        found[ep.name] = TaskEntry(ep.name, ep.value, dist, ep.dist.version if ep.dist is not None else "?")
    return found


def task_entry(name: str) -> TaskEntry:
    """The entry of `name`; TaskError (exit code 2) listing the installed tasks if there is none."""
    tasks = registered()
    if name not in tasks:
        raise TaskError(
            f"task.name {name!r}: no such task here (installed: {', '.join(sorted(tasks))}); a package adds one "
            f"through the entry-point group {GROUP!r} (docs/tasks.md)",
            exit_code=ExitCode.USAGE,
        )
    return tasks[name]


def build_raw_task(cfg: TaskConfig) -> Task:
    """The task its factory makes, without the config's prompts and rewards laid over it."""
    entry = task_entry(cfg.name)
    module, _, attr = entry.target.partition(":")
    try:
        factory = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise TaskError(f"task.name {cfg.name!r}: its entry point {entry.target} ({entry.dist}) fails: {exc}") from None
    task = factory(cfg)
    if not isinstance(task, Task):
        raise TaskError(f"task.name {cfg.name!r}: {entry.target} returned {type(task).__name__}, not a Task")
    return task


def build_task(cfg: TaskConfig) -> Task:
    """The task named by the configuration; TaskError (a ValueError) with a clear message if it cannot be built."""
    return configure(build_raw_task(cfg), cfg)
