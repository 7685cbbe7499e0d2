"""Factories of swarmnode's own tasks, as the `swarmnode.tasks` entry points name them (`(TaskConfig) -> Task`)."""

from __future__ import annotations

from swarmnode.config import TaskConfig
from swarmnode.tasks.args import NoArgs, parse_args
from swarmnode.tasks.arithmetic import ArithmeticTask
from swarmnode.tasks.base import Task, TaskError
from swarmnode.tasks.digitmap import DigitMapTask
from swarmnode.tasks.math_problems import MathTask, load_dataset_rows, load_jsonl_rows
from swarmnode.tasks.word_problems import WordProblemTask


def arithmetic(cfg: TaskConfig) -> Task:
    """The built-in "a+b=" task."""
    parse_args(NoArgs, cfg.args, cfg.name)
    return ArithmeticTask(max_operand=cfg.max_operand, seed=cfg.seed, eval_size=cfg.eval_size)


def digitmap(cfg: TaskConfig) -> Task:
    """The built-in digit-permutation task."""
    parse_args(NoArgs, cfg.args, cfg.name)
    return DigitMapTask(digits=cfg.digits, seed=cfg.seed, eval_size=cfg.eval_size)


def math(cfg: TaskConfig) -> Task:
    """Problems from JSONL or an HF datasets name, scored by math-verify."""
    parse_args(NoArgs, cfg.args, cfg.name)
    if cfg.path:
        rows = load_jsonl_rows(cfg.path, cfg)
    elif cfg.dataset:
        rows = load_dataset_rows(cfg)
    else:
        raise TaskError("task.name=math needs task.path (JSONL) or task.dataset (HF datasets name)")
    return MathTask(rows, cfg.prompt_template, seed=cfg.seed, eval_size=cfg.eval_size)


def word_problems(cfg: TaskConfig) -> Task:
    """Generated arithmetic word problems."""
    parse_args(NoArgs, cfg.args, cfg.name)
    return WordProblemTask(max_operand=cfg.max_operand, seed=cfg.seed, eval_size=cfg.eval_size)
