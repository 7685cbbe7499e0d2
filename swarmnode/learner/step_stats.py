"""The statistics of one optimiser step, taken once over every group drawn and before any split.

- Advantages over every drawn group, zero-signal groups included (their rows get A = 0; with
  `scale_rewards: batch` their rewards count in the batch std, as in TRL, whose batch is the whole generation
  batch of a step).
- GEPO's log E_q[q] per row, over its E_q[q] scope: the prompt's group (`gepo_group_scope: prompt`, the paper), or
  the GEPO authors' micro-batches (`microbatch`): the step's rows shuffled (seeded by the step) and cut into sets
  of `gepo_microbatch_rows` rows from mixed prompts (the last set takes the remainder).

Gradient-accumulation chunks and token-budget micro-batches are cut afterwards; they change nothing here.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from swarmnode.config import LearnerConfig
from swarmnode.learner.losses import advantages, expectation_scope, group_log_expectation


@dataclass
class StepStats:
    """Per row of the step: its group's index, its advantage, its GEPO log E_q[q], and whether its group has
    signal (rows of zero-signal groups are counted but not trained)."""

    group_index: torch.Tensor
    adv: torch.Tensor
    log_e: torch.Tensor
    signal: torch.Tensor


def step_stats(rewards: list[list[float]], seq_logq: list[list[float]], cfg: LearnerConfig, seed: int) -> StepStats:
    """The statistics of a step whose groups have these rewards and length-normalised behaviour log-probs LQ_i
    (one list per group, one value per row); `seed` seeds the micro-batch shuffle."""
    group_index = torch.tensor([gi for gi, group in enumerate(rewards) for _ in group])
    flat_rewards = torch.tensor([r for group in rewards for r in group], dtype=torch.float64)
    adv, zero = advantages(flat_rewards, group_index, cfg.scale_rewards)
    LQ = torch.tensor([lq for group in seq_logq for lq in group], dtype=torch.float64)
    log_e = group_log_expectation(LQ, expectation_scope(group_index, cfg, seed))
    return StepStats(group_index, adv, log_e, ~zero[group_index])


def is_truncated(completion: list[int], max_completion_length: int, end_ids: set[int]) -> bool:
    """A completion cut by the length limit: as long as `max_completion_length` and not ending in an end token
    (TRL's rule, `mask_truncated_completions`)."""
    return len(completion) >= max_completion_length and (not completion or completion[-1] not in end_ids)


def length_summary(lengths: list[int], truncated: list[bool]) -> dict[str, float]:
    """A step's completion lengths (min/mean/max over every drawn row) and the share cut by the length limit."""
    if not lengths:
        return {}
    return {
        "completion_length_min": float(min(lengths)),
        "completion_length_mean": sum(lengths) / len(lengths),
        "completion_length_max": float(max(lengths)),
        "truncated_fraction": sum(truncated) / len(truncated),
    }
