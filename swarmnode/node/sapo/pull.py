"""TextPuller: how a SAPO node that nobody can dial still gets its peers' text.

A client-only node (behind a NAT, no relay reservation) is never a push target (`protocol.reachability.dialable`),
so it fetches instead, over its own outbound connections: every `every` seconds it asks each dialable peer for
the groups in that peer's recent ring (the pull stream `RolloutSender` serves beside every push stream) newer
than the newest it already holds from that peer. Cursors are the sender's own `created_at` (one clock per
cursor, so no skew between machines matters); the first pull of a peer goes back `max_age` seconds. Pulled
groups pass the receiver's checks and dedup like pushed ones.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Iterable

from hivemind.p2p import P2P, PeerID

from swarmnode.swarm.rollout_push import RolloutReceiver

logger = logging.getLogger(__name__)


class TextPuller:
    """Per-peer cursors and the pull rounds of a client-only SAPO node; see the module docstring."""

    def __init__(
        self,
        p2p: P2P,
        receiver: RolloutReceiver,
        *,
        limit: int,
        max_age: float,
        every: float = 2.0,
        timeout: float = 10.0,
    ):
        self.p2p, self.receiver = p2p, receiver
        self.limit, self.max_age, self.every, self.timeout = limit, max_age, every, timeout
        self.cursors: dict[str, float] = {}  # peer -> newest created_at held from it (its clock)
        self.counts: collections.Counter[str] = collections.Counter()  # pull outcomes, receiver statuses
        self._failed: set[str] = set()  # peers whose last pull failed (logged once until one succeeds)

    def saw(self, sampler_id: str, created_at: float) -> None:
        """Note a group of `sampler_id` that arrived (pulled or otherwise): the next pull starts after it."""
        if created_at > self.cursors.get(sampler_id, float("-inf")):
            self.cursors[sampler_id] = created_at

    async def pull_once(self, peers: Iterable[PeerID]) -> collections.Counter[str]:
        """One round: every peer at once; the statuses of what came back."""
        got: collections.Counter[str] = collections.Counter()
        for counts in await asyncio.gather(*(self._pull(peer) for peer in peers)):
            got.update(counts)
        self.counts.update(got)
        return got

    async def _pull(self, peer: PeerID) -> collections.Counter[str]:
        name = str(peer)
        since = self.cursors.get(name, time.time() - self.max_age)
        try:
            counts = await self.receiver.pull(self.p2p, peer, since=since, limit=self.limit, timeout=self.timeout)
        except Exception as exc:  # unreachable, reset, timed out: tried again next round
            if name not in self._failed:
                self._failed.add(name)
                logger.info("sapo: pulling text from %s failed: %s", name[-8:], str(exc).splitlines()[0] or exc)
            return collections.Counter(pull_failed=1)
        self._failed.discard(name)
        return counts

    async def run(self, peers, stop: asyncio.Event) -> None:
        """Pull from `peers()` every `every` seconds until `stop`."""
        while not stop.is_set():
            try:
                await self.pull_once(peers())
            except Exception as exc:  # a pull round must never end the node
                logger.warning("sapo: pull round failed: %s", exc)
            try:
                await asyncio.wait_for(stop.wait(), self.every)
            except TimeoutError:
                pass
