"""The learner's side of rollout delivery: groups come in and wait in the replay buffer for the learner loop.

Whoever delivers (the swarm's `RolloutReceiver`, which needs the buffer's verdict for its ack, or a local
sampler through `send`, a `RolloutSink`) hands groups to one `RolloutInbox`; the learner loop draws from its
buffer and, when it holds too few groups, waits here for the next arrival instead of polling. With a `journal`
(a swarm learner's `GroupJournal`), an accepted group is made `durable` before it is acknowledged, and no group
is accepted while the journal is over its hard limit (the learner is not checkpointing).
"""

from __future__ import annotations

import threading

from swarmnode.learner.buffer import ReplayBuffer
from swarmnode.learner.journal import GroupJournal
from swarmnode.protocol.rollout import RolloutGroup


class RolloutInbox:
    """Admits groups into `buffer` (from any thread) and wakes a learner waiting for them."""

    def __init__(self, buffer: ReplayBuffer, journal: GroupJournal | None = None) -> None:
        self.buffer, self.journal = buffer, journal
        self._arrived = threading.Condition()

    def admit(self, group: RolloutGroup) -> str:
        """Put `group` in the buffer; its status ("ok", "duplicate", "stale", "quota", "busy"...), as an ack
        tells it."""
        if self.journal is not None and self.journal.over_hard_limit:
            return "busy"  # accept no more than a learner that is not checkpointing can keep
        status = self.buffer.add(group)
        with self._arrived:
            self._arrived.notify_all()
        return status

    async def durable(self, group: RolloutGroup, body: bytes) -> None:
        """Journal an accepted group's wire bytes and wait until they are on disk (before the ack)."""
        if self.journal is not None:
            self.journal.append(body)
            await self.journal.sync()

    def send(self, group: RolloutGroup) -> None:
        """The `RolloutSink` form of `admit` (a local sampler needs no verdict)."""
        self.admit(group)

    def wait(self, groups: int, timeout: float) -> bool:
        """Block until the buffer holds at least `groups` groups (True) or `timeout` seconds pass (False)."""
        with self._arrived:
            return self._arrived.wait_for(lambda: len(self.buffer) >= groups, timeout)
