"""Which drawn groups a learner step trains on (the `StepDraw` part of `LearnerLoop`).

A step draws its groups under the per-step check budgets (`learner.check_budget`); it rejects (and counts) groups
whose prompt id the task does not know, that are prompts of the task's held-out evaluation split (`eval_prompt`),
or whose prompt tokens differ from the learner's own tokenisation, and recomputes every reward from the decoded
completion (the sender's rewards are only a hint; `learner.rows`). A sample of on-policy groups is spot-verified
(`swarmnode.learner.verify`): their behaviour log-probs are recomputed and a group that lies is refused (counted
`logprob_mismatch`, reported to `on_poisoned`), with its sender's other groups in the buffer and in the step.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from swarmnode.config import NodeConfig
from swarmnode.learner.buffer import ReplayBuffer
from swarmnode.learner.check_budget import StepChecks, draw_step, suspect_budget, unchecked_budget
from swarmnode.learner.draw_check import STRUCK_DRAWS, DrawLedger, refusal
from swarmnode.learner.fill import SaturatedPrompts
from swarmnode.learner.hooks import LearnerHooks
from swarmnode.learner.precision import Precision
from swarmnode.learner.rows import STRUCK_ROWS, GroupRows, Row
from swarmnode.learner.verify import CHECK, SKIP, SpotChecker


class StepDraw:
    """The draw half of a learner step; `LearnerLoop` sets the state it reads."""

    model: Any  # a torch.nn.Module (a peft one under LoRA)
    tokenizer: Any
    cfg: NodeConfig
    buffer: ReplayBuffer
    precision: Precision
    rows: GroupRows
    verifier: SpotChecker
    step_checks: StepChecks
    saturated: SaturatedPrompts
    hooks: LearnerHooks
    rejected: Counter[str]
    version: int
    start_version: int
    _weights_published: bool
    draws: DrawLedger | None
    task: Any

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
