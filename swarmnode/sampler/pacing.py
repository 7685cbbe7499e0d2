"""How many groups a sampler may generate next: no more than the learners take within the staleness bound
(the credits their acks tell; see `swarm.rollout_push.credit`).

Network-free: the sampler role hands in what its sender knows (groups still waiting for an ack, what the
learners invite beyond them) and gets the number of prompts of its next batch (0: wait for an ack).
"""

from __future__ import annotations

from dataclasses import dataclass

from swarmnode.staleness import too_stale

OUTBOX_LIMIT = 64  # `sync.pacing: outbox`: a sampler pauses while this many of its groups wait for an ack


@dataclass
class Pacer:
    """`next_batch(outstanding, invited)`: the prompts of the next batch, at most `batch`, or 0 to wait.

    With `credits`: a full batch when the learners invite one (`invited`); less only when nothing of its own is
    outstanding (else it waits for the acks to invite a whole batch: small batches generate slowly): what is
    invited, or with nothing invited one group, a probe whose ack tells a fresh credit (a learner with no room
    holds it "full" until it has). Learners that tell no credits (`invited` None) get a full batch whenever
    nothing is outstanding (stop and wait). With `credits` off: a full batch while fewer than `OUTBOX_LIMIT`
    groups wait. `waits` counts the 0's, `probes` the one-group probes.

    `stale_on_arrival(lag, bound)` (with `credits`): whether a batch started `lag` versions behind would be
    more than half the bound behind by the time it is sent, the learners moving on by as many versions as
    during the last batches (`batch_took`, a moving average): then the sampler fetches newer weights first.
    The other half is the learner's: a group arriving old is drawn after every newer one (newest first), and
    its credit target falls to one step once a held group is half the bound behind (`swarm.rollout_push.credit`)."""

    batch: int
    credits: bool = True
    waits: int = 0
    probes: int = 0
    batch_versions: float = 0.0  # versions the learners moved on during a batch, moving average

    def __post_init__(self) -> None:
        if self.batch < 1:
            raise ValueError("batch must be at least 1")

    def next_batch(self, outstanding: int, invited: int | None) -> int:
        if not self.credits:
            n = self.batch if outstanding < OUTBOX_LIMIT else 0
        elif invited is None:
            n = self.batch if outstanding == 0 else 0
        elif invited >= self.batch:
            n = self.batch
        elif outstanding == 0:
            n = max(1, invited)
            self.probes += invited == 0
        else:
            n = 0
        self.waits += n == 0
        return n

    def batch_took(self, versions: int) -> None:
        """The learners' newest version moved on by `versions` while the last batch was generated."""
        self.batch_versions = 0.5 * self.batch_versions + 0.5 * max(0, versions)

    def stale_on_arrival(self, lag: int, max_staleness: int) -> bool:
        """See the class docstring; never when `lag` is 0 (newer weights do not exist: generate)."""
        return self.credits and lag > 0 and too_stale(lag + round(self.batch_versions), max_staleness // 2)
