"""Held-out evaluation: the expected reward of a policy on the task's eval prompts (never trained on).

The metric is `mean@k`: k completions per eval prompt sampled at the sampling temperature, scored by the task,
averaged — the RL objective itself, measured on held-out prompts — plus `exact@k`, the fraction of those
completions that earn the full reward, and `pass@k`, the fraction of prompts with at least one that does.
Sampling uses its own seeded torch generator state, so evaluating does not change the training run's random stream.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

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
    """{'<split>_reward': mean@k, '<split>_exact': exact@k, '<split>_pass': pass@k, '<split>_prompts': n} for
    `model` on the task's held-out prompts: `split` "eval" = `task.eval_prompts()`, "val" = `task.validation_prompts()`."""
    rows = prompt_rewards(
        model,
        tokenizer,
        task,
        samples=samples,
        temperature=temperature,
        max_new_tokens=max_new_tokens,
        max_prompt_tokens=max_prompt_tokens,
        seed=seed,
        split=split,
    )
    rewards = [r for row in rows for r in row]
    if not rewards:
        return {f"{split}_reward": 0.0, f"{split}_exact": 0.0, f"{split}_pass": 0.0, f"{split}_prompts": 0.0}
    return {
        f"{split}_reward": statistics.fmean(rewards),
        f"{split}_exact": sum(r >= 1.0 for r in rewards) / len(rewards),
        f"{split}_pass": sum(max(row) >= 1.0 for row in rows if row) / len(rows),
        f"{split}_prompts": float(len(rows)),
    }


def prompt_rewards(
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
    batch: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[list[float]]:
    """The `samples` rewards of each held-out prompt of `split`, in the task's order (two models scored with the
    same arguments are paired prompt by prompt). `batch`: prompts per generation call (None: all in one), each
    call seeded with `seed` + its index; `progress(done, total)` after each call."""
    prompts = task.eval_prompts() if split == "eval" else task.validation_prompts()
    was_training = model.training
    engine = HFEngine(model, tokenizer, max_prompt_tokens=max_prompt_tokens)
    size = batch or max(1, len(prompts))
    rows: list[list[float]] = []
    try:
        for i, start in enumerate(range(0, len(prompts), size)):
            part = prompts[start : start + size]
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed + i)
                generations = engine.generate([p.text for p in part], samples, temperature, max_new_tokens)
            rows += [task.score(p, g.texts).rewards or [0.0] * len(g.texts) for p, g in zip(part, generations)]
            if progress is not None:
                progress(len(rows), len(prompts))
    finally:
        model.train(was_training)
    return rows
