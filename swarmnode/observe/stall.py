"""No silent stall: a learner that takes no step says why, within a minute.

`StallWatch` is fed the rollout groups a learner gets (`groups`) and its steps (`stepped`). When no step was
taken for `say_after` seconds while groups arrived, `why()` gives one line naming the causes seen in those
groups, the usual ones first:

- every group is zero-signal (all completions of a prompt got the same reward: nothing to learn from);
- prompts sit at `sampler.max_prompt_length` (cut from the left: the question may be gone);
- completions stop at `sampler.max_completion_length` (cut before an answer, so scored as wrong).

`due()` returns the line at most once per `say_after` seconds while the stall lasts (train-local and a swarm
learner print it; the learner's health carries it to `status`). A learner with no groups at all is not stalled
here: the swarm's own lines say why none arrive.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

SAY_AFTER_S = 45.0  # no step for this long, with groups arriving, is said
CUT_SHARE = 0.5  # prompts or completions at their cap in at least this share of groups is named as a cause


class GroupLike(Protocol):
    """What the watch reads of a rollout group (`protocol.rollout.RolloutGroup` has these)."""

    prompt_tokens: list[int]
    completions: list[list[int]]
    rewards: list[float]


@dataclass
class _Seen:
    groups: int = 0
    zero_signal: int = 0
    prompts_cut: int = 0
    completions: int = 0
    completions_cut: int = 0


class StallWatch:
    """See the module docstring; `max_prompt` and `max_completion` are the sampler caps groups are made under."""

    def __init__(
        self,
        max_prompt: int,
        max_completion: int,
        say_after: float = SAY_AFTER_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_prompt, self.max_completion = max_prompt, max_completion
        self.say_after, self.clock = say_after, clock
        self.since = clock()  # the last step (or the start)
        self.said_at: float | None = None
        self.seen = _Seen()

    def groups(self, groups: Iterable[GroupLike]) -> None:
        """Note groups the learner got since its last step."""
        for group in groups:
            self.seen.groups += 1
            self.seen.zero_signal += len(set(group.rewards)) <= 1
            self.seen.prompts_cut += len(group.prompt_tokens) >= self.max_prompt
            self.seen.completions += len(group.completions)
            self.seen.completions_cut += sum(len(c) >= self.max_completion for c in group.completions)

    def stepped(self) -> None:
        """The learner took a step: the stall (if any) is over."""
        self.since, self.said_at, self.seen = self.clock(), None, _Seen()

    @property
    def stalled(self) -> bool:
        return self.seen.groups > 0 and self.clock() - self.since >= self.say_after

    def causes(self) -> list[tuple[str, str]]:
        """Each cause seen since the last step: (short form, the sentence that says it and what to do)."""
        s, out = self.seen, []
        if s.groups and s.zero_signal == s.groups:
            out.append(
                ("all groups zero-signal", "every group is zero-signal (all its completions got the same reward)")
            )
        if s.groups and s.prompts_cut >= CUT_SHARE * s.groups:
            out.append(
                (
                    f"prompts cut at max_prompt_length={self.max_prompt}",
                    f"{s.prompts_cut} of {s.groups} prompts hit sampler.max_prompt_length={self.max_prompt} (cut "
                    "from the left: raise it)",
                )
            )
        if s.completions and s.completions_cut >= CUT_SHARE * s.completions:
            out.append(
                (
                    f"completions cut at max_completion_length={self.max_completion}",
                    f"{s.completions_cut} of {s.completions} completions hit sampler.max_completion_length="
                    f"{self.max_completion} before an answer (raise it)",
                )
            )
        return out or [
            ("too few groups with a signal", f"{s.groups - s.zero_signal} of {s.groups} groups carry a signal")
        ]

    def why(self) -> str:
        """The line: how long, how many groups, and each cause seen (empty while not stalled)."""
        if not self.stalled:
            return ""
        said = "; ".join(long for _, long in self.causes())
        return f"no learner step for {self.clock() - self.since:.0f} s with {self.seen.groups} groups in: {said}"

    def short(self) -> str:
        """`why()` in a health record's text field (at most 128 characters): the causes' short forms."""
        return ("no step: " + "; ".join(short for short, _ in self.causes()))[:128] if self.stalled else ""

    def due(self) -> str:
        """`why()` when it is time to say it (once per `say_after` seconds of the stall), else ""."""
        now = self.clock()
        if not self.stalled or (self.said_at is not None and now - self.said_at < self.say_after):
            return ""
        self.said_at = now
        return self.why()
