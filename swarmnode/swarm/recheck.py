"""Reachability after join: looked at again, and what the node advertises kept true.

What join decided (`swarm.reachability`) can stop being true: the relay drops the reservation or restarts, a router
gains or loses a forwarded port. `ReachabilityWatch` looks again, cheaply and bounded:
- every heartbeat, whether p2pd still holds a relay reservation (a `/p2p-circuit` address: a local call);
- every `network.reachability_recheck` seconds, at once when the reservation is lost, and on the next heartbeat
  while a change waits to be confirmed: the join's dial-back (bounded by `network.reachability_timeout`).
`observed` turns one look into a status; `Transition` takes a new status only when two looks in a row agree, so
one lost dial-back does not flip a node. A change logs one line and is what the next heartbeat advertises (the
record's `reachability`, `status`'s `reach`). p2pd is not restarted: a public node that stops being dialled back
is client-only (peers stop dialling it) until a recheck reaches it again; a relayed node without its reservation
is client-only until p2pd holds one again. Forced reachability (`network.reachability` public or private) is
never rechecked.
"""

from __future__ import annotations

import asyncio
import logging
import time

from swarmnode.config import NetworkConfig
from swarmnode.protocol.reachability import CLIENT_ONLY, PUBLIC, RELAYED
from swarmnode.swarm.reachability import Reachability, ask_helpers, decide, how_many
from swarmnode.swarm.relay import wait_for_relay

logger = logging.getLogger(__name__)


def observed(current: str, dialled_back: bool | None, relay: str | None) -> str:
    """The status one look shows: dialled back -> public; not dialled back -> relayed while p2pd holds a
    reservation, else client-only; not asked (or nobody answered) -> a node that was not dialled follows its
    reservation, any other keeps `current`."""
    if dialled_back:
        return PUBLIC
    if dialled_back is False or current in (RELAYED, CLIENT_ONLY):
        return RELAYED if relay else CLIENT_ONLY
    return current


class Transition:
    """The advertised status, changed only when `confirm` looks in a row show the same new one."""

    def __init__(self, status: str, confirm: int = 2):
        self.status, self.confirm = status, confirm
        self.pending: str | None = None
        self._seen = 0

    def observe(self, seen: str) -> str | None:
        """Take one look; the new status when it changes now, else None."""
        if seen == self.status:
            self.pending, self._seen = None, 0
            return None
        self._seen = self._seen + 1 if seen == self.pending else 1
        self.pending = seen
        if self._seen < self.confirm:
            return None
        self.status, self.pending, self._seen = seen, None, 0
        return seen


class ReachabilityWatch:
    """Rechecks `reach` (this node's, decided at join) on `p2p`; see the module docstring. `run()` until cancelled."""

    def __init__(self, p2p, net: NetworkConfig, reach: Reachability, clock=time.monotonic):
        self.p2p, self.net, self.reach, self.clock = p2p, net, reach, clock
        self.transition = Transition(reach.status)
        self.last_dialback = clock()
        self.relay = reach.relay
        self.changes = 0

    def _dialback_due(self, relay_lost: bool) -> bool:
        every = self.net.reachability_recheck
        return (
            relay_lost
            or self.transition.pending is not None
            or (every > 0 and self.clock() - self.last_dialback >= every)
        )

    async def look(self) -> str | None:
        """One look (see the module docstring); the new status when it changed."""
        relay = await wait_for_relay(self.p2p, 0.0)
        relay_lost = self.relay is not None and relay is None
        dialled_back, how = None, None
        if self._dialback_due(relay_lost):
            self.last_dialback = self.clock()
            answers = [a for _, a in await ask_helpers(self.p2p, self.net)]
            dialled_back = decide(answers)
            how = how_many(answers) if answers else None
        self.relay = relay
        old = self.transition.status
        new = self.transition.observe(observed(old, dialled_back, relay))
        if new is None:
            return None
        self.changes += 1
        self.reach.status, self.reach.relay = new, relay if new == RELAYED else None
        why = how or ("relay reservation lost" if new == CLIENT_ONLY else "relay reservation held")
        self.reach.how = f"rechecked: {why}"
        logger.warning("reachability changed from %s: %s", old, self.reach.line())
        return new

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.net.heartbeat_interval)
            try:
                await self.look()
            except Exception as exc:  # a daemon hiccup: the next heartbeat looks again
                logger.info("reachability recheck failed: %s", str(exc).splitlines()[0] if str(exc) else exc)
