"""What one optimiser step may let through unchecked and spend on checks, per sampler key.

Two budgets, each a share of `learner.prompts_per_step` (P):
- **unchecked per key** (`trust.unchecked_share`, 0.5): one key's groups that pass into a step unchecked number
  at most ceil(share x P). Its further groups drawn for the step wait in the buffer while other keys' groups can
  fill the step; the ones still needed to fill it are checked. A patient liar that earned a low check rate
  therefore weighs at most that share of any step with its unchecked lies, whatever it bursts.
- **checks of keys at rate 1** (`trust.probation_share`, 0.25): keys on probation (and caught keys) have every
  group checked; at most max(1, floor(share x P)) such checks run in one step, and their other groups wait in the
  buffer for later steps (drawn before they age out like any group). A wave of new samplers then costs each step
  a bounded number of checks, and a wave of N newcomers is through probation within about
  N x `trust.probation_checks` / that budget steps (each step checks the newest waiting groups of keys at rate 1).

`draw_step` takes a step's groups from a `ReplayBuffer` in three passes, each with `StepChecks.leave` as the
predicate `ReplayBuffer.draw` asks of each candidate (in its draw order; True leaves it in the buffer): first up to
the budget of groups of keys at rate 1 (reserved: a busy established sampler cannot starve the newcomers), then
the other keys' groups within their unchecked budgets, then, if the step is still short, groups over those budgets
and further groups of keys at rate 1 (all checked): the budgets bound checks while other work fills the step, and
never leave a step short (a learner alone with one new sampler, or with its own batches, trains on-policy). The draw decision (check or not) is made there, once per group that enters the step, and read back by
the learner's spot check (`drawn`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from typing import Any

from swarmnode.learner.verify import SpotChecker


def unchecked_budget(share: float, prompts_per_step: int) -> int:
    """Groups one key may pass unchecked into one step."""
    return max(1, math.ceil(share * prompts_per_step))


def suspect_budget(share: float, prompts_per_step: int) -> int:
    """Checks of keys at rate 1 (probation, caught) one step may run."""
    return max(1, math.floor(share * prompts_per_step))


class StepChecks:
    """One step's draw decisions under the two budgets (module docstring)."""

    def __init__(
        self, checker: SpotChecker, unchecked: int, suspects: int, checkable: Callable[[Any], bool] = lambda g: True
    ) -> None:
        self.checker, self.unchecked, self.suspects, self.checkable = checker, unchecked, suspects, checkable
        self.passed: Counter[str] = Counter()  # key -> groups let into this step unchecked
        self.suspect_checks = 0
        self.decisions: dict[str, bool] = {}  # group id -> drawn for a check
        self.counts: Counter[str] = Counter()  # "deferred_probation", "deferred_unchecked", "forced_checks"
        self.phase = "suspects"  # `draw_step`'s pass: "suspects", then "rest", then "filling"

    def leave(self, group) -> bool:
        """Whether `group` stays in the buffer in this pass; otherwise its draw decision is kept."""
        key = group.sampler_id
        if not self.checker.enabled or not self.checkable(group):
            if self.phase == "suspects":
                return True
            self.decisions[group.group_id] = False
            return False
        if self.checker.suspect(key):
            if self.phase == "filling":  # the step is short without it: taken, and checked
                self.counts["forced_checks"] += 1
                self.decisions[group.group_id] = True
                return False
            if self.phase != "suspects" or self.suspect_checks >= self.suspects:
                self.counts["deferred_probation"] += self.phase == "rest"
                return True
            self.suspect_checks += 1
            self.decisions[group.group_id] = True
            return False
        if self.phase == "suspects":
            return True
        drawn = self.checker.drawn(key)
        if not drawn and self.passed[key] >= self.unchecked:
            if self.phase == "rest":
                self.counts["deferred_unchecked"] += 1
                return True
            self.counts["forced_checks"] += 1
            drawn = True
        if not drawn:
            self.passed[key] += 1
        self.decisions[group.group_id] = drawn
        return False

    def drawn(self, group) -> bool | None:
        """The draw decision made for `group` in this step (None: not decided here)."""
        return self.decisions.get(group.group_id)


def draw_step(buffer, checks: StepChecks, n: int) -> list:
    """Up to `n` groups of `buffer` for one step under `checks`' budgets (module docstring)."""
    drawn: list = []
    for phase in ("suspects", "rest", "filling"):
        checks.phase = phase
        if phase == "filling" and not (checks.counts["deferred_unchecked"] or checks.counts["deferred_probation"]):
            break
        drawn += buffer.draw(n - len(drawn), leave=checks.leave) if len(drawn) < n else []
    return drawn
