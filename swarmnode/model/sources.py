"""Digests of what a run's nodes must hold alike beyond their settings: the model weights' source and the task's data.

The run card carries both (`sources`: `{"model": ..., "data": ...}`, sha256 hex); a node that joins by invite
computes its own and is refused before `ready` when one differs (`source_differences`). What each digest covers:

- model `builtin:tiny`: the builder's settings, its format and seed (and the warm-start task's settings when it has
  one): the weights are made from these alone;
- a packaged GGUF model (`smollm2-135m-instruct`, `pkg:...`): the GGUF file's bytes;
- a local model directory: every file in it (names and bytes), so a changed weight or tokenizer file differs;
- an HF hub id: the id and `model.revision` (pin a commit there for the card to fix the weights);
- task `math` from a file (`task.path`, each machine's own): the file's bytes; from `task.dataset`: its name, split
  and fields;
- a generated task (arithmetic, digitmap, word_problems, reasoning_gym, ...): its first prompts and answers, as
  this machine makes them;
- the task's code (`swarmnode.tasks.pins`): `package:<name>` the version of each package providing the task or its
  rewards, `reward:<module:function>` the sha256 of each reward function's source module.

A digest that cannot be had here (a packaged model not installed, a missing file) is None: the node's own checks
say what is missing.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

from swarmnode.config import ModelConfig, TaskConfig
from swarmnode.model.models import BUILTIN_TINY, tiny_digest
from swarmnode.model.packaged import PackagedModelError, file_digest, locate_gguf, packaged_model
from swarmnode.tasks import build_task
from swarmnode.tasks.base import TaskError
from swarmnode.tasks.pins import is_pin, pin_differences, task_pins
from swarmnode.tasks.registry import task_entry

FILE_TASKS = ("math", "dataset")  # tasks whose data is a file on each machine or a hub dataset
GENERATED_PROMPTS = 64  # prompts of a generated task that its digest covers (with the held-out set)
WHAT = {"model": "model weights' source", "data": "task data"}


def _sha(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


def directory_digest(root: Path) -> str:
    """sha256 over every file under `root` (relative name and bytes), hidden files left out."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        if any(part.startswith(".") for part in rel.split("/")):
            continue
        digest.update(f"{rel}\0{file_digest(path)}\n".encode())
    return digest.hexdigest()


def model_source(model: ModelConfig, task: TaskConfig | None = None) -> str | None:
    """The digest of the model weights' source (see the module docstring); None if it is not on this machine."""
    if model.name == BUILTIN_TINY:  # a warm start from a file: its bytes count, not where it lies
        return tiny_digest(
            model.tiny, task.model_copy(update={"path": data_source(task)}) if task and task.path else task
        )
    try:
        packaged = packaged_model(model.name)
        if packaged is not None:
            return file_digest(locate_gguf(packaged))
    except PackagedModelError:
        return None
    path = Path(model.name).expanduser()
    if path.is_dir():
        return directory_digest(path)
    if model.name.startswith((".", "/", "~")):
        return None
    return _sha({"hub": model.name, "revision": model.revision})


def data_source(task: TaskConfig) -> str | None:
    """The digest of the task's data (see the module docstring); None if it is not on this machine."""
    if task.name in FILE_TASKS:
        if task.path:
            path = Path(task.path).expanduser()
            return file_digest(path) if path.is_file() else None
        return _sha(
            {
                "dataset": task.dataset,
                "split": task.split,
                "prompt": task.prompt_field,
                "answer": task.answer_field,
                "template": task.prompt_template,
                **({"args": task.args} if task.args else {}),
            }
        )
    try:
        made = build_task(task)
    except TaskError:
        return None
    prompts = [*made.eval_prompts(), *made.sample(GENERATED_PROMPTS, random.Random(task.seed))]
    return _sha([[p.prompt_id, p.text, p.reference] for p in prompts])


def code_pins(task: TaskConfig) -> dict[str, str]:
    """The task's package versions and reward-module digests (`swarmnode.tasks.pins`); none if it cannot be built."""
    try:
        entry = task_entry(task.name)
        return task_pins(build_task(task), (entry.dist, entry.version))
    except TaskError:
        return {}


def source_digests(mc: ModelConfig, task: TaskConfig) -> dict[str, str]:
    """What a run card's `sources` holds for a run of model `mc` on `task` (the digests and pins this machine can
    compute)."""
    found = {"model": model_source(mc, task), "data": data_source(task), **code_pins(task)}
    return {key: value for key, value in found.items() if value is not None}


def source_differences(run: dict[str, str], mine: dict[str, str]) -> list[str]:
    """One phrase per digest both sides have and that differs: `task data sha256 1a2b3c4d5e6f here, run 9f8e...`."""
    return [
        f"{WHAT.get(key, key)} sha256 {mine[key][:12]} here, run {run[key][:12]}"
        for key in sorted(run)
        if not is_pin(key) and key in mine and mine[key] != run[key]
    ] + pin_differences(run, mine)
