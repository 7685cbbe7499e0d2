"""When a sampler may generate its next batch: no faster than the learners take groups within the staleness
bound (the credits their acks tell; see `swarm.gossip.credit`).

Network-free: the sampler role hands in what its sender knows (groups still waiting for an ack, what the
learners invite beyond them) and gets a yes or no.
"""

from __future__ import annotations

from dataclasses import dataclass

OUTBOX_LIMIT = 64  # pacing off: a sampler pauses while this many of its groups wait for an ack


@dataclass
class Pacer:
    """`may_generate(outstanding, invited)` for a sampler making `batch` groups at a time.

    With `credits`: yes when the whole batch fits what the learners invite, or when nothing of its own is
    outstanding (a probe: its acks tell a fresh credit, and a learner with no room holds it "full" until it
    has; before any credit is told, and with learners that tell none, `invited` is None and every batch is
    such a probe). With `credits` off: yes while fewer than `OUTBOX_LIMIT` groups wait. `waits` counts the
    no's, `probes` the batches made without enough credit."""

    batch: int
    credits: bool = True
    waits: int = 0
    probes: int = 0

    def __post_init__(self) -> None:
        if self.batch < 1:
            raise ValueError("batch must be at least 1")

    def may_generate(self, outstanding: int, invited: int | None) -> bool:
        if not self.credits:
            ok = outstanding < OUTBOX_LIMIT
        elif invited is not None and invited >= self.batch:
            ok = True
        else:
            ok = outstanding == 0
            self.probes += ok
        self.waits += not ok
        return ok
