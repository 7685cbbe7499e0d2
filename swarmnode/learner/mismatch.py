"""What a spot check measures: the distribution of a group's per-token differences d = claimed - recomputed
behaviour log-prob, judged against limits that scale with `trust.verify_tolerance` (t, 0.1 nats by default).

A group is refused when any of these is over its limit (`Mismatch.reason` names the first):
- `median`: the median |d| over the group's tokens > t (a lie on most tokens);
- `mean`: |sum of d| / (tokens + `SEQ_SLACK`) > t (a lie that moves the group's log-probs one way; the slack
  keeps a small group's few honest outliers under the limit);
- `mean_abs`: the sum of |d| / (tokens + `SEQ_SLACK`) > t (lies of either sign that cancel in the mean and sit on
  under half the tokens: +-2 nats on 48 % of them has a median and a mean near 0 but a mean |d| near 1);
- `off_tokens`: more than `OFF_SHARE` of the tokens (rounded down: none in a group under 100 tokens) have
  |d| > `OFF_TOKEN` x t (a high quantile of |d|: +-0.5 nats on a tenth of the tokens);
- `sequence`: some completion's |sum of d| > t x (its tokens + `SEQ_SLACK`) (a lie on one completion, the one
  with the largest advantage or the longest, which the group's figures dilute; the importance weights of
  GSPO and GEPO are made of exactly that sum).
Honest samplers sit far below each: an fp32 sampler's d is 0 up to float rounding; a bf16 one's |d| averages
0.02-0.03 with single tokens up to 0.16-0.29 (measured on a GPU; bench/verify-tolerance has the CPU calibration).

`kl` is the k3 estimate of KL(claimed || recomputed) per token, mean(exp(-d) - 1 + d) over the tokens the sampler
drew: about d^2 / 2 for small d, 0 for an honest fp32 sampler; the learner keeps it per sampler (the anomaly signal
`status` compares across the run's samplers).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

OFF_TOKEN = 4.0  # a token is off when |d| > OFF_TOKEN x tolerance (0.4 nats at the default)
OFF_SHARE = 0.01  # share of a group's tokens that may be off (rounded down)
SEQ_SLACK = 3.0  # a completion's (and the group's) |sum d| may reach tolerance x (its tokens + SEQ_SLACK)


@dataclass(frozen=True)
class Mismatch:
    """A checked group's statistics (nats) and the first one over its limit (None: the group passes)."""

    tokens: int
    median_abs: float
    mean: float  # sum of d / (tokens + SEQ_SLACK)
    mean_abs: float  # sum of |d| / (tokens + SEQ_SLACK)
    off_tokens: int
    sequence: float  # the largest completion |sum d| / (its tokens + SEQ_SLACK): compared with t like the others
    kl: float
    reason: str | None
    off_draws: int = 0  # tokens outside their seeded interval (a replayed draw: `learner.draw_check`)

    @property
    def passed(self) -> bool:
        return self.reason is None

    def describe(self) -> str:
        """One line for the log: the failing statistic, or the group's mean |d| when it passed."""
        if self.reason == "off_tokens":
            return f"{self.off_tokens} of {self.tokens} tokens off by more than {OFF_TOKEN:g}x the tolerance"
        if self.reason == "drawn":
            return f"{self.off_draws} of {self.tokens} tokens not drawn from their seed"
        figures = {
            "median": f"median |d| {self.median_abs:.3g}",
            "mean": f"mean d {self.mean:.3g}",
            "sequence": f"a completion's mean d {self.sequence:.3g}",
        }
        return figures.get(self.reason or "", f"mean |d| {self.mean_abs:.3g}") + " nats per token"


def group_mismatch(recomputed: torch.Tensor, claimed: torch.Tensor, mask: torch.Tensor, tolerance: float) -> Mismatch:
    """The statistics of `claimed - recomputed` over the completion tokens `mask` ([completions, tokens] each),
    judged at `tolerance` (module docstring)."""
    delta = (claimed.to(recomputed.device).float() - recomputed.float()) * mask
    tokens = int(mask.sum())
    if not tokens:
        return Mismatch(0, 0.0, 0.0, 0.0, 0, 0.0, 0.0, None)
    flat = delta[mask.bool()]
    absolute = flat.abs()
    median_abs = float(absolute.median())
    mean, mean_abs = float(flat.sum()) / (tokens + SEQ_SLACK), float(absolute.sum()) / (tokens + SEQ_SLACK)
    off = int((absolute > OFF_TOKEN * tolerance).sum())
    lengths = mask.float().sum(dim=1)
    per_sequence = (delta.sum(dim=1).abs() / (lengths + SEQ_SLACK))[lengths > 0]
    sequence = float(per_sequence.max())
    kl = float((torch.exp(-flat) - 1 + flat).mean())
    checks = (
        ("median", median_abs > tolerance),
        ("mean", abs(mean) > tolerance),
        ("mean_abs", mean_abs > tolerance),
        ("off_tokens", off > math.floor(OFF_SHARE * tokens)),
        ("sequence", sequence > tolerance),
    )
    reason = next((name for name, over in checks if over), None)
    return Mismatch(tokens, median_abs, mean, mean_abs, off, sequence, kl, reason)
