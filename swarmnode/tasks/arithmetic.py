"""The built-in `arithmetic` task: "a+b=" with operands in [0, task.max_operand], reference str(a+b), completion =
digits then EOS. Partial credit: 1.0 exact, 0.1..0.4 for a well-formed wrong number (closer is more), up to 0.1
when the text merely starts with a number, 0 otherwise. A held-out set of operand pairs (chosen by a seeded hash)
is never sampled for training and forms the eval prompts.
"""

from __future__ import annotations

import random
import re

from swarmnode.tasks.base import EVAL_EVERY, Prompt, Task, hash_held_out

_INT = re.compile(r"\d{1,18}")


def arithmetic_reward(completion_text: str, reference: str) -> float:
    """Partial-credit score of an arithmetic answer; see the module docstring."""
    text = completion_text.strip()
    if text == reference:
        return 1.0
    target = int(reference)
    if _INT.fullmatch(text):
        return 0.1 + 0.3 * _closeness(int(text), target)
    lead = _INT.match(text)
    if lead:
        return 0.05 + 0.05 * _closeness(int(lead.group()), target)
    return 0.0


def _closeness(value: int, target: int) -> float:
    return max(0.0, 1.0 - abs(value - target) / max(2, target))


class ArithmeticTask(Task):
    """Procedurally generated addition, deterministic given `task.seed`."""

    name = "arithmetic"

    def __init__(self, max_operand: int = 9, seed: int = 0, eval_size: int = 64):
        self.max_operand = max_operand
        self.seed = seed
        self.eval_size = eval_size
        self._eval = self._build_eval()

    def _prompt(self, a: int, b: int) -> Prompt:
        return Prompt(prompt_id=f"add:{a}:{b}", text=f"{a}+{b}=", reference=str(a + b))

    def _is_eval(self, a: int, b: int) -> bool:
        return hash_held_out(self.seed, f"{a}:{b}")

    def _build_eval(self) -> list[Prompt]:
        rng = random.Random(f"eval:{self.seed}")
        space = (self.max_operand + 1) ** 2
        found: dict[str, Prompt] = {}
        if space <= 4 * self.eval_size * EVAL_EVERY:  # small space: enumerate all held-out pairs
            pairs = [(a, b) for a in range(self.max_operand + 1) for b in range(self.max_operand + 1)]
            rng.shuffle(pairs)
            for a, b in pairs:
                if len(found) >= self.eval_size:
                    break
                if self._is_eval(a, b):
                    found[f"{a}:{b}"] = self._prompt(a, b)
        else:
            while len(found) < self.eval_size:
                a, b = rng.randint(0, self.max_operand), rng.randint(0, self.max_operand)
                if self._is_eval(a, b):
                    found[f"{a}:{b}"] = self._prompt(a, b)
        return list(found.values())

    def sample(self, n: int, rng: random.Random) -> list[Prompt]:
        out: list[Prompt] = []
        while len(out) < n:
            a, b = rng.randint(0, self.max_operand), rng.randint(0, self.max_operand)
            if not self._is_eval(a, b):
                out.append(self._prompt(a, b))
        return out

    def eval_prompts(self) -> list[Prompt]:
        return list(self._eval)

    def get(self, prompt_id: str) -> Prompt | None:
        match = re.fullmatch(r"add:(\d{1,9}):(\d{1,9})", prompt_id) if isinstance(prompt_id, str) else None
        if not match:
            return None
        a, b = int(match.group(1)), int(match.group(2))
        if a > self.max_operand or b > self.max_operand:
            return None
        return self._prompt(a, b)

    def reward(self, prompt: Prompt, completion_text: str) -> float:
        return arithmetic_reward(completion_text, prompt.reference)

    def held_out(self, prompt: Prompt) -> bool:
        a, b = (int(x) for x in prompt.prompt_id.split(":")[1:])
        return self._is_eval(a, b)
