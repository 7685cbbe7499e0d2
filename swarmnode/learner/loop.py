"""The network-free learner loop: buffer -> validated batch -> GEPO/GSPO/GRPO step -> versions and checkpoints.

Per optimiser step (`LearnerLoop.step`): draw `prompts_per_step` groups and keep those that pass the learner's
checks (`learner.draw`: prompts and tokens checked, rewards recomputed, spot checks of behaviour log-probs; with
`dynamic_sampling`, refilled with groups that carry signal: `learner.fill`); compute the gradients and step the
optimiser (`learner.gradients`: statistics once per step, token-budget micro-batches, the policy loss, one
poisoned group dropped rather than the step); every `publish_every` steps the version goes up and is published,
and every `checkpoint_every` steps (and whenever the caller asks, e.g. on SIGTERM) the whole state is written
atomically (`learner.versions`); on construction with a checkpoint directory holding one, the loop resumes at the
same step and version. With `learner.lora.enabled` the model is wrapped by peft (`learner.lora`) and only the
adapters train; the checkpoint holds the adapters only.

The node's callbacks and its journal come in `hooks` (`learner.hooks`): with a `journal` (a GroupJournal of the
groups it acknowledged) the loop compacts it after every checkpoint and checkpoints early when it grows past its
soft limit. While `local_versions` is off (a learner averaging with others), its versions come from the rounds,
through `adopt_version`.
"""

from __future__ import annotations

import logging
import random
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from swarmnode.config import NodeConfig
from swarmnode.diskspace import SpaceWatch
from swarmnode.learner.buffer import ReplayBuffer
from swarmnode.learner.check_budget import StepChecks
from swarmnode.learner.checkpoint import read_published
from swarmnode.learner.draw import StepDraw
from swarmnode.learner.draw_check import DrawLedger
from swarmnode.learner.fill import SaturatedPrompts, fill_with_signal
from swarmnode.learner.gradients import StepGradients
from swarmnode.learner.hooks import LearnerHooks
from swarmnode.learner.lora import adapter_spec, apply_lora
from swarmnode.learner.optimizer import build_optimizer
from swarmnode.learner.precision import Precision
from swarmnode.learner.publish_worker import LatestPublisher
from swarmnode.learner.reference import ReferencePolicy
from swarmnode.learner.rows import GroupRows, Row
from swarmnode.learner.schedule import build_scheduler
from swarmnode.learner.step_stats import length_summary
from swarmnode.learner.typicality import TypicalityWatch
from swarmnode.learner.verify import SpotChecker, version_bytes
from swarmnode.learner.versions import Publish, VersionKeeper
from swarmnode.model.adapters import weights_hash
from swarmnode.staleness import StalenessHistogram

logger = logging.getLogger(__name__)


class LearnerLoop(StepDraw, StepGradients, VersionKeeper):
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
        if (ledger := self.draws) is not None:  # every group that arrives, kept or not, shows its counter

            def arrived(group) -> None:
                if self.hooks.checkable(group):
                    ledger.observe(group.sampler_id, getattr(group, "draw", None))

            buffer.arrivals = arrived
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
