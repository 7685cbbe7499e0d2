"""Staleness: the one rule for what is too stale, and the power-of-two histogram of how many versions old the
groups a learner trained on were.

A leaf module (no swarmnode imports). `too_stale` is the rule every place that checks `sync.max_staleness` uses:
the learner's buffer refuses and ages out groups by it, a sampler pauses by it, the single-process trainer
forces a weight sync by it, and the health alerts flag a sampler by it. The loss's per-bucket KL, the learner
loop's histogram, the health record, the Prometheus labels and the dashboard all bucket staleness the same way.
"""

from __future__ import annotations

from collections.abc import Iterable

MAX_BUCKETS = 16  # [0], [1], [2-3], [4-7], ..., the last one open-ended


def too_stale(versions_behind: int, max_staleness: int) -> bool:
    """True when something `versions_behind` versions older than the learner's policy is beyond the bound: a
    group made that far behind is not trained on, and a sampler holding weights that far behind stops
    generating until it has newer ones. At exactly `max_staleness` behind it is still usable (0: on-policy)."""
    return versions_behind > max_staleness


def bucket_of(tau: int) -> int:
    """Index of staleness `tau` in the power-of-two histogram: 0 -> 0, 1 -> 1, 2-3 -> 2, 4-7 -> 3, ..."""
    return 0 if tau <= 0 else min(MAX_BUCKETS - 1, int(tau).bit_length())


def bucket_label(index: int) -> str:
    """The staleness range of bucket `index` ("0", "1", "2-3", ..., "16384+" for the last)."""
    if index <= 1:
        return str(index)
    lo = 1 << (index - 1)
    return f"{lo}+" if index == MAX_BUCKETS - 1 else f"{lo}-{2 * lo - 1}"


class StalenessHistogram:
    """Counts of trained-on groups by staleness bucket (cumulative since the node started)."""

    def __init__(self) -> None:
        self.counts: list[int] = []

    def add(self, taus: Iterable[int]) -> None:
        for tau in taus:
            i = bucket_of(tau)
            if i >= len(self.counts):
                self.counts.extend([0] * (i + 1 - len(self.counts)))
            self.counts[i] += 1
