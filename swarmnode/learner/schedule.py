"""The learner's learning-rate schedule: linear warmup, then constant or cosine decay (transformers' schedulers).

`learner.lr_schedule`: `constant_with_warmup` (default), `cosine` (to 0 at `learner.total_steps`), `constant`
(no warmup). `learner.warmup_steps` counts optimiser steps. The scheduler's state is part of the checkpoint, so
a resumed learner continues the same curve.
"""

from __future__ import annotations

import torch

from swarmnode.config import LearnerConfig


def build_scheduler(optimizer: torch.optim.Optimizer, lc: LearnerConfig) -> torch.optim.lr_scheduler.LRScheduler:
    """The configured schedule over `optimizer` (stepped once per optimiser step)."""
    from transformers import get_scheduler  # transformers takes seconds to import; only a learner needs it

    if lc.lr_schedule == "constant":
        return get_scheduler("constant", optimizer)
    return get_scheduler(
        lc.lr_schedule,
        optimizer,
        num_warmup_steps=lc.warmup_steps,
        num_training_steps=max(lc.total_steps, lc.warmup_steps + 1),
    )
