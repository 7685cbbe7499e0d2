"""Credits: how many more rollout groups a learner invites, told in its acks, so that samplers make no more
than it trains on within the staleness bound.

Why: a learner draws the newest groups first, so any standing surplus (groups held in its buffer beyond one
step's draw, or waiting in samplers' outboxes) is left behind by fresher arrivals until it ages past
`sync.max_staleness` and is thrown away; generating it was wasted work, and the groups thrown away are not a
fair sample (long completions take longer to make and arrive later).

Learner side, `CreditPolicy`: a target number of groups held (`target`, one step's draw unless
`learner.buffer_high_water` says otherwise, never more than the staleness bound lets it train on in time). The
room below it is shared among the senders heard from within `active_window` seconds, rounded up, and told to
each in its acks (`"c"`); at the target the door is "full" (a push is held by its sender and resent shortly).

Sender side (`RolloutSender`): each destination's last told credit minus the groups still waiting for its ack
is what it invites now. A sampler generates a batch when it fits what is invited, or when nothing of its own is
outstanding (a probe: its acks bring a new credit; a learner with no room holds it "full" until it has), so it
never has more than one batch, or its share of the room, beyond what the learner takes.
"""

from __future__ import annotations

import time
from typing import Callable

MAX_CREDIT = 1 << 20  # a told credit above this is a malformed ack's, ignored


def credit_target(prompts_per_step: int, publish_every: int, max_staleness: int, high_water: int = 0) -> int:
    """Groups a learner wants held: `high_water` if set, else one step's draw (`prompts_per_step`); never more
    than it draws within the staleness bound (`prompts_per_step` per step, `publish_every` steps per version,
    `max_staleness` versions), and at least one step's draw."""
    wanted = high_water or prompts_per_step
    return max(prompts_per_step, min(wanted, prompts_per_step * publish_every * max(1, max_staleness)))


class CreditPolicy:
    """The learner's credits: `full()` for the receiver's door, `grant(peer)` for each ack (see the module
    docstring). `held()` is the number of groups the learner holds now; `clock` is injectable for tests."""

    def __init__(self, target: int, held: Callable[[], int], active_window: float = 5.0,
                 clock: Callable[[], float] = time.monotonic):
        if target < 1 or active_window <= 0:
            raise ValueError("target >= 1 and active_window > 0 are required")
        self.target, self.held, self.active_window, self.clock = target, held, active_window, clock
        self._heard: dict[str, float] = {}  # sender -> when it last pushed

    def full(self) -> bool:
        """True while the learner holds its target: pushes are answered "full" (held by the sender)."""
        return self.held() >= self.target

    def senders(self) -> int:
        """Senders heard from within `active_window` seconds (the others are forgotten)."""
        cutoff = self.clock() - self.active_window
        for peer in [p for p, t in self._heard.items() if t < cutoff]:
            del self._heard[peer]
        return len(self._heard)

    def grant(self, peer: str) -> int:
        """The credit told to `peer` (who just pushed): its share of the room below the target, rounded up."""
        self._heard[peer] = self.clock()
        room = max(0, self.target - self.held())
        return -(-room // max(1, self.senders()))


def pacing_credits(cfg, held: Callable[[], int]) -> CreditPolicy | None:
    """A learner's `CreditPolicy` from its NodeConfig (`sync.pacing`, `learner.buffer_high_water`), or None
    with pacing off."""
    if cfg.sync.pacing != "credits":
        return None
    lc = cfg.learner
    return CreditPolicy(credit_target(lc.prompts_per_step, lc.publish_every, cfg.sync.max_staleness,
                                      lc.buffer_high_water), held)


def told_credit(ack: dict) -> int | None:
    """The credit an ack tells (its `"c"`), or None when it tells none or a malformed one."""
    credit = ack.get("c")
    if isinstance(credit, int) and not isinstance(credit, bool) and 0 <= credit <= MAX_CREDIT:
        return credit
    return None
