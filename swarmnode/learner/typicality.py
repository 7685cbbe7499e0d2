"""The first line for every trained group: are its tokens as likely as the policy's own samples would be?

For each completion token, e_t = -log p(token) - H_t under the learner's training forward (the logits it already
computes: `completion_scores(variance=True)` adds Var(log p) under p, V_t). For tokens drawn from the policy each e_t
has mean 0 and variance V_t, so a group's sum S = sum e_t has standard deviation sqrt(sum V_t). A group, or one of
its completions, with S > `trust.typicality_z` x sqrt(sum V_t) + `SLACK_NATS` is far out: its text is much less
likely than the policy's samples (text its sampler chose, with honest log-probs). Its sampler is caught: checked
at rate 1 from then on (every group replayed), its buffered groups dropped, struck. The group itself has trained
(it was judged from the training forward, at no extra cost): the check bounds a liar to one atypical group per
catch, and the replayed spot check sees everything after it. The figures are in docs/trust.md.

Only groups sampled from the weights the forward runs are judged: staleness 0, in a step that starts from the
published weights (`exact`; with `learner.publish_every` 1, every step). A stale group's tokens are judged against
weights that moved since: the policy sharpens, and an honest sampler's text looks less likely than it was (a
sampler about 125 steps behind the learner's weights measured 6.6 sd).
"""

from __future__ import annotations

import math
from typing import Any

import torch

SLACK_NATS = 8.0  # a few unlikely tokens an honest sample may draw


class TypicalityWatch:
    """Collects the step's per-completion sums (device tensors, read back with the step's figures) and names the
    far-out groups."""

    def __init__(self, z: float):
        self.z = z
        self.exact = True  # the forward runs the weights of the current version (set per step by the loop)
        self._parts: list[tuple[list, torch.Tensor]] = []

    @property
    def enabled(self) -> bool:
        return self.z > 0

    def add(self, rows: list, logp: torch.Tensor, entropy: torch.Tensor, variance, mask: torch.Tensor) -> None:
        """One micro-batch's rows and their training-forward scores ([rows, T] each)."""
        if not self.enabled or variance is None or not self.exact:
            return
        with torch.no_grad():
            m = mask.float()
            excess = ((-logp.detach() - entropy.detach()) * m).sum(dim=1)
            self._parts.append((rows, torch.stack([excess, (variance * m).sum(dim=1)], dim=1)))

    def take(self) -> tuple[list, torch.Tensor] | None:
        """The step's rows and their [rows, 2] sums (excess, variance) on the device, to read back with the step's
        figures (`flagged`); cleared."""
        parts, self._parts = self._parts, []
        if not parts:
            return None
        return [row for batch, _ in parts for row in batch], torch.cat([sums for _, sums in parts])

    def flagged_now(self) -> list[tuple[Any, float]]:
        """`take` and `flagged` at once (its own transfer): for a caller outside a learner step."""
        taken = self.take()
        return [] if taken is None else self.flagged(taken[0], taken[1].cpu().tolist())

    def flagged(self, rows: list, values: list[list[float]]) -> list[tuple[Any, float]]:
        """The far-out groups among `rows` (with their read-back sums `values`), each once, with its largest
        (S - slack) / sqrt(sum V)."""
        groups: dict[str, list] = {}
        worst: dict[str, float] = {}
        for row, (excess, var) in zip(rows, values):
            if getattr(row, "staleness", 0) != 0:  # sampled from weights the forward no longer runs
                continue
            group = row.group
            total = groups.setdefault(group.group_id, [group, 0.0, 0.0])
            total[1] += excess
            total[2] += var
            worst[group.group_id] = max(worst.get(group.group_id, -math.inf), self._score(excess, var))
        out = []
        for gid, (group, excess, var) in groups.items():
            score = max(worst[gid], self._score(excess, var))
            if score > self.z:
                out.append((group, score))
        return out

    @staticmethod
    def _score(excess: float, var: float) -> float:
        return (excess - SLACK_NATS) / math.sqrt(max(var, 1e-6))
