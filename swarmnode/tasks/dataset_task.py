"""The `dataset` task: prompts from any dataset HF `datasets` reads, rewards from TRL-style reward functions.

Data: `task.path`, a local `.json`/`.jsonl`/`.parquet`/`.csv` file (each machine's own copy; the run card pins its
bytes), or `task.dataset`, a hub name with `task.split`. `task.args`:

- `prompt_column` (default `prompt`): a string, or a conversation (a list of `{role, content}` messages);
- `answer_column` (default `answer`; null for none): the reference; the task's own reward is math-verify's
  judgement of it (as the `math` task), so a dataset without one needs `task.reward_funcs`;
- `template` (default `{prompt}`): how a string prompt becomes the user's message (`{prompt}` and any column);
- `columns`: the columns handed to reward functions (default all but the prompt), the reference as `answer`.

Row `i` has the id `ds:<i>:<digest of the row>`; one row in `EVAL_EVERY` (seeded hash of the id) is held out.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from pathlib import Path
from typing import Any

from pydantic import Field

from swarmnode.config import TaskConfig
from swarmnode.errors import ExitCode, missing_package
from swarmnode.tasks.args import TaskArgs, parse_args
from swarmnode.tasks.base import Prompt, Task, TaskError, hash_held_out
from swarmnode.tasks.chat import prompt_text
from swarmnode.tasks.math_problems import math_verify_reward

FORMATS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv"}


class DatasetArgs(TaskArgs):
    """`task.args` of the dataset task."""

    prompt_column: str = "prompt"
    answer_column: str | None = "answer"
    template: str = "{prompt}"
    columns: list[str] | None = Field(default=None, description="columns handed to reward functions (default: all)")


def load_rows(cfg: TaskConfig) -> tuple[list[dict[str, Any]], str]:
    """The rows of the configured file or hub dataset, and how to name it in a message."""
    try:
        import datasets
    except ImportError:
        raise missing_package("datasets", "task.name=dataset", "data") from None
    if cfg.path:
        path = Path(cfg.path).expanduser()
        kind = FORMATS.get(path.suffix.lower())
        if kind is None:
            raise TaskError(f"task.path {cfg.path!r}: not a {'/'.join(FORMATS)} file", exit_code=ExitCode.USAGE)
        if not path.is_file():
            raise TaskError(f"task.path {cfg.path!r}: no such file")
        where = f"task.path {cfg.path}"
        load = lambda: datasets.load_dataset(kind, data_files=str(path), split="train")  # noqa: E731
    elif cfg.dataset:
        where = f"task.dataset {cfg.dataset} split {cfg.split}"
        load = lambda: datasets.load_dataset(cfg.dataset, split=cfg.split)  # noqa: E731
    else:
        raise TaskError("task.name=dataset needs task.path (a local file) or task.dataset (a hub name)")
    try:
        data = load()
    except Exception as exc:  # unreadable file, unknown name, no network: all user-facing
        raise TaskError(
            f"{where}: cannot load ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
        ) from None
    return [dict(row) for row in data], where


class DatasetTask(Task):
    """Rows of a dataset (see the module docstring)."""

    name = "dataset"

    def __init__(self, rows: list[dict[str, Any]], args: DatasetArgs, where: str, seed: int, eval_size: int):
        if not rows:
            raise TaskError(f"{where}: no rows")
        have = list(rows[0])
        for key in ("prompt_column", "answer_column"):
            column = getattr(args, key)
            if column is not None and column not in rows[0]:
                raise TaskError(f"task.args.{key} {column!r}: {where} has no such column (columns: {', '.join(have)})")
        for column in args.columns or []:
            if column not in rows[0]:
                raise TaskError(
                    f"task.args.columns {column!r}: {where} has no such column (columns: {', '.join(have)})"
                )
        self.args, self.seed, self._rows = args, seed, rows
        self._ids = [
            f"ds:{i}:{hashlib.sha256(json.dumps(r, sort_keys=True, default=str).encode()).hexdigest()[:12]}"
            for i, r in enumerate(rows)
        ]
        held = [i for i in range(len(rows)) if hash_held_out(seed, self._ids[i])][: min(eval_size, len(rows) // 2)]
        self._eval, self._eval_set = held, set(held)
        self._train = [i for i in range(len(rows)) if i not in self._eval_set] or held

    def _prompt(self, index: int) -> Prompt:
        row, a = self._rows[index], self.args
        raw = row[a.prompt_column]
        if isinstance(raw, str):
            try:
                raw = a.template.format(**{**row, "prompt": raw})
            except (KeyError, IndexError, ValueError) as exc:
                raise TaskError(
                    f"task.args.template: cannot format ({exc!r}); use {{prompt}} or a column name"
                ) from None
        names = a.columns if a.columns is not None else [c for c in row if c != a.prompt_column]
        columns = {c: row[c] for c in names}
        reference = "" if a.answer_column is None else str(row[a.answer_column])
        if a.answer_column is not None:
            columns["answer"] = row[a.answer_column]
        return Prompt(self._ids[index], prompt_text(raw), reference, columns)

    def sample(self, n: int, rng: random.Random) -> list[Prompt]:
        return [self._prompt(rng.choice(self._train)) for _ in range(n)]

    def eval_prompts(self) -> list[Prompt]:
        return [self._prompt(i) for i in self._eval]

    def get(self, prompt_id: str) -> Prompt | None:
        match = re.fullmatch(r"ds:(\d{1,12}):[0-9a-f]{12}", prompt_id) if isinstance(prompt_id, str) else None
        if not match or int(match.group(1)) >= len(self._rows) or self._ids[int(match.group(1))] != prompt_id:
            return None
        return self._prompt(int(match.group(1)))

    def held_out(self, prompt: Prompt) -> bool:
        return int(prompt.prompt_id.split(":")[1]) in self._eval_set

    def reward(self, prompt: Prompt, completion_text: str) -> float:
        return math_verify_reward(completion_text, prompt.reference)


def make(cfg: TaskConfig) -> Task:
    """The dataset task of a config."""
    args = parse_args(DatasetArgs, cfg.args, cfg.name)
    if args.answer_column is None and not cfg.reward_funcs:
        raise TaskError(
            "task.name=dataset with no answer column has no reward of its own: set task.reward_funcs",
            exit_code=ExitCode.USAGE,
        )
    rows, where = load_rows(cfg)
    return DatasetTask(rows, args, where, cfg.seed, cfg.eval_size)
