"""A short, seeded supervised warm start of the built-in tiny model on the task's answer FORMAT.

RL from a random init learns the format but plateaus (measured: ~0.3 mean reward). The warm start teaches
"prompt -> answer then EOS" on the task's own prompts, but with label noise: only a fraction `correct_fraction` (config `model.tiny.warm_start_correct`)
of the shown answers are right, the rest are the reference of another random prompt. The model leaves it
producing well-formed answers that are mostly wrong, so the mean reward at temperature 1 starts well below the
maximum and RL has a visible climb ahead. Deterministic given `seed`: it runs on one torch thread whatever the
process's setting (a reduction split over other thread counts rounds differently), so every process that builds
the cached model builds the same weights.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import torch

from swarmnode.config import TaskConfig
from swarmnode.model.prompting import encode_prompt
from swarmnode.tasks import build_task

BATCH_SIZE = 64
LEARNING_RATE = 3e-3


def _answer_text(task_name: str, reference: str) -> str:
    return f"\\boxed{{{reference}}}" if task_name == "math" else reference


def _batch(
    task,
    tokenizer,
    rng: random.Random,
    task_name: str,
    correct_fraction: float,
    max_len: int,
    batch_size: int = BATCH_SIZE,
):
    prompts = task.sample(batch_size, rng)
    decoys = task.sample(batch_size, rng)
    rows, masks = [], []
    for prompt, decoy in zip(prompts, decoys):
        if hasattr(task, "noisy_answer"):  # per-token label noise (long answers)
            reference = task.noisy_answer(prompt, correct_fraction, rng)
        else:
            reference = prompt.reference if rng.random() < correct_fraction else decoy.reference
        p_ids = encode_prompt(tokenizer, prompt.text)  # as the engines encode it (a conversation too)
        a_ids = tokenizer(_answer_text(task_name, reference), add_special_tokens=False)["input_ids"]
        ids = (p_ids + a_ids + [tokenizer.eos_token_id])[-max_len:]
        target = ([0] * len(p_ids) + [1] * (len(a_ids) + 1))[-max_len:]
        rows.append(ids)
        masks.append(target)
    width = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
    attn = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    loss_mask = torch.tensor([[0] * (width - len(m)) + m for m in masks], dtype=torch.float32)
    return ids, attn, loss_mask


def step_reporter(emit: Callable[[str], None], total: int, parts: int = 10) -> Callable[[int, float], None]:
    """An `on_step(step, loss)` that emits one progress line every `total / parts` steps (and at the end)."""
    began = time.monotonic()
    every = max(1, total // parts)

    def on_step(step: int, loss: float) -> None:
        if step % every == 0 or step == total:
            elapsed = time.monotonic() - began
            left = elapsed / step * (total - step)
            emit(
                f"  warm start {step}/{total} steps ({100 * step // total} %), loss {loss:.3f}, "
                f"{elapsed:.0f} s so far, ~{left:.0f} s left"
            )

    return on_step


def warm_start(
    model,
    tokenizer,
    task_cfg: TaskConfig,
    steps: int,
    seed: int,
    correct_fraction: float,
    batch_size: int = BATCH_SIZE,
    on_step: Callable[[int, float], None] | None = None,
) -> list[float]:
    """Train `model` in place for `steps` supervised steps; returns the loss per step. `on_step(step, loss)` is
    called after each (e.g. a `step_reporter`).

    A task with per-token label noise (`noisy_answer`, e.g. digitmap) is shown clean answers for the first half
    of the steps and noisy ones after: a tiny model does not find a long-range lookup under 50 % noise within a
    few hundred steps (digitmap, 128 digits: 0.108 per-digit accuracy after 100 noisy steps, 0.993 after 100
    clean ones), and the noisy half brings its per-digit accuracy back down to about `correct_fraction`."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _train(model, tokenizer, task_cfg, steps, seed, correct_fraction, batch_size, on_step)
    finally:
        torch.set_num_threads(threads)


def _train(
    model,
    tokenizer,
    task_cfg: TaskConfig,
    steps: int,
    seed: int,
    correct_fraction: float,
    batch_size: int,
    on_step: Callable[[int, float], None] | None,
) -> list[float]:
    task = build_task(task_cfg)
    rng = random.Random(f"warmstart:{seed}")
    torch.manual_seed(seed)
    max_len = model.config.max_position_embeddings
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=0.0)
    model.train()
    losses = []
    noisy_tokens = hasattr(task, "noisy_answer")
    for step in range(steps):
        shown = 1.0 if noisy_tokens and step < steps // 2 else correct_fraction
        ids, attn, loss_mask = _batch(task, tokenizer, rng, task_cfg.name, shown, max_len, batch_size)
        positions = (attn.cumsum(-1) - 1).clamp(min=0)  # as generate() numbers left-padded rows
        logits = model(input_ids=ids, attention_mask=attn, position_ids=positions).logits[:, :-1].float()
        nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
        loss = (nll * loss_mask[:, 1:]).sum() / loss_mask[:, 1:].sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(float(loss.detach()))
        if on_step is not None:
            on_step(len(losses), losses[-1])
    model.eval()
    return losses
