"""Being a member of a run's swarm: join the DHT, advertise a PeerRecord on a heartbeat, leave cleanly.

`Membership` is what a Node wraps (the role loops call `update(...)` to advertise version/throughput/health);
`run_membership` is `swarmnode join` until the role loops exist; `run_bootstrap` is `swarmnode bootstrap`;
`query_status` is `swarmnode status`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import sys
import time
from collections import Counter
from typing import Any, Callable

from swarmnode import __version__
from swarmnode.config import NodeConfig
from swarmnode.identity import Identity
from swarmnode.protocol.peer import PeerRecord
from swarmnode.swarm.dht import SwarmDHT
from swarmnode.swarm.p2p import IdentityLock, SwarmStartError

logger = logging.getLogger(__name__)

STATUS_SCHEMA_VERSION = 1
Emit = Callable[[str], None]


def basic_hardware() -> dict[str, Any]:
    """A minimal hardware summary for nodes that were not given a probe result."""
    return {"cpus": os.cpu_count() or 1, "platform": sys.platform}


class Membership:
    """This node's presence in the run: DHT + heartbeat-refreshed PeerRecord. Use `async with` or start/stop."""

    def __init__(self, cfg: NodeConfig, identity: Identity, role: str, *, hardware: dict[str, Any] | None = None,
                 client_mode: bool = False):
        self.cfg, self.identity, self.role = cfg, identity, role
        self.client_mode = client_mode
        self.session = secrets.token_hex(8)  # tells this process's records from an earlier run's
        self.fields: dict[str, Any] = {"hardware": hardware or basic_hardware(), "software": f"swarmnode/{__version__}"}
        self.dht: SwarmDHT | None = None
        self.started_at = time.monotonic()
        self.ready_s: float | None = None  # seconds from start() to the first published record
        self._lock = IdentityLock(identity.peer_id)
        self._heartbeat: asyncio.Task | None = None
        self._addrs: list[str] = []

    async def start(self) -> "Membership":
        """Join the DHT, refuse a duplicate identity, publish our record and start the heartbeat."""
        self.started_at = time.monotonic()
        self._lock.acquire()
        try:
            self.dht = await SwarmDHT.create(self.cfg, self.identity, client_mode=self.client_mode)
            if str(self.dht.p2p.peer_id) != self.identity.peer_id:
                raise SwarmStartError(f"p2pd runs as {self.dht.p2p.peer_id}, not {self.identity.peer_id}")
            if not self.client_mode:
                self._addrs = [str(a) for a in await self.dht.p2p.get_visible_maddrs()][:8]
                await self._refuse_duplicate_identity()
                await self.publish()
                self._heartbeat = asyncio.create_task(self._beat())
        except BaseException:
            await self._close()
            raise
        self.ready_s = time.monotonic() - self.started_at
        return self

    def update(self, **fields: Any) -> None:
        """Change advertised fields (version, versions, throughput, health, role...); sent on the next beat."""
        if "role" in fields:
            self.role = fields.pop("role")
        self.fields.update(fields)

    def record(self, state: str = "up") -> PeerRecord:
        return PeerRecord.create(self.identity, role=self.role, session=self.session, state=state,
                                 addrs=self._addrs, **self.fields)

    async def publish(self, state: str = "up") -> bool:
        stored = await self.dht.publish_peer(self.record(state))
        if not stored:
            logger.warning("peer record was not stored by any DHT peer (will retry on the next heartbeat)")
        return stored

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
            return next((r for r in await self.dht.all_peers() if r.peer_id == me), None)

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
                    f"(its last heartbeat was {now.age():.1f} s ago); give each node its own --identity-path"
                )

    async def stop(self) -> None:
        """Mark our record as leaving (peers drop us at once), leave the DHT, stop p2pd."""
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        if self.dht is not None and not self.client_mode:
            try:
                await asyncio.wait_for(self.publish("leaving"), timeout=5)
            except Exception as exc:
                logger.info("could not withdraw the peer record (%s); it expires on its own", exc)
        await self._close()

    async def _close(self) -> None:
        try:
            if self.dht is not None:
                await self.dht.shutdown()
                self.dht = None
        finally:
            self._lock.release()

    async def __aenter__(self) -> "Membership":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


async def run_membership(cfg: NodeConfig, identity: Identity, role: str, stop: asyncio.Event,
                         emit: Emit = print) -> None:
    """`swarmnode join` without role loops: join, advertise `role`, idle until `stop` is set, leave."""
    async with Membership(cfg, identity, role) as member:
        if cfg.metrics.port is not None:  # an idle node has only its uptime to report
            from swarmnode.metrics import serve_metrics

            port = serve_metrics(cfg.metrics.port, lambda: {"uptime": round(time.monotonic() - member.started_at, 1)},
                                 role, cfg.metrics.addr)
            emit(f"metrics: http://{cfg.metrics.addr}:{port}/metrics")
        emit(f"ready peer_id={identity.peer_id} role={role} run={cfg.run_id} join_s={member.ready_s:.2f}")
        await stop.wait()


def share_addresses(maddrs: list[str], announce: list[str]) -> list[str]:
    """Addresses to print for `--initial-peers`: announced first, then public/LAN, loopback last."""
    def rank(addr: str) -> int:
        if any(addr.startswith(a) for a in announce):
            return 0
        return 2 if addr.startswith(("/ip4/127.", "/ip6/::1")) else 1
    return sorted(dict.fromkeys(maddrs), key=rank)


def health(member: Membership, live: list[PeerRecord], connections: int) -> dict[str, Any]:
    """The bootstrap's health document (one JSON line per log interval with --json)."""
    return {
        "event": "health",
        "peer_id": member.identity.peer_id,
        "run_id": member.cfg.run_id,
        "uptime_s": round(time.monotonic() - member.started_at, 1),
        "connections": connections,
        "live_peers": len(live),
        "roles": dict(Counter(r.role for r in live)),
        "rejected_records": member.dht.validator.rejected if member.dht else 0,
    }


async def run_bootstrap(cfg: NodeConfig, identity: Identity, stop: asyncio.Event, *, as_json: bool,
                        log_interval: float, emit: Emit = print) -> None:
    """`swarmnode bootstrap`: a long-lived DHT peer that prints its addresses and logs the peers it sees."""
    import json

    async with Membership(cfg, identity, "bootstrap") as member:
        addrs = share_addresses([str(a) for a in await member.dht.p2p.get_visible_maddrs(latest=True)],
                                cfg.network.announce_maddrs)
        for addr in addrs:
            emit(f"initial-peers: {addr}")
        own: dict[str, Any] = {"uptime": 0.0, "peers_seen": 0}  # what its record and /metrics carry
        member.update(health=own)
        if cfg.metrics.port is not None:
            from swarmnode.metrics import serve_metrics

            port = serve_metrics(cfg.metrics.port, lambda: own, "bootstrap", cfg.metrics.addr)
            emit(f"metrics: http://{cfg.metrics.addr}:{port}/metrics")
        emit(f"ready peer_id={identity.peer_id} run={cfg.run_id}")
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), timeout=log_interval)
                break
            except asyncio.TimeoutError:
                pass
            try:
                live = await member.dht.live_peers()
                connections = len(await member.dht.p2p.list_peers())
            except Exception as exc:
                logger.warning("health query failed: %s", exc)
                continue
            doc = health(member, live, connections)
            own.update(uptime=doc["uptime_s"], peers_seen=doc["live_peers"])
            member.update(health=dict(own))
            if as_json:
                emit(json.dumps(doc, sort_keys=True))
            else:
                roles = ", ".join(f"{k} {v}" for k, v in sorted(doc["roles"].items())) or "none"
                emit(f"peers seen: {doc['live_peers']} ({roles}); connections {connections}; "
                     f"uptime {doc['uptime_s']:.0f} s")


def client_member(cfg: NodeConfig) -> Membership:
    """A read-only client-mode member with a throwaway key (for `status` and the dashboard)."""
    return Membership(cfg, Identity.generate(), "client", client_mode=True)


def status_document(cfg: NodeConfig, live: list[PeerRecord], now: float | None = None) -> dict[str, Any]:
    """The `status --json` document (schema in `swarmnode.status_schema`) from the run's live peer records."""
    from swarmnode.health import find_alerts, peer_lag, staleness_bound, swarm_summary

    now = time.time() if now is None else now
    peers = [r.summary(now) for r in live]
    summary = swarm_summary(peers)
    for p in peers:
        p["lag"] = peer_lag(p, summary["newest_version"])
    return {
        "schema_version": STATUS_SCHEMA_VERSION,
        "run_id": cfg.run_id,
        "queried_at": now,
        "count": len(live),
        "roles": dict(Counter(r.role for r in live)),
        **summary,
        "max_staleness": staleness_bound(peers, cfg.sync.max_staleness),
        "peers": peers,
        "alerts": find_alerts(peers, cfg.sync.max_staleness),
    }


async def read_status(member: Membership) -> dict[str, Any]:
    """One read of the run's live peer records through a started client member: the status document."""
    return status_document(member.cfg, await member.dht.live_peers())


async def query_status(cfg: NodeConfig) -> dict[str, Any]:
    """Join as a client with a throwaway key, read the run's live peer records, leave; the status document."""
    member = await client_member(cfg).start()
    try:
        return await read_status(member)
    finally:
        await member.stop()


def format_status(doc: dict[str, Any]) -> str:
    """A plain table of the status document, then its alerts."""
    lines = [f"run {doc['run_id']}: {doc['count']} live peers, newest version {doc['newest_version']}, "
             f"{doc['tokens_per_s']:.0f} tokens/s"]
    lines.append(f"{'peer id':<54} {'role':<10} {'version':>7} {'lag':>4} {'last seen':>10}")
    for p in doc["peers"]:
        version = "-" if p["version"] < 0 else str(p["version"])
        lag = "-" if p.get("lag") is None else str(p["lag"])
        lines.append(f"{p['peer_id']:<54} {p['role']:<10} {version:>7} {lag:>4} {p['age_s']:>8.1f} s")
    lines += [f"{a['severity']}: {a['message']}" for a in doc["alerts"]]
    return "\n".join(lines)


def identity_for(cfg: NodeConfig, default_name: str) -> Identity:
    """The node's persistent identity: `network.identity_path`, else `<data dir>/<default_name>`."""
    path = cfg.network.identity_path or cfg.resolved_data_dir() / default_name
    return Identity.load_or_create(path)


def run_until_signal(main: Callable[[asyncio.Event], Any], timeout: float | None = None) -> Any:
    """Run `main(stop)` in a fresh event loop; SIGTERM/SIGINT set `stop` so `main` can leave cleanly."""
    import signal

    async def runner() -> Any:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        if timeout is None:
            return await main(stop)
        try:
            return await asyncio.wait_for(main(stop), timeout)
        except asyncio.TimeoutError:
            raise SwarmStartError(f"no answer from the swarm within {timeout:.0f} s") from None

    return asyncio.run(runner())


def quiet_hivemind(verbose: bool = False) -> None:
    """Send our logs to stderr; keep hivemind's per-RPC chatter (unreachable peers etc.) out of the way."""
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("swarmnode").setLevel(logging.INFO)
    logging.getLogger("hivemind").setLevel(logging.DEBUG if verbose else logging.CRITICAL)
