"""What a learner's buffer throws away, and how long those completions were beside the ones it drew.

Dropping stale work is not a fair sample: a long completion takes longer to make and arrives later, so the
groups lost to staleness can be longer than those trained on, and a run that drops many is biased toward
short answers. `MeteredBuffer` is a `ReplayBuffer` that also keeps, per fate, the number of groups and their
mean completion length in tokens: `drawn` (taken for a step), `stale` (refused on arrival as too stale),
`aged_out` (held until the version moved past the bound), `refused` (quota, lineage, future version).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from swarmnode.learner.buffer import ReplayBuffer

REFUSED = ("quota", "lineage", "future")  # refusals on arrival other than staleness and duplicates
FATES = ("drawn", "stale", "aged_out", "refused")


def mean_completion_tokens(group: Any) -> float:
    """Mean completion length of a group's completions, in tokens (0 for a group without completions)."""
    completions = getattr(group, "completions", None) or []
    return sum(len(c) for c in completions) / len(completions) if completions else 0.0


class FateLengths:
    """Groups and their summed mean completion lengths, per fate (`FATES`)."""

    def __init__(self) -> None:
        self.groups = dict.fromkeys(FATES, 0)
        self.tokens = dict.fromkeys(FATES, 0.0)

    def add(self, fate: str, groups: list[Any]) -> None:
        self.groups[fate] += len(groups)
        self.tokens[fate] += sum(mean_completion_tokens(g) for g in groups)

    def summary(self) -> dict[str, dict[str, float | None]]:
        """Per fate: `groups` and `mean_tokens` (their mean completion length; None with no group)."""
        return {
            fate: {"groups": n, "mean_tokens": round(self.tokens[fate] / n, 3) if n else None}
            for fate, n in self.groups.items()
        }


class MeteredBuffer(ReplayBuffer):
    """A `ReplayBuffer` that records each group's fate with its completion length (`lengths`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lengths = FateLengths()

    def add(self, group: Any) -> str:
        status = super().add(group)
        self._arrival(group, status)
        return status

    def readmit(self, group: Any) -> str:
        status = super().readmit(group)
        self._arrival(group, status)
        return status

    def _arrival(self, group: Any, status: str) -> None:
        if status == "stale":
            self.lengths.add("stale", [group])
        elif status in REFUSED:
            self.lengths.add("refused", [group])

    def set_version(self, v: int) -> None:
        with self._lock:
            before = self.held()
            super().set_version(v)
            kept = {g.group_id for g in self.held()}
            self.lengths.add("aged_out", [g for g in before if g.group_id not in kept])

    def draw(self, n: int, leave: Callable[[Any], bool] | None = None) -> list[Any]:
        drawn = super().draw(n, leave)
        self.lengths.add("drawn", drawn)
        return drawn


LOST = ("stale", "aged_out", "evicted", *REFUSED)  # buffer counters of groups that arrived and were not drawn


def waste_between(earlier: dict, later: dict) -> dict[str, float]:
    """Groups that reached the learner between two of its step records (their cumulative `buffer_counters`),
    how many were lost (`LOST`: refused on arrival, aged out or evicted; duplicates are not groups made twice),
    and the `waste` fraction lost/arrived (0 with none arrived)."""

    def delta(reason: str) -> int:
        return int(later["buffer_counters"].get(reason, 0)) - int(earlier["buffer_counters"].get(reason, 0))

    arrived = delta("ok") + sum(delta(r) for r in ("stale", *REFUSED))
    lost = sum(delta(r) for r in LOST)
    return {"arrived": arrived, "lost": lost, "waste": lost / arrived if arrived else 0.0}
