"""The `verifiers` task: a single-turn environment of Prime Intellect's `verifiers` package (an optional extra).

`task.args.env` names an installed environment (the module `verifiers.load_environment` imports) and
`task.args.env_args` its arguments. The environment's dataset (its `prompt` messages, system prompt included, and
`answer`, `info`, `task` columns), its parser and its rubric's reward functions and weights are used as they are:
each rubric function is called per completion with the arguments it names (`prompt`, `completion`, `answer`,
`info`, `task`, `state`, `parser`), through the same `RewardRunner` as TRL functions (time limit, failures
counted). Only `vf.SingleTurnEnv` environments train here: a multi-turn or tool environment is refused with one
line, as is a rubric with group-level reward functions.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic import Field

from swarmnode.config import TaskConfig
from swarmnode.errors import ExitCode, missing_package
from swarmnode.tasks.args import TaskArgs, parse_args
from swarmnode.tasks.base import Task, TaskError
from swarmnode.tasks.dataset_task import DatasetArgs, DatasetTask
from swarmnode.tasks.reward_func import RewardFunc, short_name


class VerifiersArgs(TaskArgs):
    """`task.args` of the verifiers task."""

    env: str = Field(min_length=1, description="the environment's id (its module name)")
    env_args: dict[str, Any] = Field(default_factory=dict)


def _rubric_func(func: Any, parser: Any):
    """A verifiers rubric function as a TRL-style reward function."""
    params = inspect.signature(func).parameters
    takes_all = any(p.kind == p.VAR_KEYWORD for p in params.values())

    def reward(prompts: list, completions: list, **columns: list) -> list[float]:
        out = []
        for i, (prompt, completion) in enumerate(zip(prompts, completions)):
            objects: dict[str, Any] = {
                "prompt": prompt,
                "completion": completion,
                "answer": columns.get("answer", [""] * len(prompts))[i],
                "info": (columns.get("info") or [{}] * len(prompts))[i] or {},
                "task": (columns.get("task") or ["default"] * len(prompts))[i],
                "parser": parser,
            }
            objects["state"] = dict(objects)
            value = func(**(objects if takes_all else {k: v for k, v in objects.items() if k in params}))
            out.append(float(asyncio.run(value) if inspect.iscoroutine(value) else value))
        return out

    return reward


class VerifiersTask(DatasetTask):
    """An environment's dataset as a `DatasetTask`, its rubric as the task's own reward functions."""

    name = "verifiers"
    scores_groups = True

    def __init__(self, env: Any, args: VerifiersArgs, seed: int, eval_size: int):
        rows = [dict(r) for r in env.get_dataset()]
        columns = DatasetArgs(prompt_column="prompt", answer_column="answer" if rows and "answer" in rows[0] else None)
        super().__init__(rows, columns, f"verifiers environment {args.env}", seed, eval_size)
        rubric = env.rubric
        funcs = rubric._get_reward_funcs() if hasattr(rubric, "_get_reward_funcs") else list(rubric.funcs)
        weights = rubric._get_reward_weights() if hasattr(rubric, "_get_reward_weights") else list(rubric.weights)
        if any(getattr(rubric, "_is_group_func", lambda f: False)(f) for f in funcs):
            raise TaskError(
                f"task.args.env {args.env!r}: its rubric has group-level reward functions; swarmnode calls "
                "per-completion ones only",
                exit_code=ExitCode.USAGE,
            )
        module = importlib.import_module(args.env.replace("-", "_"))
        source = Path(module.__file__) if module.__file__ else None
        self._funcs = [
            RewardFunc(
                f"{args.env}:{short_name(getattr(f, '__name__', 'reward'))}",
                short_name(getattr(f, "__name__", "reward")),
                _rubric_func(f, env.parser),
                module.__name__,
                source,
            )
            for f, w in zip(funcs, weights)
            if w
        ]
        self._weights = [float(w) for w in weights if w]
        self._packages = {"verifiers": metadata.version("verifiers")}
        dists = metadata.packages_distributions().get(module.__name__.split(".")[0], [])
        self._packages.update({d: metadata.version(d) for d in dists})

    def reward_funcs(self) -> tuple[list[RewardFunc], list[float]]:
        return self._funcs, self._weights

    def packages(self) -> dict[str, str]:
        return dict(self._packages)


def make(cfg: TaskConfig) -> Task:
    """The verifiers task of a config."""
    args = parse_args(VerifiersArgs, cfg.args, cfg.name)
    try:
        import verifiers as vf
    except ImportError:
        raise missing_package("verifiers", "task.name=verifiers", "verifiers") from None
    if not hasattr(vf, "SingleTurnEnv"):
        raise TaskError(
            f"task.name=verifiers: verifiers {metadata.version('verifiers')} has no SingleTurnEnv; swarmnode "
            "uses the 0.1 API: pip install 'verifiers>=0.1.9,<0.2'"
        )
    try:
        env = vf.load_environment(args.env, **args.env_args)
    except Exception as exc:  # not installed, bad arguments: one line
        raise TaskError(f"task.args.env {args.env!r}: cannot load ({exc})") from None
    if not isinstance(env, vf.SingleTurnEnv):
        raise TaskError(
            f"task.args.env {args.env!r}: a {type(env).__name__} (multi-turn or tools); swarmnode trains "
            "single-turn environments (verifiers.SingleTurnEnv) only",
            exit_code=ExitCode.USAGE,
        )
    return VerifiersTask(env, args, cfg.seed, cfg.eval_size)
