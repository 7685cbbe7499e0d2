"""The step's micro-batches (gradient-accumulation chunks of rows, each cut by a token budget) and each
micro-batch's share of the step's loss (their diagnostics merge in `learner.step_totals`).

A chunk holds `rows_per_chunk(cfg)` = ceil(prompts_per_step x num_generations / gradient_accumulation_steps) rows,
as TRL's per-device batch: a chunk may end inside a group (the group statistics are the step's, see below). The
largest forward/backward pass the loop runs is therefore what `learner.memory.micro_batch_rows_and_tokens` sizes
(`plan_microbatches` is the loop's own split; tests check it against the estimate for every preset).

Group statistics (advantages, GEPO's log E_q[q]) depend only on sampler data, so the loop computes them once per
step first (`learner.step_stats`); rows can then be cut into micro-batches freely. A micro-batch holds at most
`max_tokens` padded tokens (rows x (longest prompt + longest completion) in it); a row longer than the budget
goes alone. Rows are ordered by length first so that rows of a similar length share a micro-batch (less padding).
Scaling each micro-batch's mean loss by its share of the step's normaliser makes the accumulated gradient equal
the unsplit batch's.
"""

from __future__ import annotations

import math


def token_budget_batches(lengths: list[tuple[int, int]], max_tokens: int) -> list[list[int]]:
    """Row indices grouped into micro-batches; `lengths[i]` is row i's (prompt tokens, completion tokens)."""
    if max_tokens <= 0:
        return [list(range(len(lengths)))] if lengths else []
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i][0] + lengths[i][1], i))
    batches: list[list[int]] = []
    current: list[int] = []
    widest = (0, 0)
    for i in order:
        p, c = max(widest[0], lengths[i][0]), max(widest[1], max(1, lengths[i][1]))
        if current and (len(current) + 1) * (p + c) > max_tokens:
            batches.append(current)
            current, (p, c) = [], (lengths[i][0], max(1, lengths[i][1]))
        current.append(i)
        widest = (p, c)
    if current:
        batches.append(current)
    return batches


def loss_share(aggregation: str, batch: list[int], chunk: list[int], step: list[int]) -> float:
    """The factor that turns a micro-batch's own mean loss into its part of the step's loss.

    `batch`, `chunk` and `step` are the completion lengths of the micro-batch's rows, of its
    gradient-accumulation chunk (what TRL's `policy_loss` sees in one micro-batch) and of the whole step.
    By `learner.loss_type` (TRL's token aggregation): grpo (sequence mean) rows / step rows; bnpo (token mean of
    the chunk) chunk rows / step rows x tokens / chunk tokens; dapo (token mean of the whole step) tokens / step
    tokens; dr_grpo (sum / (rows x max_completion_length), a constant) rows / step rows, as grpo. The optional
    `cppo_beta` KL term is part of the per-token loss, aggregated the same way: the split stays exact. With
    `learner.loss_normaliser: drawn`, `step` holds every drawn row (zero-signal groups included, as TRL).
    """
    if aggregation == "bnpo":
        return len(chunk) / len(step) * max(1, sum(batch)) / max(1, sum(chunk))
    if aggregation == "dapo":
        return max(1, sum(batch)) / max(1, sum(step))
    return len(batch) / len(step)


def rows_per_chunk(prompts_per_step: int, num_generations: int, gradient_accumulation_steps: int) -> int:
    """Rows of one gradient-accumulation chunk: a full step's rows over `gradient_accumulation_steps` (rounded up)."""
    return max(1, math.ceil(prompts_per_step * num_generations / gradient_accumulation_steps))


def plan_microbatches(
    lengths: list[tuple[int, int]], chunk_rows: int, max_tokens: int
) -> list[tuple[list[int], list[list[int]]]]:
    """The loop's split of a step's trained rows (`lengths[i]`: row i's prompt and completion tokens, in the step's
    order): contiguous chunks of `chunk_rows` rows, each cut into token-budget micro-batches; per chunk, (its row
    indices, its micro-batches as row indices)."""
    plan = []
    for start in range(0, len(lengths), chunk_rows):
        chunk = list(range(start, min(start + chunk_rows, len(lengths))))
        batches = token_budget_batches([lengths[i] for i in chunk], max_tokens)
        plan.append((chunk, [[chunk[j] for j in b] for b in batches]))
    return plan
