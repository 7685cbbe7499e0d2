"""`word_problems`: short arithmetic word problems generated in code, for small instruct models.

Each problem is one of a few sentence templates filled with a name, an object and two operands in
[1, task.max_operand] ("Mia has 17 apples. She buys 25 more. How many apples does Mia have now?"), followed by
the instruction to end with the answer as `\\boxed{N}`. Subtraction templates always have a non-negative
answer. The reward is math-verify's verdict on the completion's final answer (0.8 when it equals the
reference) plus a format term (0.2 when the completion holds a `\\boxed{...}` with a plain integer), so a
model earns something for the format before it gets the sums right. The prompt id names the template, the
name, the object and the operands, so every node rebuilds the same prompt from it. A seeded hash holds one in
eight problems out of training; the eval prompts are drawn from those.
"""

from __future__ import annotations

import random
import re

from swarmnode.tasks.base import Prompt, Task, hash_held_out
from swarmnode.tasks.math_problems import math_verify_reward

NAMES = [
    ("Mia", "She"),
    ("Tom", "He"),
    ("Ava", "She"),
    ("Leo", "He"),
    ("Zoe", "She"),
    ("Sam", "He"),
    ("Lily", "She"),
    ("Ben", "He"),
]
OBJECTS = ["apples", "books", "marbles", "stickers", "pencils", "cookies", "coins", "cards"]
# (sentence, operation): {n} name, {p} pronoun, {o} objects, {a} {b} operands
TEMPLATES: list[tuple[str, str]] = [
    ("{n} has {a} {o}. {p} buys {b} more. How many {o} does {n} have now?", "+"),
    ("There are {a} {o} in a box and {b} {o} in a bag. How many {o} are there in total?", "+"),
    ("{n} had {a} {o} and gave {b} of them to a friend. How many {o} does {n} have left?", "-"),
    ("{n} collected {a} {o} on Monday and {b} {o} on Tuesday. How many {o} did {n} collect in all?", "+"),
    ("A shelf holds {a} {o}. {n} takes {b} {o} away. How many {o} are still on the shelf?", "-"),
]
INSTRUCTION = "Put the final answer in \\boxed{}."
CORRECT_WEIGHT = 0.8
FORMAT_WEIGHT = 0.2
_BOXED_INT = re.compile(r"\\boxed\{\s*-?\d+\s*\}")
_ID = re.compile(r"wp:(\d{1,3}):(\d{1,3}):(\d{1,3}):(\d{1,9}):(\d{1,9})")


def word_problem_reward(completion_text: str, reference: str) -> float:
    """CORRECT_WEIGHT x math-verify's verdict + FORMAT_WEIGHT x (a boxed integer is present)."""
    formatted = FORMAT_WEIGHT if _BOXED_INT.search(completion_text) else 0.0
    return CORRECT_WEIGHT * math_verify_reward(completion_text, reference) + formatted


class WordProblemTask(Task):
    """Generated arithmetic word problems, deterministic given `task.seed`; see the module docstring."""

    name = "word_problems"

    def __init__(self, max_operand: int = 20, seed: int = 0, eval_size: int = 64):
        self.max_operand = max_operand
        self.seed = seed
        self.eval_size = eval_size
        self._eval = self._build_eval()

    def _prompt(self, t: int, n: int, o: int, a: int, b: int) -> Prompt:
        sentence, op = TEMPLATES[t]
        if op == "-":
            a, b = max(a, b), min(a, b)
        name, pronoun = NAMES[n]
        text = sentence.format(n=name, p=pronoun, o=OBJECTS[o], a=a, b=b) + " " + INSTRUCTION
        answer = a + b if op == "+" else a - b
        return Prompt(prompt_id=f"wp:{t}:{n}:{o}:{a}:{b}", text=text, reference=str(answer))

    def _draw(self, rng: random.Random) -> Prompt:
        return self._prompt(
            rng.randrange(len(TEMPLATES)),
            rng.randrange(len(NAMES)),
            rng.randrange(len(OBJECTS)),
            rng.randint(1, self.max_operand),
            rng.randint(1, self.max_operand),
        )

    def _is_eval(self, prompt: Prompt) -> bool:
        return hash_held_out(self.seed, prompt.prompt_id)

    def _build_eval(self) -> list[Prompt]:
        rng = random.Random(f"eval:{self.seed}")
        found: dict[str, Prompt] = {}
        for _ in range(self.eval_size * 200):  # bounded: a tiny operand range may hold fewer held-out problems
            if len(found) >= self.eval_size:
                break
            prompt = self._draw(rng)
            if self._is_eval(prompt):
                found.setdefault(prompt.prompt_id, prompt)
        return list(found.values())

    def sample(self, n: int, rng: random.Random) -> list[Prompt]:
        out: list[Prompt] = []
        while len(out) < n:
            prompt = self._draw(rng)
            if not self._is_eval(prompt):
                out.append(prompt)
        return out

    def eval_prompts(self) -> list[Prompt]:
        return list(self._eval)

    def get(self, prompt_id: str) -> Prompt | None:
        match = _ID.fullmatch(prompt_id) if isinstance(prompt_id, str) else None
        if not match:
            return None
        t, n, o, a, b = (int(g) for g in match.groups())
        if t >= len(TEMPLATES) or n >= len(NAMES) or o >= len(OBJECTS):
            return None
        if not (1 <= a <= self.max_operand and 1 <= b <= self.max_operand):
            return None
        prompt = self._prompt(t, n, o, a, b)
        return prompt if prompt.prompt_id == prompt_id else None  # subtraction ids list the larger operand first

    def reward(self, prompt: Prompt, completion_text: str) -> float:
        return word_problem_reward(completion_text, prompt.reference)
