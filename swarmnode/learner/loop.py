"""The network-free learner loop: buffer -> validated batch -> GEPO/GSPO/GRPO step -> versions and checkpoints.

Per optimiser step: draw `prompts_per_step` groups; reject (and count) groups whose prompt id the task does not
know or whose prompt tokens differ from the learner's own tokenisation, and recompute every reward from the decoded
completion (the sender's rewards are only a hint; `learner.rows`); skip zero-signal groups; split the rest into
`gradient_accumulation_steps` chunks of whole groups and compute each chunk's group statistics (advantages,
GEPO's E_q[q]); cut the chunk's rows into micro-batches of at most `max_tokens_per_microbatch` padded tokens
(`learner.microbatch`: the gradient equals the unsplit one); compute log-probs (chunked lm_head, no [B, T, V]
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
above the highest recorded one. With a
`journal` (a GroupJournal of the groups it acknowledged) the loop compacts it after every checkpoint and
checkpoints early when it grows past its soft limit.
"""

from __future__ import annotations

import random
import statistics
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import torch

from swarmnode.config import NodeConfig
from swarmnode.learner.buffer import ReplayBuffer
from swarmnode.learner.checkpoint import (
    learner_state,
    load_checkpoint,
    read_published,
    restore_learner,
    save_checkpoint,
    write_published,
)
from swarmnode.adapters import weights_hash
from swarmnode.learner.lora import adapter_spec, adapter_state, apply_lora, is_lora, merged_state
from swarmnode.learner.losses import group_advantages, group_log_expectation, policy_loss, ratio_peqq_variance
from swarmnode.learner.microbatch import loss_share, split_chunks, token_budget_batches, weighted_mean
from swarmnode.learner.precision import Precision
from swarmnode.learner.publish_worker import LatestPublisher
from swarmnode.learner.rows import GroupRows, Row
from swarmnode.learner.schedule import build_scheduler
from swarmnode.learner.verify import CHECK, SKIP, SpotChecker, version_bytes
from swarmnode.logprobs import completion_scores
from swarmnode.staleness import StalenessHistogram

Publish = Callable[..., None]  # (version, state) for full weights; (version, adapters, AdapterSpec) under LoRA
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
    ):
        self.model, self.tokenizer, self.task, self.cfg, self.buffer = model, tokenizer, task, cfg, buffer
        self.lc = cfg.learner
        self.publish = publish
        # with publish_in_background, versions are published by a worker thread (the newest handed in)
        self.publisher = LatestPublisher(publish) if publish and publish_in_background else None
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir else None
        self.adapter_spec = None  # under LoRA: the base weights' hash and the adapters' shape, for versions
        self.adapter_versions = adapter_versions
        if self.lc.lora.enabled:
            self.adapter_spec = adapter_spec(self.lc.lora, weights_hash(model.state_dict()))
            model = self.model = apply_lora(model, self.lc.lora, seed=cfg.task.seed)
        self.precision = Precision.from_config(cfg, next(model.parameters()).device)
        self.precision.prepare(model)
        self.trainable = [p for p in model.parameters() if p.requires_grad]  # what trains (and is averaged)
        self.optimizer = torch.optim.AdamW(self.trainable, lr=self.lc.learning_rate, weight_decay=self.lc.weight_decay,
                                           foreach=True)  # one kernel per op for all tensors, not one per tensor
        self.scheduler = build_scheduler(self.optimizer, self.lc)
        self.rng = random.Random(cfg.task.seed)
        self.version = buffer.version
        self.step_count = 0
        self.rejected: Counter[str] = Counter()
        self.rows = GroupRows(task, tokenizer, cfg.sampler.max_prompt_length, self.rejected)
        self.staleness_hist = StalenessHistogram()  # valid groups drawn, by staleness bucket (health, /metrics)
        self.extra_state: dict[str, Any] | Callable[[], dict[str, Any]] = {}  # caller's state, checkpointed too
        self.on_step: Callable[[dict], None] | None = None  # sees each trained step's diagnostics before saving
        self.on_poisoned: Callable[[Any, str], None] | None = None  # (group, reason): its sender is to be struck
        self.local_versions = True  # False while versions come from averaging rounds (`adopt_version`) instead
        self.checkable: Callable[[Any], bool] = lambda group: True  # groups the spot checks may judge
        self.on_publish: Callable[[int], None] | None = None  # sees each version as its weights are snapshotted
        self.verifier = SpotChecker(cfg.trust, buffer.max_staleness + 1, cfg.task.seed)
        narrowed = self.verifier.checkable_staleness(version_bytes(model, self.precision.publish_dtype.itemsize))
        if narrowed is not None:  # claims older than the versions it can keep could not be checked: refuse them
            buffer.narrow_staleness(narrowed, "trust.verify_keep_bytes holds fewer versions than the window")
        self._weights_published = True  # the weights are exactly the current version's (nothing stepped since)
        self.journal = None  # a GroupJournal of acknowledged groups, compacted after every checkpoint
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
        drawn = self.buffer.draw(self.lc.prompts_per_step)
        groups = [rows for g in drawn if (rows := self.rows.rows(g, self.version)) and self._verified(g)]
        rewards = [r.reward for rows in groups for r in rows]
        signal = [rows for rows in groups if len({r.reward for r in rows}) > 1]
        summary = {
            "reward_mean": statistics.fmean(rewards) if rewards else 0.0,
            "reward_std": statistics.pstdev(rewards) if len(rewards) > 1 else 0.0,
            "zero_signal_fraction": 1 - len(signal) / len(groups) if groups else 0.0,
            "groups": float(len(groups)),
            "groups_trained": float(len(signal)),
            "sampler_ids": sorted({g.sampler_id for g in drawn}),
        }
        if groups:
            taus = [rows[0].staleness for rows in groups]
            self.staleness_hist.add(taus)
            summary.update(staleness_min=float(min(taus)), staleness_median=float(statistics.median(taus)),
                           staleness_max=float(max(taus)))
        if not signal:
            return {**summary, **self._status(), "trained": 0.0}
        diag = self._optimise(signal)
        self.step_count += 1
        if self.local_versions and self.step_count % self.lc.publish_every == 0:
            self._bump_version()
        out = {**diag, **summary, **self._status(), "trained": 1.0}
        if self.on_step is not None:
            self.on_step(out)
        if self.checkpoint_dir and (self.step_count % self.lc.checkpoint_every == 0
                                    or (self.journal is not None and self.journal.over_soft_limit)):
            self.save()
        return out

    def _optimise(self, groups: list[list[Row]]) -> dict:
        self._weights_published = False  # the step below moves them
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        diags = self.accumulate_gradients(groups)
        params = [p for p in self.model.parameters() if p.grad is not None]
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, self.lc.max_grad_norm))
        learning_rate = self.optimizer.param_groups[0]["lr"]
        if torch.isfinite(torch.tensor(grad_norm)):
            self.optimizer.step()
        else:
            self.rejected["nonfinite_grad_steps"] += 1
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        merged = weighted_mean(diags)
        merged.update(grad_norm=grad_norm, learning_rate=learning_rate)
        return merged

    def accumulate_gradients(self, groups: list[list[Row]]) -> list[tuple[int, dict]]:
        """Forward and backward over `groups` (gradients add up in `.grad`); per chunk (rows, diagnostics).

        Group statistics are computed per gradient-accumulation chunk of whole groups, then the chunk's rows are
        cut by the token budget; each micro-batch's loss is scaled by its share of the whole step's loss. The
        paper's `ratio_peqq_var` is taken over the whole chunk, as without the split.
        """
        step_lengths = [len(r.completion) for rows in groups for r in rows]
        diags: list[tuple[int, dict]] = []
        for chunk in (c for c in split_chunks(groups, self.lc.gradient_accumulation_steps) if c):
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
            merged["ratio_peqq_var"] = ratio_peqq_variance(seq_logp, seq_logq, self.step_count)
            diags.append((len(rows), merged))
        return diags

    def _micro_loss(self, rows: list[Row], group_index, adv, log_e) -> tuple[torch.Tensor, dict, torch.Tensor]:
        """(loss, diagnostics, per-row length-normalised learner log-prob) of one micro-batch."""
        device = next(self.model.parameters()).device
        with self.precision.autocast():
            scores = completion_scores(
                self.model, [r.prompt_tokens for r in rows], [r.completion for r in rows],
                [r.temperature for r in rows], self.tokenizer.pad_token_id,
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

    def _verified(self, group) -> bool:
        """False (counted, reported) when a spot check finds the group's behaviour log-probs are not the ones
        its version's weights give, or when it is drawn for a check its claimed version cannot have (counted
        `uncheckable`); True when it passes or is not drawn (`swarmnode.learner.verify`)."""
        if not self.checkable(group):
            return True
        decision = self.verifier.decide(group.sampler_id, int(group.policy_version), self.version,
                                        self._weights_published)
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
        mismatch = self.verifier.mismatch(self.model, group, self.tokenizer.pad_token_id, self.precision.autocast,
                                          current)
        if self.verifier.judge(group.sampler_id, mismatch):
            return True
        self.rejected["logprob_mismatch"] += 1
        self.rejected["liar_buffered"] += self.buffer.drop_sampler(group.sampler_id)  # its other lies, too
        if self.on_poisoned is not None:
            self.on_poisoned(group, f"logprob_mismatch ({mismatch:.3g} nats per token, median)")
        return False

    def _policy_loss(self, logp, logq, mask, rewards, group_index, staleness, adv, log_e):
        return policy_loss(self.lc.algorithm, logp, logq, mask, rewards, group_index, self.lc, staleness,
                           shuffle_seed=self.step_count, adv=adv, log_e=log_e)

    def _isolate(self, rows: list[Row], *args: torch.Tensor) -> tuple[torch.Tensor, dict]:
        """The loss of a micro-batch whose loss was not finite, group by group from the same forward pass: the
        groups whose own loss is not finite are dropped (counted, reported to `on_poisoned`), the others'
        losses are averaged by rows."""
        group_index = args[4]
        kept: list[tuple[int, dict]] = []
        total = args[0].sum() * 0.0  # keeps the graph (and a zero gradient) when every group is dropped
        for gi in torch.unique(group_index).tolist():
            mine = group_index == gi
            loss, diag = self._policy_loss(*(a[mine] for a in args))
            if not torch.isfinite(loss):
                self.rejected["poisoned_group"] += 1
                if self.on_poisoned is not None:
                    self.on_poisoned(rows[int(mine.nonzero()[0])].group, "poisoned_group (its loss was not finite)")
                continue
            n = int(mine.sum())
            kept.append((n, diag))
            total = total + loss * n
        n = sum(k for k, _ in kept)
        return (total / n if n else total), (weighted_mean(kept) if kept else {})

    def _status(self) -> dict:
        stats = self.buffer.stats()
        out = {"step": float(self.step_count), "version": float(self.version), "buffer_size": float(stats["size"]),
               "dropped_fraction": stats["dropped_fraction"],
               "verified_groups": float(self.verifier.counts["checked"])}  # groups spot-checked so far
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
        if self.on_publish is not None:  # in this thread, while the weights are still this version's
            self.on_publish(self.version)
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
        return {k: self.precision.for_publishing(v) for k, v in state.items()}

    def adapter_snapshot(self) -> dict[str, torch.Tensor] | None:
        """A CPU copy of the LoRA adapter tensors alone in `model.dtype` (None without LoRA)."""
        if not is_lora(self.model):
            return None
        return {k: self.precision.for_publishing(v) for k, v in adapter_state(self.model).items()}

    # ---- checkpoints -------------------------------------------------------------------------------------
    def save(self) -> Path | None:
        """Write the checkpoint now (no-op without a checkpoint directory)."""
        if self.checkpoint_dir is None:
            return None
        path = save_checkpoint(self.checkpoint_dir, learner_state(self))
        if self.published_path is not None and self.published > self.version:  # nothing above it was announced
            self.published = self.version
            write_published(self.published_path, self.version)  # so a clean restart goes on at this version
        if self.journal is not None:  # what was trained on is in the checkpoint; the journal keeps the rest
            self.journal.compact(lambda: [g.encode() for g in self.buffer.held()])
        return path

    def resume(self) -> bool:
        """Load the checkpoint if there is one; True when resumed (same step and version as saved)."""
        state = load_checkpoint(self.checkpoint_dir)
        if state is None:
            return False
        restore_learner(self, state)
        return True

