"""A learner step's gradients: the step's statistics once over every group drawn, then forward and backward per
micro-batch, then the optimiser step (the `StepGradients` part of `LearnerLoop`).

The step's statistics (`learner.step_stats`: advantages, zero-signal groups included in a batch std, and GEPO's
E_q[q]) are taken once over every group drawn; zero-signal groups are skipped (unless `beta` > 0: TRL's reference
KL still acts on them); the rest are cut into chunks of
ceil(prompts_per_step x num_generations / gradient_accumulation_steps) rows (as TRL's per-device batch), and each
chunk into micro-batches of at most `max_tokens_per_microbatch` padded tokens (`learner.microbatch`: the gradient
equals the unsplit one); the paper's `ratio_peqq_var` is taken once over the step's trained rows. Log-probs are
computed (chunked lm_head, no [B, T, V] logits) at each row's sampling temperature under the configured precision
(`learner.precision`); then `policy_loss`, AdamW with gradient clipping and the learning-rate schedule
(`learner.schedule`).

One group cannot poison a step: a micro-batch whose loss is not finite is recomputed group by group from the same
forward pass; the groups whose own loss is not finite are dropped (counted `poisoned_group`, reported to
`on_poisoned` so the node can strike their sender) and the rest of the step trains.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import torch

from swarmnode.config import LearnerConfig, NodeConfig
from swarmnode.learner.buffer import ReplayBuffer
from swarmnode.learner.hooks import LearnerHooks
from swarmnode.learner.losses import policy_loss, ratio_peqq_variance_tensor
from swarmnode.learner.microbatch import loss_share, plan_microbatches, rows_per_chunk
from swarmnode.learner.precision import Precision
from swarmnode.learner.reference import ReferencePolicy
from swarmnode.learner.row_tensors import row_tensors
from swarmnode.learner.rows import Row
from swarmnode.learner.step_stats import StepStats, is_truncated, step_stats
from swarmnode.learner.step_totals import merge
from swarmnode.learner.typicality import TypicalityWatch
from swarmnode.learner.verify import SpotChecker
from swarmnode.model.logprobs import completion_scores
from swarmnode.model.transfers import readback, readback_with, to_device

_FINITE = "_loss_is_finite"  # read back with a micro-batch's diagnostics, then removed


class StepGradients:
    """The gradient half of a learner step; `LearnerLoop` sets the state it reads."""

    model: Any  # a torch.nn.Module (a peft one under LoRA)
    tokenizer: Any
    cfg: NodeConfig
    lc: LearnerConfig
    precision: Precision
    reference: ReferencePolicy | None
    optimizer: torch.optim.Optimizer
    scheduler: Any  # a torch LR scheduler
    trainable: list[torch.nn.Parameter]
    step_count: int
    rejected: Counter[str]
    hooks: LearnerHooks
    _end_ids: set[int]
    _weights_published: bool
    typical: TypicalityWatch
    verifier: SpotChecker
    buffer: ReplayBuffer

    def _optimise(self, groups: list[list[Row]]) -> dict:
        self.typical.exact = self._weights_published  # the weights are the current version's: typicality is exact
        self._weights_published = False  # the step below moves them
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        merged = self.accumulate_gradients(groups, lazy=True)
        self.precision.unscale(self.optimizer)
        params = [p for p in self.trainable if p.grad is not None]
        norm = torch.nn.utils.clip_grad_norm_(params, self.lc.max_grad_norm)
        typical = self.typical.take()
        read, sums = readback_with({**merged, "grad_norm": norm}, typical[1] if typical else None)  # one transfer
        figures: dict[str, Any] = dict(read)
        if typical is not None and sums is not None:
            self._judge_typicality(typical[0], sums)
        learning_rate = self.optimizer.param_groups[0]["lr"]
        if not self.precision.optimizer_step(self.optimizer, math.isfinite(figures["grad_norm"])):
            # under fp16's loss scaler an overflow is routine (the scale shrinks); otherwise it is bad data
            self.rejected["loss_scale_overflow_steps" if self.precision.scaler else "nonfinite_grad_steps"] += 1
        else:
            self.scheduler.step()  # the schedule counts the steps the optimiser took
        self.optimizer.zero_grad(set_to_none=True)
        figures.update(learning_rate=learning_rate)
        if self.precision.scaler is not None:
            figures["loss_scale"] = self.precision.loss_scale
        return figures

    def _judge_typicality(self, rows: list, sums: list[list[float]]) -> None:
        """Catch the sender of each far-out group of the step (`learner.typicality`): checked at rate 1 from now
        on, its buffered groups dropped, reported to `on_poisoned`."""
        for group, score in self.typical.flagged(rows, sums):
            if not self.hooks.checkable(group):
                continue
            self.rejected["atypical"] += 1
            self.verifier.catch(group.sampler_id)
            self.rejected["liar_buffered"] += self.buffer.drop_sampler(group.sampler_id)
            if self.hooks.on_poisoned is not None:
                self.hooks.on_poisoned(group, f"atypical (its tokens {score:.1f} sd less likely than the policy's)")

    def accumulate_gradients(self, groups: list[list[Row]], lazy: bool = False) -> dict:
        """Forward and backward over the step's `groups` (gradients add up in `.grad`); the step's diagnostics.

        The step's statistics come first, over every group (`step_stats`); the groups with signal are then cut
        into gradient-accumulation chunks of rows and each chunk into token-budget micro-batches (`plan_microbatches`);
        each micro-batch's loss is scaled by its share of the whole step's loss. The paper's `ratio_peqq_var` is
        taken once, over the step's trained rows (with `lazy`, a scalar tensor on the device, read back later
        with the step's other figures).
        """
        stats = self.step_statistics(groups)
        rows = [r for group in groups for r in group]
        starts = [sum(len(g) for g in groups[:gi]) for gi in range(len(groups))]
        trained = [
            [starts[gi] + j for j in range(len(g))]
            for gi, g in enumerate(groups)
            if self.trains_zero_signal or bool(stats.signal[starts[gi]])
        ]
        order = [i for group in trained for i in group]  # the trained rows, in the order of seq_logp below
        step_lengths = [len(rows[i].completion) for i in order]
        # the loss's normaliser: the trained rows, or every drawn row (`loss_normaliser: drawn`, as TRL)
        normaliser = [len(r.completion) for r in rows] if self.lc.loss_normaliser == "drawn" else step_lengths
        truncated = torch.tensor([self._truncated(r) for r in rows])
        device = next(self.model.parameters()).device
        seq_logp = torch.zeros(len(order), device=device)
        parts: list[tuple[float, dict]] = []
        chunk_rows = rows_per_chunk(
            self.lc.prompts_per_step, self.cfg.sampler.num_generations, self.lc.gradient_accumulation_steps
        )
        sizes = [(len(rows[i].prompt_tokens), len(rows[i].completion)) for i in order]
        for chunk, batches in plan_microbatches(sizes, chunk_rows, self.lc.max_tokens_per_microbatch):
            chunk_lengths = [step_lengths[k] for k in chunk]
            for batch in batches:
                picked = [order[k] for k in batch]
                loss, diag, logp = self._micro_loss(
                    [rows[i] for i in picked],
                    stats.group_index[picked],
                    stats.adv[picked],
                    stats.log_e[picked],
                    truncated[picked],
                )
                seq_logp[to_device(torch.tensor(batch), device)] = logp
                share = loss_share(self.lc.loss_type, [step_lengths[k] for k in batch], chunk_lengths, normaliser)
                self.precision.backward(loss * share)
                parts.append((share, diag))
        merged: dict[str, Any] = merge(parts)  # sums and counts, divided once (`learner.step_totals`)
        seq_logq = torch.tensor([mean_logq(rows[i]) for i in order], dtype=torch.float32)
        merged["ratio_peqq_var"] = ratio_peqq_variance_tensor(seq_logp, to_device(seq_logq, device), self.step_count)
        return merged if lazy else readback(merged)

    @property
    def trains_zero_signal(self) -> bool:
        """Whether zero-signal groups are trained (A = 0): with TRL's `beta` > 0 their reference KL still pulls, and
        they count in the loss's normaliser, as in TRL; otherwise they are counted and skipped."""
        return self.lc.beta > 0

    def step_statistics(self, groups: list[list[Row]]) -> StepStats:
        """Advantages and GEPO's log E_q[q] of every row of the step's groups (`learner.step_stats`)."""
        return step_stats(
            [[r.reward for r in g] for g in groups],
            [[mean_logq(r) for r in g] for g in groups],
            self.lc,
            self.step_count,
        )

    def _micro_loss(
        self, rows: list[Row], group_index, adv, log_e, truncated
    ) -> tuple[torch.Tensor, dict, torch.Tensor]:
        """(loss, diagnostics, per-row length-normalised learner log-prob on the device) of one micro-batch; the
        host waits for the device once, to read the diagnostics and whether the loss is finite."""
        device = next(self.model.parameters()).device
        with self.precision.autocast():
            scores = completion_scores(
                self.model,
                [r.prompt_tokens for r in rows],
                [r.completion for r in rows],
                [r.temperature for r in rows],
                self.tokenizer.pad_token_id,
                variance=self.typical.enabled,
            )
        self.typical.add(rows, scores.logp, scores.entropy, scores.variance, scores.mask)
        data = row_tensors(rows, scores.logp.shape[1], group_index, device)
        ref = (
            data.logq
            if self.reference is None
            else self.reference.logprobs(
                [r.prompt_tokens for r in rows],
                [r.completion for r in rows],
                [r.temperature for r in rows],
                self.tokenizer.pad_token_id,
                self.precision.autocast,
            ).to(device)
        )  # (logq: unused without beta)
        args = (
            scores.logp,
            data.logq,
            scores.mask,
            data.rewards,
            data.group_index,
            data.staleness,
            to_device(adv, device),
            to_device(log_e, device),
            ref,
            to_device(truncated, device),
        )
        loss, lazy = self._policy_loss(*args, lazy=True)
        where = scores.where
        assert where is not None  # completion_scores always sets it
        with torch.no_grad():
            tokens = where[0].numel()  # known on the host
            lazy["learner_entropy"] = scores.entropy[where].mean() if tokens else 0.0
            lazy["_n_learner_entropy"] = float(tokens)
            lazy[_FINITE] = torch.isfinite(loss)
            seq_logp = scores.logp.detach().sum(dim=1) / scores.mask.sum(dim=1).clamp(min=1)
        diag = readback(lazy)
        if not diag.pop(_FINITE):
            entropy = {k: diag[k] for k in ("learner_entropy", "_n_learner_entropy")}
            loss, diag = self._isolate(rows, *args)
            diag.update(entropy)
        return loss, diag, seq_logp.float()

    def _truncated(self, row: Row) -> bool:
        """Whether a row's completion was cut by `sampler.max_completion_length` (`mask_truncated_completions`)."""
        return is_truncated(row.completion, self.cfg.sampler.max_completion_length, self._end_ids)

    def _policy_loss(
        self, logp, logq, mask, rewards, group_index, staleness, adv, log_e, ref_logp, truncated, lazy=False
    ):
        return policy_loss(
            self.lc.algorithm,
            logp,
            logq,
            mask,
            rewards,
            group_index,
            self.lc,
            staleness,
            shuffle_seed=self.step_count,
            adv=adv,
            log_e=log_e,
            lazy=lazy,
            max_completion_length=self.cfg.sampler.max_completion_length,
            ref_logp=ref_logp if self.reference is not None else None,
            truncated=truncated,
        )

    def _isolate(self, rows: list[Row], *args: torch.Tensor) -> tuple[torch.Tensor, dict]:
        """The loss of a micro-batch whose loss was not finite, group by group from the same forward pass: the
        groups whose own loss is not finite are dropped (counted, reported to `on_poisoned`); each kept group's
        loss counts with its share of the whole micro-batch's normaliser (`loss_share`), so the kept groups weigh
        what they would have weighed beside the dropped ones."""
        group_index = args[4]
        lengths = args[2].sum(dim=1).tolist()
        kept: list[tuple[float, dict]] = []
        total = args[0].sum() * 0.0  # keeps the graph (and a zero gradient) when every group is dropped
        for gi in torch.unique(group_index).tolist():
            mine = group_index == gi
            loss, diag = self._policy_loss(*(a[mine.to(a.device)] for a in args))
            if not torch.isfinite(loss):
                self.rejected["poisoned_group"] += 1
                if self.hooks.on_poisoned is not None:
                    self.hooks.on_poisoned(
                        rows[int(mine.nonzero()[0])].group, "poisoned_group (its loss was not finite)"
                    )
                continue
            own = [int(x) for x, m in zip(lengths, mine.tolist()) if m]
            share = loss_share(self.lc.loss_type, own, lengths, lengths)
            kept.append((share, diag))
            total = total + loss * share
        merged = merge(kept) if kept else {}
        return total, {**merged, "_n_rows": float(sum(int(d.get("_n_rows", 0)) for _, d in kept))}


def mean_logq(row: Row) -> float:
    """LQ_i: the row's length-normalised behaviour log-prob."""
    return sum(row.logq) / max(1, len(row.logq))
