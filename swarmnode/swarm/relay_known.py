"""Which addresses a relaying bootstrap knows: those its run's established peers connect from.

A flood of throwaway keys from many address prefixes passes every per-address and per-prefix cap
(`relay_guard`), and p2pd's relay offers no per-key admission control. What the bootstrap can tell apart is age in
the run: a key is *known* once this bootstrap has seen its live peer record for `relay_known_after_s` (sampled
like `status` reads the run; a designated learner, `trust.learner_keys`, is known at once), and an address is
known while a known key held a connection from it within the last `KNOWN_ADDRESS_TTL` (a reservation's lifetime).
`relay_guard` caps the connections of all unknown addresses together (`network.relay_stranger_conns`), so the
rest of the relay's reservations stay for the nodes behind NAT that were in the run before a flood began.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from swarmnode.swarm.relay import ip_of

logger = logging.getLogger(__name__)

KNOWN_ADDRESS_TTL = 3600.0  # seconds: p2pd's reservation lifetime; a known node that reconnects within it is known
FORGET_AFTER = 4.0  # a key not seen for this many `after`s starts over (a dead record's key ages again)


@dataclass
class KnownPeers:
    """First and last sight of each key's live record; keys seen for `after` seconds are known."""

    after: float
    always: frozenset[str] = frozenset()
    seen: dict[str, tuple[float, float]] = field(default_factory=dict)  # peer id -> (first, last)

    def observe(self, peer_ids: Iterable[str], now: float | None = None) -> None:
        """Record one read of the run's live records (the keys in it)."""
        now = time.monotonic() if now is None else now
        for peer in peer_ids:
            first, _ = self.seen.get(peer, (now, now))
            self.seen[peer] = (first, now)
        horizon = now - FORGET_AFTER * max(self.after, 60.0)
        for peer in [p for p, (_, last) in self.seen.items() if last < horizon]:
            del self.seen[peer]

    def known(self, now: float | None = None) -> set[str]:
        """The designated learners and every key whose record was seen at least `after` seconds ago."""
        now = time.monotonic() if now is None else now
        return set(self.always) | {p for p, (first, _) in self.seen.items() if now - first >= self.after}


@dataclass
class KnownAddresses:
    """Addresses known keys connected from, each remembered for `ttl` seconds after its last sight."""

    ttl: float = KNOWN_ADDRESS_TTL
    until: dict[str, float] = field(default_factory=dict)  # ip -> when it is forgotten

    def observe(
        self, connections: Iterable[tuple[str, list[str]]], known: set[str], now: float | None = None
    ) -> set[str]:
        """Note the direct connections (peer id, its remote multiaddrs) of `known` keys; the addresses known now."""
        now = time.monotonic() if now is None else now
        for peer, addrs in connections:
            if peer in known:
                for addr in addrs:
                    if "p2p-circuit" not in addr and (ip := ip_of(addr)) is not None:
                        self.until[ip] = now + self.ttl
        for ip in [ip for ip, until in self.until.items() if until < now]:
            del self.until[ip]
        return set(self.until)


READ_RECORDS = 2048  # records per read of the run (all of a run that size; a sample of shards beyond)
REFRESH = 15.0  # seconds between reads


async def keep_known(guard, dht, learner_keys: list[str], after: float, stop, every: float = REFRESH) -> None:
    """Until `stop` (an asyncio.Event) is set: read the run's live records and the bootstrap's connections every
    `every` seconds and give `guard` (a `RelayGuard`) the addresses known now. A failed read is retried later."""
    peers, addresses = KnownPeers(after, frozenset(learner_keys)), KnownAddresses()
    while not stop.is_set():
        try:
            shards = await dht.sample_shards(READ_RECORDS)
            peers.observe(r.peer_id for records in shards.values() for r in records)
            connections = [
                (info.peer_id.to_base58(), [str(a) for a in info.addrs]) for info in await dht.p2p.list_peers()
            ]
            guard.set_known(addresses.observe(connections, peers.known()))
        except Exception as exc:  # a slow DHT read under load: the known set stays as it was
            logger.debug("relay: known addresses not refreshed: %s", exc)
        try:
            await asyncio.wait_for(stop.wait(), every)
        except TimeoutError:
            pass
