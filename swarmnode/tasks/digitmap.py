"""`digitmap`: a built-in task with long completions, generated in code (`task.name: digitmap`).

The prompt is `task.digits` random digits followed by `=`; the answer maps every digit d to (d + 1) mod 10, so
a completion is `digits` characters then EOS (one token each with the tiny model's character tokenizer):
completions of 100-500 tokens come from `task.digits` 100-500. Reward = the fraction of positions whose
character is right (characters past the last position are ignored; a short answer loses its missing positions).

Prompts are split by a seeded hash of their digits: one in eight is held out for evaluation, another one in eight
for validation (choosing the best checkpoint), the rest is for training; `eval_prompts()` and
`validation_prompts()` are the first `task.eval_size` held-out strings of two seeded streams. The warm start uses
per-token label noise (`noisy_answer`): each shown digit is right with probability `warm_start_correct`, else a
random other digit, so the warm-started model is right at each position with about that probability.
"""

from __future__ import annotations

import hashlib
import random
import re

from swarmnode.tasks.base import Prompt, Task

SPLITS = 8  # hash % SPLITS: 0 = evaluation, 1 = validation, the rest = training
PREFIX = "dmap:"


def mapped(digits: str) -> str:
    """The reference answer: every digit plus one, mod 10."""
    return "".join(str((int(c) + 1) % 10) for c in digits)


def digitmap_reward(completion_text: str, reference: str) -> float:
    """Fraction of the reference's positions where the completion holds the same character."""
    text = completion_text.strip()
    return sum(a == b for a, b in zip(text, reference)) / len(reference)


class DigitMapTask(Task):
    """n-digit strings -> each digit + 1 mod 10; deterministic given `seed`."""

    name = "digitmap"

    def __init__(self, digits: int = 128, seed: int = 0, eval_size: int = 64):
        if digits < 1:
            raise ValueError(f"task.digits must be >= 1 (got {digits})")
        self.digits, self.seed, self.eval_size = digits, seed, eval_size
        self._id = re.compile(rf"{PREFIX}(\d{{{digits}}})")
        self._eval = self._held_out_prompts(0)
        self._validation = self._held_out_prompts(1)

    def _split(self, digits: str) -> int:
        digest = hashlib.sha256(f"{self.seed}:{digits}".encode()).digest()
        return int.from_bytes(digest[:4], "big") % SPLITS

    def _prompt(self, digits: str) -> Prompt:
        return Prompt(prompt_id=f"{PREFIX}{digits}", text=f"{digits}=", reference=mapped(digits))

    def _random_digits(self, rng: random.Random) -> str:
        return "".join(rng.choice("0123456789") for _ in range(self.digits))

    def _held_out_prompts(self, split: int) -> list[Prompt]:
        rng = random.Random(f"digitmap:{self.seed}:split{split}")
        out: dict[str, Prompt] = {}
        for _ in range(1000 * max(1, self.eval_size)):  # 10^digits strings: short ones may run out
            if len(out) >= self.eval_size:
                break
            digits = self._random_digits(rng)
            if self._split(digits) == split:
                out.setdefault(digits, self._prompt(digits))
        return list(out.values())

    def sample(self, n: int, rng: random.Random) -> list[Prompt]:
        out: list[Prompt] = []
        while len(out) < n:
            digits = self._random_digits(rng)
            if self._split(digits) >= 2:
                out.append(self._prompt(digits))
        return out

    def eval_prompts(self) -> list[Prompt]:
        return list(self._eval)

    def validation_prompts(self) -> list[Prompt]:
        """Held-out prompts for choosing a checkpoint, disjoint from `eval_prompts()` and from training."""
        return list(self._validation)

    def get(self, prompt_id: str) -> Prompt | None:
        match = self._id.fullmatch(prompt_id) if isinstance(prompt_id, str) else None
        return self._prompt(match.group(1)) if match else None

    def reward(self, prompt: Prompt, completion_text: str) -> float:
        return digitmap_reward(completion_text, prompt.reference)

    @staticmethod
    def noisy_answer(prompt: Prompt, correct_fraction: float, rng: random.Random) -> str:
        """The reference with per-token label noise: each digit kept with probability `correct_fraction`, else
        replaced by a random other digit (the warm start's answers)."""
        return "".join(
            c if rng.random() < correct_fraction else str((int(c) + rng.randint(1, 9)) % 10) for c in prompt.reference
        )
