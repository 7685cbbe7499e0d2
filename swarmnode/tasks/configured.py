"""A built task with the config's prompt settings and reward functions laid over it (`configure`).

- `task.system_prompt` (else the task's `default_system_prompt`) and `task.chat_template_kwargs` make every
  prompt a conversation (`swarmnode.tasks.chat`); a prompt that has a system message keeps it.
- `task.reward_funcs` / `task.reward_weights`: TRL's reward functions and weights; the name `task` stands for the
  task's own reward function(s). Empty: the task's own. They run through a `RewardRunner` (time limit, failures
  counted per function in `failures`).

A task with neither is returned as it is.
"""

from __future__ import annotations

import random
from dataclasses import replace

from swarmnode.config import TaskConfig
from swarmnode.tasks.base import Prompt, Scored, Task
from swarmnode.tasks.chat import chat_parts, prompt_text
from swarmnode.tasks.reward_runner import RewardRunner
from swarmnode.tasks.rewards import TASK_REWARD, RewardFunc, load_reward_func


def reward_functions(task: Task, cfg: TaskConfig) -> tuple[list[RewardFunc], list[float]]:
    """The reward functions of `cfg` over `task` and their weights (`task` expanded to the task's own)."""
    own, own_weights = task.reward_funcs()
    if not cfg.reward_funcs:
        scale = cfg.reward_weights[0] if cfg.reward_weights else 1.0
        return own, [scale * w for w in own_weights]
    weights = cfg.reward_weights or [1.0] * len(cfg.reward_funcs)
    funcs: list[RewardFunc] = []
    out: list[float] = []
    for spec, weight in zip(cfg.reward_funcs, weights):
        if spec == TASK_REWARD:
            funcs.extend(own)
            out.extend(weight * w for w in own_weights)
        else:
            funcs.append(load_reward_func(spec))
            out.append(weight)
    return funcs, out


class ConfiguredTask(Task):
    """`inner` with a system prompt, chat-template arguments and reward functions (see the module docstring)."""

    def __init__(self, inner: Task, cfg: TaskConfig, funcs: list[RewardFunc], weights: list[float]):
        self.inner, self.name = inner, inner.name
        self.system_prompt = cfg.system_prompt if cfg.system_prompt is not None else inner.default_system_prompt
        self.template_kwargs = dict(cfg.chat_template_kwargs)
        self.runner = RewardRunner(funcs, weights, cfg.reward_timeout)

    def _wrap(self, prompt: Prompt) -> Prompt:
        if not (self.system_prompt or self.template_kwargs):
            return prompt
        parts = chat_parts(prompt.text)
        messages = parts[0] if parts else prompt.text
        kwargs = {**(parts[1] if parts else {}), **self.template_kwargs}
        return replace(prompt, text=prompt_text(messages, self.system_prompt, kwargs))

    def sample(self, n: int, rng: random.Random) -> list[Prompt]:
        return [self._wrap(p) for p in self.inner.sample(n, rng)]

    def eval_prompts(self) -> list[Prompt]:
        return [self._wrap(p) for p in self.inner.eval_prompts()]

    def validation_prompts(self) -> list[Prompt]:
        return [self._wrap(p) for p in self.inner.validation_prompts()]

    def get(self, prompt_id: str) -> Prompt | None:
        found = self.inner.get(prompt_id)
        return None if found is None else self._wrap(found)

    def held_out(self, prompt: Prompt) -> bool:
        return self.inner.held_out(prompt)

    def reward(self, prompt: Prompt, completion_text: str) -> float:
        rewards = self.score(prompt, [completion_text]).rewards
        return rewards[0] if rewards else 0.0

    def score(self, prompt: Prompt, texts: list[str]) -> Scored:
        return self.runner.score(prompt, texts)

    def packages(self) -> dict[str, str]:
        return self.inner.packages()

    def reward_funcs(self) -> tuple[list[RewardFunc], list[float]]:
        return self.runner.funcs, self.runner.weights


def configure(task: Task, cfg: TaskConfig) -> Task:
    """`task` as the config sets its prompts and rewards (itself when the config changes nothing)."""
    plain = not (cfg.reward_funcs or cfg.system_prompt or cfg.chat_template_kwargs or task.default_system_prompt)
    if plain and not cfg.reward_weights and not task.scores_groups:
        return task
    funcs, weights = reward_functions(task, cfg)
    return ConfiguredTask(task, cfg, funcs, weights)
