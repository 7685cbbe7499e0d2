"""PlausibilityCheck: refuse a peer's text that this node's own policy would not have written.

A peer can share honestly re-scored groups whose completions are chosen, not sampled: a marker it wants the node
to learn placed above its group's mean reward and junk below. Re-scoring cannot see that (every reward is true);
the text's likelihood under the node's own policy can (the check "Hail to the Thief", arXiv 2511.09780,
recommends for peers running the same model). The measure of a completion is its mean per-token log-probability
under the node's current policy at the sampling temperature (EOS included, as the sampler counts it). The check
keeps the measure of the node's own latest sampled completions (`window` of them) and sets a floor: their
`quantile` less `margin` nats. A group any of whose completions falls below the floor is refused, counted per
peer. Until `min_samples` own completions are known there is no floor: `SapoPolicy` takes no peer's group before
it has one (a node with no local groups never has one: its peers' groups pass, counted `unchecked`).
"""

from __future__ import annotations

import collections
import statistics
import threading
from collections.abc import Callable, Iterable, Sequence


def mean_logprob(token_logprobs: Sequence[float]) -> float:
    """A completion's mean per-token log-probability (an empty completion counts as certain: 0)."""
    return statistics.fmean(token_logprobs) if token_logprobs else 0.0


class PlausibilityCheck:
    """The floor set by the node's own samples and the per-peer decisions; see the module docstring."""

    def __init__(
        self,
        quantile: float = 0.01,
        margin: float = 2.0,
        window: int = 512,
        min_samples: int = 16,
        on_outcome: Callable[[str, bool], None] | None = None,
    ):
        """`on_outcome(peer, passed)` hears every decision made with a floor (e.g. `PeerDistrust.record`)."""
        if not 0.0 <= quantile < 1.0 or margin < 0 or window < 1 or not 1 <= min_samples <= window:
            raise ValueError("0 <= quantile < 1, margin >= 0 and 1 <= min_samples <= window are required")
        self.quantile, self.margin, self.min_samples = quantile, margin, min_samples
        self._own: collections.deque[float] = collections.deque(maxlen=window)
        self.refused: collections.Counter[str] = collections.Counter()  # peer -> groups refused
        self.passed: collections.Counter[str] = collections.Counter()  # peer -> groups checked and kept
        self.unchecked = 0  # groups let through before the floor existed
        self.on_outcome = on_outcome
        self._lock = threading.Lock()

    def observe(self, own_completions: Iterable[Sequence[float]]) -> None:
        """Record the per-token log-probs of completions the node itself just sampled."""
        with self._lock:
            self._own.extend(mean_logprob(lp) for lp in own_completions)

    def floor(self) -> float | None:
        """The lowest mean per-token log-prob a peer's completion may have; None until `min_samples` are known."""
        with self._lock:
            if len(self._own) < self.min_samples:
                return None
            ordered = sorted(self._own)
        return ordered[int(self.quantile * (len(ordered) - 1))] - self.margin

    def admit(self, peer: str, completions: Iterable[Sequence[float]]) -> bool:
        """Whether a peer's group (its completions' per-token log-probs under the own policy) is plausible."""
        floor = self.floor()
        if floor is None:
            self.unchecked += 1
            return True
        ok = all(mean_logprob(lp) >= floor for lp in completions)
        (self.passed if ok else self.refused)[peer] += 1
        if self.on_outcome is not None:
            self.on_outcome(peer, ok)
        return ok
