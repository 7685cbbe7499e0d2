"""`build_task`: the task a configuration names (the registry of built-in and data-backed tasks)."""

from __future__ import annotations

from swarmnode.config import TaskConfig
from swarmnode.tasks.arithmetic import ArithmeticTask
from swarmnode.tasks.base import Task, TaskError
from swarmnode.tasks.digitmap import DigitMapTask
from swarmnode.tasks.math_problems import MathTask, load_dataset_rows, load_jsonl_rows
from swarmnode.tasks.word_problems import WordProblemTask


def build_task(cfg: TaskConfig) -> Task:
    """The task named by the configuration; TaskError (a ValueError) with a clear message if it cannot be built."""
    if cfg.name == "arithmetic":
        return ArithmeticTask(max_operand=cfg.max_operand, seed=cfg.seed, eval_size=cfg.eval_size)
    if cfg.name == "digitmap":
        return DigitMapTask(digits=cfg.digits, seed=cfg.seed, eval_size=cfg.eval_size)
    if cfg.name == "math":
        if cfg.path:
            rows = load_jsonl_rows(cfg.path, cfg)
        elif cfg.dataset:
            rows = load_dataset_rows(cfg)
        else:
            raise TaskError("task.name=math needs task.path (JSONL) or task.dataset (HF datasets name)")
        return MathTask(rows, cfg.prompt_template, seed=cfg.seed, eval_size=cfg.eval_size)
    if cfg.name == "word_problems":
        return WordProblemTask(max_operand=cfg.max_operand, seed=cfg.seed, eval_size=cfg.eval_size)
    raise TaskError(f"task.name {cfg.name!r}: unknown (known: arithmetic, math, digitmap, word_problems)")
