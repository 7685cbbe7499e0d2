"""A learner's curves over the whole run in bounded memory: at most `MAX_POINTS` points, each the mean of a run
of consecutive steps.

Every step adds one point; when `MAX_POINTS` are held, neighbours are merged in pairs and each point then
covers twice as many steps as before (`span`), so the curves always reach back to the run's first step, at a
resolution that halves each time the run doubles. The metrics (`METRICS`): mean reward, held-out reward (when
the learner's steps carry one), KL to the samplers' policy, mean staleness, and groups trained per second
(groups over the wall time the points cover). Durable with the tally (`as_state` / `load_state`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

MAX_POINTS = 128
METRICS = ("reward", "heldout_reward", "kl", "staleness", "groups_per_s")
# where each metric comes from in a steps-file record (the first key present; held-out reward only when evaluated)
SOURCES: dict[str, tuple[str, ...]] = {
    "reward": ("reward_mean",),
    "heldout_reward": ("eval_reward",),  # the held-out evaluation's figure, on the steps it lands in
    "kl": ("kl",),
    "staleness": ("staleness_mean",),
}


@dataclass
class Point:
    """Steps `first`..`last`, ending at wall time `t1` (from `t0`), with the sums of each metric and counts."""

    first: int
    last: int
    t0: float
    t1: float
    groups: float
    sums: dict[str, float]
    counts: dict[str, int]

    def merge(self, other: Point) -> Point:
        sums = {m: self.sums.get(m, 0.0) + other.sums.get(m, 0.0) for m in set(self.sums) | set(other.sums)}
        counts = {m: self.counts.get(m, 0) + other.counts.get(m, 0) for m in set(self.counts) | set(other.counts)}
        return Point(self.first, other.last, self.t0, other.t1, self.groups + other.groups, sums, counts)

    def value(self, metric: str) -> float | None:
        if metric == "groups_per_s":
            span = self.t1 - self.t0
            return self.groups / span if span > 0 else None
        n = self.counts.get(metric, 0)
        return self.sums[metric] / n if n else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


class Curves:
    """See the module docstring."""

    def __init__(self, max_points: int = MAX_POINTS) -> None:
        self.max_points = max(2, max_points - max_points % 2)
        self.points: list[Point] = []
        self.span = 1  # steps per point at the current resolution

    def add(self, record: dict[str, Any]) -> None:
        """One steps-file record (`step`, `time`, `step_time`, `sampler_valid` and the metrics' sources)."""
        step, at = int(record.get("step", 0)), float(record.get("time", 0.0))
        start = self.points[-1].t1 if self.points else at - float(record.get("step_time", 0.0) or 0.0)
        sums, counts = {}, {}
        for metric, keys in SOURCES.items():
            value = next((v for k in keys if (v := _number(record.get(k))) is not None), None)
            if value is not None:
                sums[metric], counts[metric] = value, 1
        point = Point(step, step, start, at, float(sum(record.get("sampler_valid") or [])), sums, counts)
        last = self.points[-1] if self.points else None
        if last is not None and last.last - last.first + 1 < self.span:
            self.points[-1] = last.merge(point)  # the newest point fills up to the current span
        else:
            self.points.append(point)
        if len(self.points) > self.max_points:
            self.points = [a.merge(b) for a, b in zip(self.points[::2], self.points[1::2], strict=False)] + (
                [self.points[-1]] if len(self.points) % 2 else []
            )
            self.span *= 2

    def series(self) -> dict[str, list[float | None]]:
        """`step` (each point's last step) and one list per metric, aligned."""
        out: dict[str, list[Any]] = {"step": [p.last for p in self.points]}
        for metric in METRICS:
            out[metric] = [_rounded(p.value(metric)) for p in self.points]
        return out

    def as_state(self) -> dict[str, Any]:
        return {
            "span": self.span,
            "points": [[p.first, p.last, p.t0, p.t1, p.groups, p.sums, p.counts] for p in self.points],
        }

    def load_state(self, state: dict[str, Any]) -> None:
        self.span = max(1, int(state["span"]))
        points = [
            Point(int(a), int(b), float(c), float(d), float(e), dict(f), dict(g))
            for a, b, c, d, e, f, g in state["points"]
        ]
        self.points = points[-self.max_points :]


def _rounded(value: float | None) -> float | None:
    return None if value is None else float(f"{value:.5g}")
