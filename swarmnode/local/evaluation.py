"""Held-out evaluation: the expected reward of a policy on the task's eval prompts (never trained on).

The metric is `mean@k`: k completions per eval prompt sampled at the sampling temperature, scored by the task,
averaged — the RL objective itself, measured on held-out prompts — plus `exact@k`, the fraction of those
completions that earn the full reward. Sampling uses its own seeded torch generator state, so evaluating does
not change the training run's random stream.
"""

from __future__ import annotations

import statistics

import torch

from swarmnode.sampler.engines import HFEngine
from swarmnode.tasks import Task


def evaluate(
    model,
    tokenizer,
    task: Task,
    *,
    samples: int = 4,
    temperature: float = 1.0,
    max_new_tokens: int = 8,
    max_prompt_tokens: int = 64,
    seed: int = 0,
    split: str = "eval",
) -> dict[str, float]:
    """{'<split>_reward': mean@k, '<split>_exact': exact@k, '<split>_prompts': n} for `model` on the task's
    held-out prompts: `split` "eval" = `task.eval_prompts()`, "val" = `task.validation_prompts()`."""
    prompts = task.eval_prompts() if split == "eval" else task.validation_prompts()
    if not prompts:
        return {f"{split}_reward": 0.0, f"{split}_exact": 0.0, f"{split}_prompts": 0.0}
    was_training = model.training
    engine = HFEngine(model, tokenizer, max_prompt_tokens=max_prompt_tokens)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            generations = engine.generate([p.text for p in prompts], samples, temperature, max_new_tokens)
    finally:
        model.train(was_training)
    rewards = [r for p, g in zip(prompts, generations) for r in task.score(p, g.texts).rewards or [0.0] * len(g.texts)]
    return {
        f"{split}_reward": statistics.fmean(rewards),
        f"{split}_exact": sum(r >= 1.0 for r in rewards) / len(rewards),
        f"{split}_prompts": float(len(prompts)),
    }
