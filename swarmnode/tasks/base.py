"""What a task is: `Prompt`, the `Task` interface, `Scored`, `TaskError`, and the seeded-hash held-out split."""

from __future__ import annotations

import hashlib
import random
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from swarmnode.errors import ExitCode, SwarmnodeError
from swarmnode.tasks.reward_func import TASK_REWARD, RewardFunc, short_name

EVAL_EVERY = 8  # one in EVAL_EVERY items (by seeded hash) is held out for evaluation


class TaskError(SwarmnodeError, ValueError):
    """The task cannot be built from its configuration (missing file, bad field mapping, ...): exit code 3; an
    unknown task name or a bad `task.args` value: 2 (`exit_code=ExitCode.USAGE`)."""

    exit_code = ExitCode.MISSING


@dataclass(frozen=True)
class Prompt:
    """One prompt: a stable id any node can resolve, the text given to the model (plain, or a conversation as
    `swarmnode.tasks.chat` writes it), the reference answer, and the extra columns reward functions receive."""

    prompt_id: str
    text: str
    reference: str
    columns: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True)
class Scored:
    """A group's rewards, or None when it must not be trained on; `failures`: `<function>_<kind>` per failure."""

    rewards: list[float] | None
    failures: tuple[str, ...] = ()


class Task(ABC):
    """Prompts plus a reward function. `default_system_prompt`: the system message a task's prompts get unless
    `task.system_prompt` sets another; `scores_groups`: its rewards come from reward functions of its own
    (`reward_funcs`), run with a time limit."""

    name: str
    default_system_prompt: str | None = None
    scores_groups: bool = False

    @abstractmethod
    def sample(self, n: int, rng: random.Random) -> list[Prompt]:
        """`n` training prompts drawn with `rng` (never from the eval set)."""

    @abstractmethod
    def eval_prompts(self) -> list[Prompt]:
        """The fixed held-out prompts."""

    def validation_prompts(self) -> list[Prompt]:
        """Held-out prompts for choosing a checkpoint, disjoint from `eval_prompts()`; none unless a task has them."""
        return []

    @abstractmethod
    def get(self, prompt_id: str) -> Prompt | None:
        """The prompt with this id, or None if the id is malformed or unknown to this task."""

    @abstractmethod
    def reward(self, prompt: Prompt, completion_text: str) -> float:
        """Score of a completion in [0, 1]; pure in (prompt, completion_text)."""

    def held_out(self, prompt: Prompt) -> bool:
        """True for a prompt of the held-out evaluation split (a learner never trains on those)."""
        return False

    def score(self, prompt: Prompt, texts: list[str]) -> Scored:
        """The rewards of a group's completions (`reward` of each unless a task scores groups itself)."""
        return Scored([float(self.reward(prompt, t)) for t in texts])

    def reward_funcs(self) -> tuple[list[RewardFunc], list[float]]:
        """The task's own reward as reward functions (`task` in `task.reward_funcs`) and their weights."""
        own = RewardFunc(
            TASK_REWARD, short_name(self.name), lambda p, texts: [self.reward(p, t) for t in texts], trl=False
        )
        return [own], [1.0]

    def packages(self) -> dict[str, str]:
        """Distribution name -> version of every package this task's prompts or rewards come from (the run card
        pins them); none for a task of swarmnode's own."""
        return {}


def hash_held_out(seed: int, key: str) -> bool:
    """True for one key in EVAL_EVERY, chosen by a seeded hash: the held-out evaluation split."""
    digest = hashlib.sha256(f"{seed}:{key}".encode()).digest()
    return int.from_bytes(digest[:4], "big") % EVAL_EVERY == 0
