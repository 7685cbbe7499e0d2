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


def evaluate(model, tokenizer, task: Task, *, samples: int = 4, temperature: float = 1.0, max_new_tokens: int = 8,
             max_prompt_tokens: int = 64, seed: int = 0) -> dict[str, float]:
    """{'eval_reward': mean@k, 'eval_exact': exact@k, 'eval_prompts': n} for `model` on `task.eval_prompts()`."""
    prompts = task.eval_prompts()
    if not prompts:
        return {"eval_reward": 0.0, "eval_exact": 0.0, "eval_prompts": 0.0}
    was_training = model.training
    engine = HFEngine(model, tokenizer, max_prompt_tokens=max_prompt_tokens)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            generations = engine.generate([p.text for p in prompts], samples, temperature, max_new_tokens)
    finally:
        model.train(was_training)
    rewards = [task.reward(p, text) for p, g in zip(prompts, generations) for text in g.texts]
    return {
        "eval_reward": statistics.fmean(rewards),
        "eval_exact": sum(r >= 1.0 for r in rewards) / len(rewards),
        "eval_prompts": float(len(prompts)),
    }
