"""Being a member of a run's swarm: join the DHT, advertise a PeerRecord on a heartbeat, leave cleanly.

`Membership` is what a node wraps (its role loops call `update(...)` to advertise version/throughput/health);
with `client_mode` it is a read-only member (for `status` and the dashboard).
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import sys
import time
from typing import Any

from swarmnode import __version__
from swarmnode.config import NetworkConfig, NodeConfig
from swarmnode.errors import ExitCode
from swarmnode.identity import Identity
from swarmnode.protocol.peer import PeerRecord
from swarmnode.protocol.reachability import PUBLIC, with_reachability
from swarmnode.swarm.dht import SwarmDHT
from swarmnode.swarm.p2p import STOP_REQUESTED, IdentityLock, SwarmStartError, p2pd_alive, while_p2pd_alive
from swarmnode.swarm.recheck import ReachabilityWatch

logger = logging.getLogger(__name__)
UNSTORED_WARN = 3  # publishes in a row no DHT peer stored before a node that never stored one warns


def basic_hardware() -> dict[str, Any]:
    """A minimal hardware summary for nodes that were not given a probe result."""
    return {"cpus": os.cpu_count() or 1, "platform": sys.platform}


def network_part(net: NetworkConfig, role: str, client_mode: bool) -> dict[str, bool]:
    """How a member of `role` joins: whether it checks its reachability first (nodes, not bootstraps or read-only
    clients) and whether it relays for nodes that cannot be dialled (`network.relay_service`; by default the
    bootstraps)."""
    relay = net.relay_service if net.relay_service is not None else role == "bootstrap"
    return {"check_reachability": role != "bootstrap" and not client_mode, "relay_service": relay}


def unstored_is_news(role: str, stored_before: bool, unstored: int) -> bool:
    """Whether a peer record no DHT peer stored is worth a warning: when one of ours was stored before (peers were
    lost), or a node's stays unstored `UNSTORED_WARN` times in a row. Not at a node's first publish (its DHT
    neighbours may not be known yet), nor for a lone bootstrap (it has none)."""
    if stored_before:
        return True
    return unstored >= UNSTORED_WARN and role != "bootstrap"


class Membership:
    """This node's presence in the run: DHT + heartbeat-refreshed PeerRecord. Use `async with` or start/stop."""

    def __init__(
        self,
        cfg: NodeConfig,
        identity: Identity,
        role: str,
        *,
        hardware: dict[str, Any] | None = None,
        client_mode: bool = False,
    ):
        self.cfg, self.identity, self.role = cfg, identity, role
        self.client_mode = client_mode
        self.session = secrets.token_hex(8)  # tells this process's records from an earlier run's
        self.fields: dict[str, Any] = {"hardware": hardware or basic_hardware(), "software": f"swarmnode/{__version__}"}
        self._dht: SwarmDHT | None = None
        self.started_at = time.monotonic()
        self.ready_s: float | None = None  # seconds from start() to the first published record
        self._lock = IdentityLock(identity.peer_id)
        self._heartbeat: asyncio.Task | None = None
        self._watch: asyncio.Task | None = None  # rechecks reachability after join (`recheck`)
        self._addrs: list[str] = []
        self._published = False  # a record of ours was stored at least once
        self._unstored = 0  # publishes in a row no DHT peer stored
        if cfg.public_name and not client_mode:  # checked against the run's `names` policy before the node started
            self.fields["name"] = cfg.public_name

    async def start(self) -> Membership:
        """Join the DHT, refuse a duplicate identity, publish our record and start the heartbeat."""
        self.started_at = time.monotonic()
        self._lock.acquire()
        try:
            self._dht = await SwarmDHT.create(
                self.cfg,
                self.identity,
                client_mode=self.client_mode,
                **network_part(self.cfg.network, self.role, self.client_mode),
            )
            if str(self.dht.p2p.peer_id) != self.identity.peer_id:
                raise SwarmStartError(f"p2pd runs as {self.dht.p2p.peer_id}, not {self.identity.peer_id}")
            if not self.client_mode:
                self._addrs = [str(a) for a in await self.dht.p2p.get_visible_maddrs()][:8]
                await self._refuse_duplicate_identity()
                await self.publish()
                self._heartbeat = asyncio.create_task(self._beat())
                reach = self.dht.reachability
                if reach is not None and self.cfg.network.reachability == "auto":
                    self._watch = asyncio.create_task(ReachabilityWatch(self.dht.p2p, self.cfg.network, reach).run())
        except BaseException:
            await self._close()
            raise
        self.ready_s = time.monotonic() - self.started_at
        return self

    def update(self, **fields: Any) -> None:
        """Change advertised fields (version, versions, throughput, health, role...); sent on the next beat. A
        callable value is called when the record is built (a field that changes every step, computed once per
        beat)."""
        if "role" in fields:
            self.role = fields.pop("role")
        self.fields.update(fields)

    @property
    def dht(self) -> SwarmDHT:
        """The node's DHT (and its p2pd), from `start` until `stop`."""
        if self._dht is None:
            raise RuntimeError("the member has not started (or has stopped): no DHT")
        return self._dht

    @property
    def started(self) -> bool:
        """Whether the member is between `start` and `stop` (its DHT is up)."""
        return self._dht is not None

    @property
    def reachability(self) -> str | None:
        """This node's reachability as decided at join and rechecked since (a bootstrap is public; None: not
        checked)."""
        if self._dht is not None and self._dht.reachability is not None:
            return self._dht.reachability.status
        return PUBLIC if self.role == "bootstrap" else None

    def record(self, state: str = "up") -> PeerRecord:
        fields = {k: v() if callable(v) else v for k, v in self.fields.items()}
        fields["health"] = with_reachability(fields.get("health"), self.reachability)
        return PeerRecord.create(
            self.identity, role=self.role, session=self.session, state=state, addrs=self._addrs, **fields
        )

    async def publish(self, state: str = "up") -> bool:
        record = self.record(state)
        stored = await self.dht.store_peer(record)
        self._unstored = 0 if stored else self._unstored + 1
        if not stored:
            news = unstored_is_news(self.role, self._published, self._unstored) and state == "up"
            (logger.warning if news and not STOP_REQUESTED.is_set() else logger.debug)(  # leaving: no news
                "peer record was not stored by any DHT peer (will retry on the next heartbeat)"
            )
        self._published = self._published or stored
        await self._store_learner(record)
        return stored

    async def _store_learner(self, record: PeerRecord) -> None:
        """A learner's record under its own key as well: samplers and `status` read the designated learners
        there, where a flood of throwaway records under the shared peers key cannot hide them."""
        if record.role == "learner":
            await self.dht.store_learner(record)

    async def designated_learners(self) -> list[PeerRecord]:
        """The live records of `trust.learner_keys`, each from its own key (empty when none are named)."""
        return await self.dht.designated_learners(list(self.cfg.trust.learner_keys))

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.network.heartbeat_interval)
            try:
                await self.publish()
                await self.dht.refresh_announcement()
            except Exception as exc:  # a transient DHT failure must not end the node
                logger.warning("heartbeat failed: %s", exc)

    async def _refuse_duplicate_identity(self) -> None:
        """If another live process elsewhere heartbeats with our peer id, refuse to start.

        A record with our id from another session may be the leftover of our own crashed run: wait up to
        1.5 heartbeats; a live twin refreshes it meanwhile, a dead one does not.
        """
        me = self.identity.peer_id

        async def current() -> PeerRecord | None:
            return await self.dht.own_record()  # its shard alone

        seen = await current()
        if seen is None or seen.state != "up" or seen.session == self.session:
            return
        interval = self.cfg.network.heartbeat_interval
        logger.info("found a live-looking record for our peer id; checking for a twin for %.1f s", 1.5 * interval)
        deadline = time.monotonic() + 1.5 * interval
        while time.monotonic() < deadline:
            await asyncio.sleep(min(1.0, interval / 4))
            now = await current()
            if now is not None and now.session == seen.session and now.timestamp > seen.timestamp:
                raise SwarmStartError(
                    f"identity {me} is already used by another live node in run {self.cfg.run_id!r} "
                    f"(its last heartbeat was {now.age():.1f} s ago); give each node its own --identity-path",
                    exit_code=ExitCode.IN_USE,
                )

    async def stop(self) -> None:
        """Mark our record as leaving (peers drop us at once), leave the DHT, stop p2pd."""
        for task in (self._heartbeat, self._watch):
            if task is not None:
                task.cancel()
        if self._dht is not None and not self.client_mode and p2pd_alive(self._dht.p2p):
            try:
                await while_p2pd_alive(self.dht.p2p, self.publish("leaving"), timeout=5)
            except Exception as exc:
                logger.info("could not withdraw the peer record (%s); it expires on its own", exc)
        await self._close()

    async def _close(self) -> None:
        try:
            if self._dht is not None:
                await self._dht.shutdown()
                self._dht = None
        finally:
            self._lock.release()

    async def __aenter__(self) -> Membership:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
