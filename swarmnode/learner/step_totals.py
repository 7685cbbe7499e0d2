"""A step's figures from its micro-batches' figures: sums and counts accumulated, divided once a step.

Each micro-batch's diagnostics (`policy_loss`) come with the count each mean was taken over, under the key
`COUNT_PREFIX + name` (rows by default, `_n_rows`; completion tokens for token-level figures such as the entropy
or GRPO's clip fraction; the rows of a staleness bucket for its KL). The step's figure is then
sum(count x mean) / sum(count), exactly what one pass over the whole step would give, however gradient
accumulation or the token budget cut it:
- `loss` and `pg_loss` add up each micro-batch's value times its share of the step's loss (what was
  back-propagated);
- `*_min` / `*_max` are the minimum / maximum over micro-batches;
- `is_weight_var` and `reward_std` (population figures) are merged with their means by the law of total variance;
- `staleness_median` cannot be merged: the loop reports the step's own (from every group drawn).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

COUNT_PREFIX = "_n_"
ROWS = COUNT_PREFIX + "rows"
SHARED = ("loss", "pg_loss")  # merged by the micro-batch's share of the step's loss
SPREADS = {"is_weight_var": ("is_weight_mean", False), "reward_std": ("reward_mean", True)}  # (its mean, is std)


def counted(diag: dict[str, Any], rows: Any, tokens: Any, counts: dict[str, Any]) -> dict[str, Any]:
    """The count entries of one micro-batch's `diag`: `rows` for every figure, `counts[name]` where a figure was
    taken over something else (tokens, a subset of rows); `tokens` for the token-level figures every family has."""
    out = {ROWS: rows, COUNT_PREFIX + "entropy": tokens}
    out.update({COUNT_PREFIX + k: v for k, v in counts.items()})
    return out


class StepTotals:
    """Accumulates micro-batch diagnostics (python floats, read back) and gives the step's figures once."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = defaultdict(float)
        self.counts: dict[str, float] = defaultdict(float)
        self.squares: dict[str, float] = defaultdict(float)  # for SPREADS: sum of count x (spread^2 + mean^2)
        self.extremes: dict[str, float] = {}

    def add(self, diag: dict[str, Any], share: float = 1.0) -> None:
        """One micro-batch's diagnostics; `share` is its loss's share of the step's loss."""
        rows = float(diag.get(ROWS, 1.0))
        for key, value in diag.items():
            if key.startswith(COUNT_PREFIX):
                continue
            value = float(value)
            if key in SHARED:
                self.sums[key] += share * value
                self.counts[key] = 1.0
            elif key.endswith("_min"):
                self.extremes[key] = min(self.extremes.get(key, math.inf), value)
            elif key.endswith("_max"):
                self.extremes[key] = max(self.extremes.get(key, -math.inf), value)
            else:
                n = float(diag.get(COUNT_PREFIX + key, diag.get(COUNT_PREFIX + _family(key), rows)))
                if key in SPREADS:
                    mean = float(diag.get(SPREADS[key][0], 0.0))
                    self.squares[key] += n * ((value * value if SPREADS[key][1] else value) + mean * mean)
                self.sums[key] += n * value
                self.counts[key] += n

    def result(self) -> dict[str, float]:
        """The step's figures."""
        out = {k: self.sums[k] / self.counts[k] for k in self.sums if self.counts[k] > 0}
        out.update(self.extremes)
        for key, (mean_key, is_std) in SPREADS.items():
            if key in out and mean_key in out and self.counts[key] > 0:
                var = max(0.0, self.squares[key] / self.counts[key] - out[mean_key] ** 2)
                out[key] = math.sqrt(var) if is_std else var
        return out


def _family(key: str) -> str:
    """The count a figure shares with others of its family (`is_weight_mean` and `is_weight_var` are taken over
    the same rows, counted once as `is_weight`)."""
    return "is_weight" if key.startswith("is_weight_") else key


def merge(diags: list[tuple[float, dict[str, Any]]]) -> dict[str, float]:
    """The step's figures from (share of the step's loss, diagnostics) per micro-batch."""
    totals = StepTotals()
    for share, diag in diags:
        totals.add(diag, share)
    return totals.result()
