"""Reward functions (TRL's signature) that give a 135M model a learnable signal on reasoning-gym arithmetic.

SmolLM2-135M-Instruct never writes `<answer>` tags untrained (bench/tasks/README.md, `signal`), so the tag-based
scorer pays nothing and no group has a reward spread. These pay for what it does write:

- `last_number_reward`: 1.0 when the last number of the completion equals the reference answer, 0.3 when the
  answer appears earlier in it, else 0.0.
- `tag_reward`: 0.5 for an opening `<answer>` tag, 0.5 more for a closing one (partial credit for the format).

Used through `task.reward_funcs=[task, bench/tasks/lenient_rewards.py:last_number_reward, ...]`.
"""

from __future__ import annotations

import re
from typing import Any

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _text(completion: Any) -> str:
    return completion[-1]["content"] if isinstance(completion, list) else str(completion)


def _same(a: str, b: str) -> bool:
    try:
        return float(a) == float(b)
    except ValueError:
        return a.strip() == b.strip()


def last_number_reward(prompts: list, completions: list, answer: list, **_: Any) -> list[float]:
    """1.0 for the answer as the completion's last number, 0.3 for it anywhere else in it, else 0.0."""
    out = []
    for completion, ref in zip(completions, answer):
        numbers = _NUMBER.findall(_text(completion))
        if numbers and _same(numbers[-1], str(ref)):
            out.append(1.0)
        else:
            out.append(0.3 if any(_same(n, str(ref)) for n in numbers) else 0.0)
    return out


def tag_reward(prompts: list, completions: list, **_: Any) -> list[float]:
    """0.5 for `<answer>` in the completion, 0.5 more for `</answer>` after it."""
    out = []
    for completion in completions:
        text = _text(completion)
        opened = text.find("<answer>")
        out.append(0.0 if opened < 0 else 0.5 + (0.5 if "</answer>" in text[opened:] else 0.0))
    return out
