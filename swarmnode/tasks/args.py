"""`task.args`: each task's own settings, checked by the task against a pydantic model of its own."""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from swarmnode.errors import ExitCode
from swarmnode.tasks.base import TaskError

A = TypeVar("A", bound=BaseModel)


class TaskArgs(BaseModel):
    """Base of a task's args model: unknown keys are refused."""

    model_config = ConfigDict(extra="forbid")


class NoArgs(TaskArgs):
    """The args of a task that takes none (its settings are top-level `task.*` keys)."""


def parse_args(model: type[A], args: dict, task: str) -> A:
    """`args` checked against `model`; TaskError (exit code 2) naming the first bad key, `task.args.<key>`."""
    try:
        return model.model_validate(args)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"]) or "(all)"
        known = ", ".join(model.model_fields) or "none"
        what = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
        raise TaskError(f"task.args.{key}: {what} (task {task} takes: {known})", exit_code=ExitCode.USAGE) from None
