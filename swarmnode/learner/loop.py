"""The network-free learner loop: buffer -> validated batch -> GEPO/GSPO/GRPO step -> versions and checkpoints.

Per optimiser step: draw `prompts_per_step` groups; reject (and count) groups whose prompt id the task does not
know or whose prompt tokens differ from the learner's own tokenisation, and recompute every reward from the decoded
completion (the sender's rewards are only a hint; `learner.rows`); take the step's statistics once over every
group drawn (`learner.step_stats`: advantages, zero-signal groups included in a batch std, and GEPO's E_q[q]);
skip zero-signal groups (unless `beta` > 0: TRL's reference KL still acts on them); cut the rest into chunks of
ceil(prompts_per_step x num_generations / gradient_accumulation_steps) rows (as TRL's per-device batch), and each
chunk into micro-batches of at most `max_tokens_per_microbatch` padded tokens (`learner.microbatch`: the
gradient equals the unsplit one); the paper's `ratio_peqq_var` is taken once over the step's trained rows;
compute log-probs (chunked lm_head, no [B, T, V]
logits) at each row's sampling temperature under the configured precision (`learner.precision`);
`policy_loss`; AdamW with gradient clipping and the learning-rate schedule (`learner.schedule`). Every
`publish_every` steps the version goes up and `publish(version, state_dict)` receives a CPU copy of the weights
in `model.dtype` (with `publish_in_background`, from a worker thread that publishes the newest version
handed in: `learner.publish_worker`; while `local_versions`: a learner averaging with others takes its versions
from the rounds, through `adopt_version`). With `learner.lora.enabled` the model is wrapped by peft
(`learner.lora`) and only the adapters train; a published version is adapter-only: `publish(version, adapters,
adapter_spec)` gets the adapter tensors
and an `AdapterSpec` naming the base weights by content hash (with `adapter_versions=False`, the base with the
adapters folded in, as full weights); the checkpoint holds the adapters only. Every `checkpoint_every` steps
(and whenever the caller asks, e.g. on SIGTERM) the whole state (with the LR schedule) is written atomically; on
construction with a checkpoint directory holding one, the loop resumes at the same step and version.

One group cannot poison a step: prompts of the task's held-out evaluation split are refused (counted
`eval_prompt`), and a micro-batch whose loss is not finite is recomputed group by group from the same forward
pass; the groups whose own loss is not finite are dropped (counted `poisoned_group`, reported to `on_poisoned`
so the node can strike their sender) and the rest of the step trains. A sample of on-policy groups is
spot-verified (`swarmnode.learner.verify`): their behaviour log-probs are recomputed and a group that lies is
refused (counted `logprob_mismatch`, reported to `on_poisoned`).

Versions never go backwards: with `published_path`, every version is recorded there (fsynced) before it is
published (with `publish_in_background`, `RESERVE_VERSIONS` ahead, so one fsync covers several steps; a
checkpoint narrows the record to its own version), and a learner restarted from an older checkpoint goes on
above the highest recorded one. The node's callbacks and its journal come in `hooks` (`learner.hooks`): with a
`journal` (a GroupJournal of the groups it acknowledged) the loop compacts it after every checkpoint and
checkpoints early when it grows past its soft limit.
"""

from __future__ import annotations

import logging
import math
import random
import statistics
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from swarmnode.config import NodeConfig
from swarmnode.diskspace import DiskFullError, SpaceWatch
from swarmnode.learner.buffer import ReplayBuffer
from swarmnode.learner.check_budget import StepChecks, draw_step, suspect_budget, unchecked_budget
from swarmnode.learner.checkpoint import (
    learner_state,
    load_checkpoint,
    read_published,
    restore_learner,
    save_checkpoint,
    write_published,
)
from swarmnode.learner.draw_check import STRUCK_DRAWS, DrawLedger, refusal
from swarmnode.learner.fill import SaturatedPrompts, fill_with_signal
from swarmnode.learner.hooks import LearnerHooks
from swarmnode.learner.lora import adapter_spec, adapter_state, apply_lora, is_lora, merged_state
from swarmnode.learner.losses import policy_loss, ratio_peqq_variance_tensor
from swarmnode.learner.microbatch import loss_share, plan_microbatches, rows_per_chunk
from swarmnode.learner.optimizer import build_optimizer
from swarmnode.learner.precision import Precision
from swarmnode.learner.publish_worker import LatestPublisher
from swarmnode.learner.reference import ReferencePolicy
from swarmnode.learner.row_tensors import row_tensors
from swarmnode.learner.rows import STRUCK_ROWS, GroupRows, Row
from swarmnode.learner.schedule import build_scheduler
from swarmnode.learner.step_stats import StepStats, is_truncated, length_summary, step_stats
from swarmnode.learner.step_totals import merge
from swarmnode.learner.typicality import TypicalityWatch
from swarmnode.learner.verify import CHECK, SKIP, SpotChecker, version_bytes
from swarmnode.model.adapters import weights_hash
from swarmnode.model.logprobs import completion_scores
from swarmnode.model.transfers import readback, to_device
from swarmnode.staleness import StalenessHistogram

logger = logging.getLogger(__name__)

Publish = Callable[..., None]  # (version, state) for full weights; (version, adapters, AdapterSpec) under LoRA
_FINITE = "_loss_is_finite"  # read back with a micro-batch's diagnostics, then removed
RESERVE_VERSIONS = 8  # versions recorded ahead per fsync when publishing in the background (< max_staleness)


class LearnerLoop:
    """One learner's training state and step; see the module docstring."""

    def __init__(
        self,
        model,
        tokenizer,
        task,
        cfg: NodeConfig,
        buffer: ReplayBuffer,
        publish: Publish | None = None,
        checkpoint_dir: Path | str | None = None,
        published_path: Path | str | None = None,
        adapter_versions: bool = True,
        publish_in_background: bool = False,
        hooks: LearnerHooks | None = None,
        local_versions: bool = True,
    ):
        """`hooks`: the node's callbacks and journal (`learner.hooks`); `local_versions`: False for a learner
        that averages with others, whose versions then come from the rounds (`adopt_version`); the rounds turn
        it back on while the learner is alone (`local_versions` is state, not only a setting)."""
        self.model, self.tokenizer, self.task, self.cfg, self.buffer = model, tokenizer, task, cfg, buffer
        self.lc = cfg.learner
        self.publish = publish
        # with publish_in_background, versions are published by a worker thread (the newest handed in)
        self.publisher = LatestPublisher(publish) if publish and publish_in_background else None
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir else None
        # a full disk (`swarmnode.diskspace`): said once here, or on the node's own line when its role sets it
        self.space = SpaceWatch(self.checkpoint_dir or Path("."), logger.warning)
        self.adapter_spec = None  # under LoRA: the base weights' hash and the adapters' shape, for versions
        self.adapter_versions = adapter_versions
        if self.lc.lora.enabled:
            self.adapter_spec = adapter_spec(self.lc.lora, weights_hash(model.state_dict()))
            model = self.model = apply_lora(model, self.lc.lora, seed=cfg.task.seed)
        self.precision = Precision.from_config(cfg, next(model.parameters()).device)
        self.precision.prepare(model)
        # TRL's beta: a KL to the weights the learner starts from (taken before any checkpoint is loaded), in
        # model.dtype as TRL's reference model (`learner.memory` counts it)
        self.reference = ReferencePolicy(model, getattr(torch, cfg.model.dtype)) if self.lc.beta > 0 else None
        self.trainable = [p for p in model.parameters() if p.requires_grad]  # what trains (and is averaged)
        self.optimizer = build_optimizer(self.trainable, self.lc)  # fused where torch has the kernel
        self.scheduler = build_scheduler(self.optimizer, self.lc)
        self.rng = random.Random(cfg.task.seed)
        self.version = buffer.version
        self.step_count = 0
        self.rejected: Counter[str] = Counter()
        self.rows = GroupRows(task, tokenizer, cfg.sampler.max_prompt_length, self.rejected)
        self.staleness_hist = StalenessHistogram()  # valid groups drawn, by staleness bucket (health, /metrics)
        self.saturated = SaturatedPrompts()  # prompts whose latest group was all-solved / all-failed
        self._end_ids = {t for t in (tokenizer.eos_token_id, tokenizer.pad_token_id) if t is not None}
        self.hooks = hooks or LearnerHooks()
        self.restored_extra: dict[str, Any] = {}  # the caller's state as the checkpoint held it
        self.local_versions = local_versions  # False while versions come from averaging rounds (`adopt_version`)
        self.verifier = SpotChecker(cfg.trust, buffer.max_staleness + 1, cfg.task.seed)
        self.step_checks = StepChecks(self.verifier, 0, 0)  # the current step's (`_draw`)
        trust = cfg.trust
        self.draws = (
            DrawLedger(trust.gap_window, trust.gap_share, len(trust.learner_keys)) if trust.seeded_groups else None
        )
        if self.draws is not None:  # every group that arrives, kept or not, shows its counter
            buffer.arrivals = lambda g: self.hooks.checkable(g) and self.draws.observe(g.sampler_id, g.draw)
        self.typical = TypicalityWatch(trust.typicality_z)
        narrowed = self.verifier.checkable_staleness(version_bytes(model, self.precision.publish_dtype.itemsize))
        if narrowed is not None:  # claims older than the versions it can keep could not be checked: refuse them
            buffer.narrow_staleness(narrowed, "trust.verify_keep_bytes holds fewer versions than the window")
        self._weights_published = True  # the weights are exactly the current version's (nothing stepped since)
        self.resumed = self.resume() if self.checkpoint_dir else False
        # a learner that announces versions to others records the highest one (see `publish_current`)
        self.published_path = Path(published_path) if published_path else None
        self.published = read_published(self.published_path) if self.published_path else -1
        if self.published > self.version:  # killed after announcing versions its checkpoint does not have:
            checkpoint, self.version = self.version, self.published + 1  # go on above them (samplers ignore
            self.buffer.skip_versions(self.published, checkpoint, self.version)  # anything not newer); claims
            self.buffer.set_version(self.version)  # made before the crash do not age by the numbers skipped
        self.start_version = self.version  # versions below it were published by an earlier process
        if self.verifier.enabled:  # the weights it starts with are its current version's: checkable after a step
            self.verifier.remember(self.version, self.adapter_snapshot() or self.state_snapshot())

    # ---- the step ----------------------------------------------------------------------------------------
    def step(self) -> dict | None:
        """One optimiser step from the buffer; its diagnostics, or None when the buffer holds too few groups."""
        if len(self.buffer) < self.lc.prompts_per_step:
            return None
        n = self.lc.prompts_per_step
        drawn = self._draw(n)
        refused: dict[str, dict[str, int]] = {}  # {sampler id: {reason: groups}} refused in this step (the board's)

        def rows_of(group) -> list[Row] | None:
            return self._valid_rows(group, refused)

        groups = [rows for g in drawn if (rows := rows_of(g))]
        skipped = 0
        if self.lc.dynamic_sampling:  # DAPO's dynamic sampling over what the buffer holds (`learner.fill`)
            drawn, groups, skipped = fill_with_signal(drawn, groups, n, lambda: len(self.buffer), self._draw, rows_of)
        by_sampler = Counter(g.sampler_id for g in drawn)
        groups = self._drop_caught(groups, refused)
        valid = Counter(rows[0].group.sampler_id for rows in groups)
        tokens: Counter[str] = Counter()
        for rows in groups:
            tokens[rows[0].group.sampler_id] += sum(len(r.completion) for r in rows)
        rewards = [r.reward for rows in groups for r in rows]
        lengths = [len(r.completion) for rows in groups for r in rows]
        signal = [rows for rows in groups if len({r.reward for r in rows}) > 1]  # as `step_stats` judges them
        trained = groups if self.trains_zero_signal else signal
        summary = {
            "reward_mean": statistics.fmean(rewards) if rewards else 0.0,
            "reward_std": statistics.pstdev(rewards) if len(rewards) > 1 else 0.0,
            "zero_signal_fraction": 1 - len(signal) / len(groups) if groups else 0.0,
            "groups": float(len(groups)),
            "groups_trained": float(len(trained)),
            "sampler_ids": sorted(by_sampler),
            "sampler_groups": [by_sampler[s] for s in sorted(by_sampler)],  # drawn groups, aligned with the ids
            "sampler_valid": [valid[s] for s in sorted(by_sampler)],  # of them, valid (the contributors board's)
            "sampler_tokens": [tokens[s] for s in sorted(by_sampler)],  # their completion tokens
            "sampler_refused": refused,  # {sampler id: {reason: groups}} refused in this step
            "groups_drawn": float(len(drawn)),
            "zero_signal_skipped": float(skipped),
            **length_summary(lengths, [self._truncated(r) for rows in groups for r in rows]),
        }
        if groups:
            taus = [rows[0].staleness for rows in groups]
            self.staleness_hist.add(taus)
            summary.update(
                staleness_min=float(min(taus)),
                staleness_median=float(statistics.median(taus)),
                staleness_max=float(max(taus)),
            )
        if not trained:
            return {**summary, **self._status(), "trained": 0.0}
        diag = self._optimise(groups)
        self.step_count += 1
        if self.local_versions and self.step_count % self.lc.publish_every == 0:
            self._bump_version()
        out = {**diag, **summary, **self._status(), "trained": 1.0}
        out["completion_length_mean"] = summary.get("completion_length_mean", 0.0)  # over every drawn row
        if self.hooks.on_step is not None:
            self.hooks.on_step(out)
        journal = self.hooks.journal
        if self.checkpoint_dir and (
            self.step_count % self.lc.checkpoint_every == 0 or (journal is not None and journal.over_soft_limit)
        ):
            self.save()
        return out

    def _drop_caught(self, groups: list[list[Row]], refused: dict[str, dict[str, int]]) -> list[list[Row]]:
        """The step's groups less those of a liar caught in this step (its other drawn groups too: `liar_drawn`)."""
        caught = {rows[0].group.sampler_id for rows in groups} & self.verifier.caught_now
        self.verifier.caught_now.clear()
        if not caught:
            return groups
        kept = [rows for rows in groups if rows[0].group.sampler_id not in caught]
        self.rejected["liar_drawn"] += len(groups) - len(kept)
        for rows in groups:
            if (sender := rows[0].group.sampler_id) in caught:
                mine = refused.setdefault(sender, {})
                mine["liar_drawn"] = mine.get("liar_drawn", 0) + 1
        return kept

    def _optimise(self, groups: list[list[Row]]) -> dict:
        self.typical.exact = self._weights_published  # the weights are the current version's: typicality is exact
        self._weights_published = False  # the step below moves them
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        merged = self.accumulate_gradients(groups, lazy=True)
        self._judge_typicality()
        self.precision.unscale(self.optimizer)
        params = [p for p in self.trainable if p.grad is not None]
        norm = torch.nn.utils.clip_grad_norm_(params, self.lc.max_grad_norm)
        merged = readback({**merged, "grad_norm": norm})  # the step's figures in one transfer
        learning_rate = self.optimizer.param_groups[0]["lr"]
        if not self.precision.optimizer_step(self.optimizer, math.isfinite(merged["grad_norm"])):
            # under fp16's loss scaler an overflow is routine (the scale shrinks); otherwise it is bad data
            self.rejected["loss_scale_overflow_steps" if self.precision.scaler else "nonfinite_grad_steps"] += 1
        else:
            self.scheduler.step()  # the schedule counts the steps the optimiser took
        self.optimizer.zero_grad(set_to_none=True)
        merged.update(learning_rate=learning_rate)
        if self.precision.scaler is not None:
            merged["loss_scale"] = self.precision.loss_scale
        return merged

    def _judge_typicality(self) -> None:
        """Catch the sender of each far-out group of the step (`learner.typicality`): checked at rate 1 from now
        on, its buffered groups dropped, reported to `on_poisoned`."""
        for group, score in self.typical.flagged():
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
        seq_logq = torch.tensor([_mean_logq(rows[i]) for i in order], dtype=torch.float32)
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
            [[_mean_logq(r) for r in g] for g in groups],
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
        with torch.no_grad():
            tokens = scores.where[0].numel()  # known on the host
            lazy["learner_entropy"] = scores.entropy[scores.where].mean() if tokens else 0.0
            lazy["_n_learner_entropy"] = float(tokens)
            lazy[_FINITE] = torch.isfinite(loss)
            seq_logp = scores.logp.detach().sum(dim=1) / scores.mask.sum(dim=1).clamp(min=1)
        diag = readback(lazy)
        if not diag.pop(_FINITE):
            entropy = {k: diag[k] for k in ("learner_entropy", "_n_learner_entropy")}
            loss, diag = self._isolate(rows, *args)
            diag.update(entropy)
        return loss, diag, seq_logp.float()

    def _valid_rows(self, group, refused: dict[str, dict[str, int]]) -> list[Row] | None:
        """A drawn group's validated rows (`learner.rows`) if it passes its spot check; its outcome is noted for
        the samplers (`saturated`). A refused group's reason (the one it counted in `rejected`) is added to
        `refused` under its sender."""
        before = Counter(self.rejected)
        rows = self._rows(group)
        if rows and self._verified(group):
            self.saturated.note(rows)
            return rows
        counted = self.rejected - before
        for noted in ("liar_buffered", "reward_hint_mismatch", "replayed_unchecked"):  # counted, not its reason
            counted.pop(noted, None)
        reason = next(iter(counted), "refused")
        mine = refused.setdefault(group.sampler_id, {})
        mine[reason] = mine.get(reason, 0) + 1
        return None

    def _truncated(self, row: Row) -> bool:
        """Whether a row's completion was cut by `sampler.max_completion_length` (`mask_truncated_completions`)."""
        return is_truncated(row.completion, self.cfg.sampler.max_completion_length, self._end_ids)

    def _draw(self, n: int) -> list:
        """The step's `n` groups under the per-step check budgets (`learner.check_budget`): a budget of groups of
        keys checked at rate 1 first, then the others; a key's groups over its unchecked budget come last (and
        are checked); further groups of keys at rate 1 wait in the buffer."""
        trust = self.cfg.trust
        self.step_checks = StepChecks(
            self.verifier,
            unchecked_budget(trust.unchecked_share, n),
            suspect_budget(trust.probation_share, n),
            self.hooks.checkable,
        )
        drawn = draw_step(self.buffer, self.step_checks, n)
        self.verifier.counts.update(self.step_checks.counts)  # deferred (left for later steps), forced checks
        return drawn

    def _rows(self, group) -> list[Row] | None:
        """`GroupRows.rows`; a group refused for its prompt (not a training prompt, not the learner's tokens) or
        its shape is reported to `on_poisoned` (its sender is struck)."""
        why = refusal(group, self.task, self.cfg.trust, self.draws) if self._seeded(group) else None
        if why is not None:
            self.rejected[why] += 1
            if why in STRUCK_DRAWS and self.hooks.on_poisoned is not None:
                self.hooks.on_poisoned(group, f"{why} (refused by the learner)")
            return None
        rows = self.rows.rows(group, self.version)
        if rows is None and self.rows.refusal in STRUCK_ROWS and self.hooks.on_poisoned is not None:
            self.hooks.on_poisoned(group, f"{self.rows.refusal} (refused by the learner)")
        return rows

    def _seeded(self, group) -> bool:
        """Whether `group` must be a seeded group of this run (`trust.seeded_groups`; not the learner's own)."""
        return self.draws is not None and self.hooks.checkable(group)

    def _verified(self, group) -> bool:
        """False (counted, reported) when a spot check finds the group's behaviour log-probs are not the ones
        its version's weights give, or when it is drawn for a check its claimed version cannot have (counted
        `uncheckable`); True when it passes or is not drawn (`swarmnode.learner.verify`)."""
        if not self.hooks.checkable(group):
            return True
        decision = self.verifier.decide(
            group.sampler_id,
            int(group.policy_version),
            self.version,
            self._weights_published,
            self.step_checks.drawn(group),
        )
        if decision == SKIP:
            return True
        if decision != CHECK:  # made before this process started, with weights it no longer has (a swarm learner
            # reloads the window's versions from its store): trained unchecked rather than lost
            if group.group_id in self.buffer.readmitted or int(group.policy_version) < self.start_version:
                self.rejected["replayed_unchecked"] += 1
                return True
            self.rejected["uncheckable"] += 1
            return False
        current = self.version if self._weights_published else None
        mismatch = self.verifier.mismatch(
            self.model, group, self.tokenizer.pad_token_id, self.precision.autocast, current
        )
        if self.verifier.judge(group.sampler_id, mismatch):
            return True
        reason = "draw_mismatch" if mismatch.reason == "drawn" else "logprob_mismatch"
        self.rejected[reason] += 1
        self.rejected["liar_buffered"] += self.buffer.drop_sampler(group.sampler_id)  # its other lies, too
        if self.hooks.on_poisoned is not None:
            self.hooks.on_poisoned(group, f"{reason} ({mismatch.describe()})")
        return False

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

    def _status(self) -> dict:
        stats = self.buffer.stats()
        out = {
            "step": float(self.step_count),
            "version": float(self.version),
            "buffer_size": float(stats["size"]),
            "dropped_fraction": stats["dropped_fraction"],
            "verified_groups": float(self.verifier.counts["checked"]),  # groups spot-checked so far
            **{
                f"checks_{k}": float(self.verifier.counts[k])  # the per-step check budgets' work so far
                for k in ("deferred_probation", "deferred_unchecked", "forced_checks")
            },
        }
        out.update({f"rejected_{k}": float(v) for k, v in self.rejected.items()})
        return out

    def _bump_version(self) -> None:
        self.version += 1
        self.buffer.set_version(self.version)
        self.publish_current()

    def adopt_version(self, version: int) -> int:
        """Publish the current weights (just averaged with other learners, or loaded from one) as `version` when
        it is above this learner's own, else as its own + 1 (a number it may have announced is never reused for
        other weights: its versions only go up, and a restart starts above everything it recorded); the version
        published."""
        self.version = max(int(version), self.version + 1)
        self.buffer.set_version(self.version)
        self.publish_current()
        return self.version

    def publish_current(self) -> None:
        """Publish the current weights as the current version; the version is first recorded on disk, so a
        restarted learner never announces a number it announced before."""
        self._weights_published = True
        if self.publish is None:
            return
        if self.published_path is not None and self.version > self.published:
            # recorded ahead: one fsync covers the next `RESERVE_VERSIONS` versions (a background publisher's),
            # a restart goes on above the reservation; `save` narrows it again
            self.published = self.version + (RESERVE_VERSIONS if self.publisher is not None else 0)
            write_published(self.published_path, self.published)
        adapters = self.adapter_snapshot()
        full = self.state_snapshot() if adapters is None or not self.adapter_versions else None
        self.verifier.remember(self.version, full if adapters is None else adapters)
        if self.hooks.on_publish is not None:  # in this thread, while the weights are still this version's
            self.hooks.on_publish(self.version)
        payload = (full,) if full is not None else (adapters, self.adapter_spec)
        if self.publisher is not None:
            self.publisher.submit(self.version, *payload)  # training goes on while it is written
        else:
            self.publish(self.version, *payload)

    def flush_publish(self, timeout: float | None = None) -> bool:
        """Wait until every version handed to the background publisher is published (True at once without one)."""
        return self.publisher.flush(timeout) if self.publisher is not None else True

    def state_snapshot(self) -> dict[str, torch.Tensor]:
        """A CPU copy of the current weights in `model.dtype` (what a full-weight version holds; under LoRA the
        base with the adapters folded in, which a plain model loads)."""
        state = merged_state(self.model) if is_lora(self.model) else self.model.state_dict()
        return self.precision.snapshot(state)

    def adapter_snapshot(self) -> dict[str, torch.Tensor] | None:
        """A CPU copy of the LoRA adapter tensors alone in `model.dtype` (None without LoRA)."""
        if not is_lora(self.model):
            return None
        return self.precision.snapshot(adapter_state(self.model))

    # ---- checkpoints -------------------------------------------------------------------------------------
    def save(self) -> Path | None:
        """Write the checkpoint now (no-op without a checkpoint directory)."""
        if self.checkpoint_dir is None:
            return None
        try:
            path = save_checkpoint(self.checkpoint_dir, learner_state(self))
        except DiskFullError as exc:  # said once; the previous checkpoint and the whole journal stay as they were
            self.space.full("the checkpoint", exc.need)
            return None
        self.space.clear()
        if self.published_path is not None and self.published > self.version:  # nothing above it was announced
            self.published = self.version
            write_published(self.published_path, self.version)  # so a clean restart goes on at this version
        if self.hooks.journal is not None:  # what was trained on is in the checkpoint; the journal keeps the rest
            try:
                self.hooks.journal.compact(lambda: [g.encode() for g in self.buffer.held()])
            except DiskFullError as exc:  # the journal stays whole (a restart trains a few groups twice)
                self.space.full("compacting the group journal", exc.need)
        return path

    @property
    def extra_state(self) -> dict[str, Any]:
        """The caller's state to checkpoint: its `hooks.extra_state()`, else what the checkpoint held."""
        return self.hooks.extra_state() if self.hooks.extra_state is not None else self.restored_extra

    def resume(self) -> bool:
        """Load the checkpoint if there is one; True when resumed (same step and version as saved)."""
        state = load_checkpoint(self.checkpoint_dir)
        if state is None:
            return False
        restore_learner(self, state)
        return True


def _mean_logq(row: Row) -> float:
    """LQ_i: the row's length-normalised behaviour log-prob."""
    return sum(row.logq) / max(1, len(row.logq))
