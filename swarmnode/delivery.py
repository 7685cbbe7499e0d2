"""Rollout delivery's one interface: a `RolloutSink` takes a group and never blocks.

Both ways groups travel implement it: the swarm (`swarm.rollout_push.RolloutSender.send` pushes to the learners) and
one process (`learner.buffer.RolloutInbox.send` puts into the learner's buffer), so `SamplerLoop` and
`LearnerLoop` are driven the same way in a swarm and in `train-local`. `DelayedSink` holds groups back for
latency experiments (`--simulate-delay` on rollouts).
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable
from typing import Protocol

from swarmnode.protocol.rollout import RolloutGroup


class RolloutSink(Protocol):
    """Where a sampler's groups go. Called from the generation thread; must not block."""

    def __call__(self, group: RolloutGroup) -> None: ...


class DelayedSink:
    """Passes each group on to `inner` after `delay()` seconds (one timer thread, groups kept in arrival order
    of their due times). Used with `--simulate-delay` for rollouts."""

    def __init__(self, inner: RolloutSink, delay: Callable[[], float]) -> None:
        self.inner, self.delay = inner, delay
        self._due: list[tuple[float, int, RolloutGroup]] = []
        self._order = itertools.count()
        self._wake = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="delayed-rollouts", daemon=True)
        self._thread.start()

    def __call__(self, group: RolloutGroup) -> None:
        hold = self.delay()
        if hold <= 0:
            self.inner(group)
            return
        with self._wake:
            heapq.heappush(self._due, (time.monotonic() + hold, next(self._order), group))
            self._wake.notify()

    @property
    def waiting(self) -> int:
        """Groups held back now (not yet passed on)."""
        with self._wake:
            return len(self._due)

    def close(self) -> None:
        """Stop the timer thread; groups still held are dropped (as a closing sender drops its outbox)."""
        with self._wake:
            self._closed = True
            self._wake.notify()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._closed and (not self._due or self._due[0][0] > time.monotonic()):
                    self._wake.wait(timeout=self._due[0][0] - time.monotonic() if self._due else None)
                if self._closed:
                    return
                _, _, group = heapq.heappop(self._due)
            self.inner(group)
