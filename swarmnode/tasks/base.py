"""What a task is: `Prompt`, the `Task` interface, `TaskError`, and the seeded-hash held-out split."""

from __future__ import annotations

import hashlib
import random
from abc import ABC, abstractmethod
from dataclasses import dataclass

from swarmnode.errors import ExitCode, SwarmnodeError

EVAL_EVERY = 8  # one in EVAL_EVERY items (by seeded hash) is held out for evaluation


class TaskError(SwarmnodeError, ValueError):
    """The task cannot be built from its configuration (missing file, bad field mapping, ...)."""

    exit_code = ExitCode.MISSING


@dataclass(frozen=True)
class Prompt:
    """One prompt: a stable id any node can resolve, the text given to the model, and the reference answer."""

    prompt_id: str
    text: str
    reference: str


class Task(ABC):
    """Prompts plus a reward function."""

    name: str

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


def hash_held_out(seed: int, key: str) -> bool:
    """True for one key in EVAL_EVERY, chosen by a seeded hash: the held-out evaluation split."""
    digest = hashlib.sha256(f"{seed}:{key}".encode()).digest()
    return int.from_bytes(digest[:4], "big") % EVAL_EVERY == 0
