"""The gradient of one optimiser step: group statistics per accumulation chunk, token-budget micro-batches,
log-probs under the configured precision, the policy loss, and per-group isolation of a non-finite loss.

`PolicyGradient.accumulate(groups, step)` runs forward and backward over validated rows (gradients add up in
`.grad`); the learner loop clips, steps the optimiser and merges the returned diagnostics with `weighted_mean`.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from swarmnode.config import LearnerConfig
from swarmnode.learner.losses import group_advantages, group_log_expectation, policy_loss, ratio_peqq_variance
from swarmnode.learner.microbatch import loss_share, token_budget_batches
from swarmnode.learner.precision import Precision
from swarmnode.logprobs import completion_scores


class Row:
    """One completion of a validated group: its tokens, behaviour log-probs, recomputed reward, staleness."""

    __slots__ = ("group", "prompt_tokens", "completion", "logq", "reward", "temperature", "staleness")

    def __init__(self, group: Any, completion: list[int], logq: list[float], reward: float, staleness: int):
        self.group, self.completion, self.logq, self.reward = group, completion, logq, reward
        self.prompt_tokens, self.temperature, self.staleness = group.prompt_tokens, group.temperature, staleness


class PolicyGradient:
    """Forward and backward passes of the policy loss over groups of rows; see the module docstring.

    `on_dropped(group)` is called for each group whose own loss was not finite (it is left out of the step)."""

    def __init__(self, model: torch.nn.Module, pad_token_id: int, lc: LearnerConfig, precision: Precision,
                 on_dropped: Callable[[Any], None]):
        self.model, self.pad_token_id, self.lc, self.precision = model, pad_token_id, lc, precision
        self.on_dropped = on_dropped
        self.step = 0

    def accumulate(self, groups: list[list[Row]], step: int) -> list[tuple[int, dict]]:
        """Forward and backward over `groups` (gradients add up in `.grad`); per chunk (rows, diagnostics).

        Group statistics are computed per gradient-accumulation chunk of whole groups, then the chunk's rows are
        cut by the token budget; each micro-batch's loss is scaled by its share of the whole step's loss. The
        paper's `ratio_peqq_var` is taken over the whole chunk, as without the split. `step` seeds the loss's
        shuffles.
        """
        self.step = step
        step_lengths = [len(r.completion) for rows in groups for r in rows]
        diags: list[tuple[int, dict]] = []
        for chunk in (c for c in split(groups, self.lc.gradient_accumulation_steps) if c):
            rows = [r for group in chunk for r in group]
            group_index = torch.tensor([gi for gi, group in enumerate(chunk) for _ in group])
            rewards = torch.tensor([r.reward for r in rows], dtype=torch.float32)
            adv = group_advantages(rewards, group_index, self.lc)
            seq_logq = torch.tensor([sum(r.logq) / max(1, len(r.logq)) for r in rows], dtype=torch.float32)
            log_e = group_log_expectation(seq_logq, group_index, self.lc)
            seq_logp = torch.zeros(len(rows))
            chunk_lengths = [len(r.completion) for r in rows]
            parts: list[tuple[int, dict]] = []
            sizes = [(len(r.prompt_tokens), len(r.completion)) for r in rows]
            for batch in token_budget_batches(sizes, self.lc.max_tokens_per_microbatch):
                loss, diag, seq_logp[batch] = self._micro_loss(
                    [rows[i] for i in batch], group_index[batch], adv[batch], log_e[batch])
                share = loss_share(self.lc.loss_type, [chunk_lengths[i] for i in batch], chunk_lengths, step_lengths)
                (loss * share).backward()
                parts.append((len(batch), diag))
            merged = weighted_mean(parts)
            merged["ratio_peqq_var"] = ratio_peqq_variance(seq_logp, seq_logq, step)
            diags.append((len(rows), merged))
        return diags

    def _micro_loss(self, rows: list[Row], group_index, adv, log_e) -> tuple[torch.Tensor, dict, torch.Tensor]:
        """(loss, diagnostics, per-row length-normalised learner log-prob) of one micro-batch."""
        device = next(self.model.parameters()).device
        with self.precision.autocast():
            scores = completion_scores(
                self.model, [r.prompt_tokens for r in rows], [r.completion for r in rows],
                [r.temperature for r in rows], self.pad_token_id,
            )
        logq = torch.zeros_like(scores.logp, dtype=torch.float32)
        for i, r in enumerate(rows):
            if r.logq:
                logq[i, : len(r.logq)] = torch.as_tensor(r.logq, dtype=torch.float32)
        rewards = torch.tensor([r.reward for r in rows], device=device)
        staleness = torch.tensor([r.staleness for r in rows], device=device)
        args = (scores.logp, logq.to(device), scores.mask, rewards, group_index.to(device), staleness,
                adv.to(device), log_e.to(device))
        loss, diag = self._policy_loss(*args)
        if not torch.isfinite(loss):
            loss, diag = self._isolate(rows, *args)
        with torch.no_grad():
            diag["learner_entropy"] = float(scores.entropy[scores.mask].mean()) if scores.mask.any() else 0.0
            seq_logp = scores.logp.detach().sum(dim=1) / scores.mask.sum(dim=1).clamp(min=1)
        return loss, diag, seq_logp.float().cpu()

    def _policy_loss(self, logp, logq, mask, rewards, group_index, staleness, adv, log_e):
        return policy_loss(self.lc.algorithm, logp, logq, mask, rewards, group_index, self.lc, staleness,
                           shuffle_seed=self.step, adv=adv, log_e=log_e)

    def _isolate(self, rows: list[Row], *args: torch.Tensor) -> tuple[torch.Tensor, dict]:
        """The loss of a micro-batch whose loss was not finite, group by group from the same forward pass: the
        groups whose own loss is not finite are dropped (reported to `on_dropped`), the others' losses are
        averaged by rows."""
        group_index = args[4]
        kept: list[tuple[int, dict]] = []
        total = args[0].sum() * 0.0  # keeps the graph (and a zero gradient) when every group is dropped
        for gi in torch.unique(group_index).tolist():
            mine = group_index == gi
            loss, diag = self._policy_loss(*(a[mine] for a in args))
            if not torch.isfinite(loss):
                self.on_dropped(rows[int(mine.nonzero()[0])].group)
                continue
            n = int(mine.sum())
            kept.append((n, diag))
            total = total + loss * n
        n = sum(k for k, _ in kept)
        return (total / n if n else total), (weighted_mean(kept) if kept else {})


def split(items: list, parts: int) -> list[list]:
    """`items` cut into `parts` contiguous, nearly equal pieces."""
    k, extra = divmod(len(items), parts)
    out, start = [], 0
    for i in range(parts):
        end = start + k + (1 if i < extra else 0)
        out.append(items[start:end])
        start = end
    return out


def weighted_mean(diags: list[tuple[int, dict]]) -> dict:
    """Row-weighted mean of each diagnostic over micro-batches (exact when there is one micro-batch)."""
    keys = {k for _, d in diags for k in d}
    out = {}
    for k in keys:
        pairs = [(n, d[k]) for n, d in diags if k in d]
        weight = sum(n for n, _ in pairs)
        out[k] = sum(n * v for n, v in pairs) / weight
    for k in ("staleness_min", "staleness_max", "is_weight_max"):
        if k in keys:
            out[k] = (min if k.endswith("min") else max)(d[k] for _, d in diags if k in d)
    return out
