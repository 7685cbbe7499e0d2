"""Exponential backoff, the one way a node spaces its retries: p2pd's start, dialing the initial peers, weight
fetches and their rounds, rollout pushes, liveness probes, DHT looks and role checks."""

from __future__ import annotations

import random
import time
from collections.abc import Callable


class Backoff:
    """Delays that double after each failure from `base` up to `cap` seconds, each drawn uniformly from
    [delay/2, delay] ("equal jitter": retries of many peers spread out instead of arriving together), or exactly
    the doubled delay with `jitter=False` (one process's own retries: p2pd's start, its first dials);
    `success()` starts over. `ready()` says whether the next attempt may start now; `delay` is the last delay."""

    def __init__(
        self,
        base: float = 0.5,
        cap: float = 30.0,
        *,
        jitter: bool = True,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0 < base <= cap:
            raise ValueError(f"need 0 < base <= cap (got base {base}, cap {cap})")
        self.base, self.cap, self.jitter = base, cap, jitter
        self.failures = 0
        self.delay = 0.0
        self.not_before = -float("inf")
        self._rng = rng or random.Random()
        self._clock = clock

    def failure(self) -> float:
        """Count a failure; returns the delay before the next attempt (also kept as `not_before`)."""
        ceiling = min(self.cap, self.base * 2 ** min(self.failures, 64))  # past 2**64 the cap holds anyway
        self.failures += 1
        self.delay = self._rng.uniform(ceiling / 2, ceiling) if self.jitter else ceiling
        self.not_before = self._clock() + self.delay
        return self.delay

    def hold(self, seconds: float) -> None:
        """No attempt for `seconds`, without counting a failure (a wait whose end is known: space, a quota)."""
        self.not_before = self._clock() + seconds

    def success(self) -> None:
        self.failures = 0
        self.delay = 0.0
        self.not_before = -float("inf")

    def remaining(self) -> float:
        """Seconds until the next attempt may start (0 when it may start now)."""
        return max(0.0, self.not_before - self._clock())

    def ready(self) -> bool:
        return self.remaining() == 0.0
