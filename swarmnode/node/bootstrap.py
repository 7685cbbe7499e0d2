"""`swarmnode bootstrap`: a long-lived DHT peer that prints its addresses and logs the peers it sees."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from swarmnode.config import NetworkConfig, NodeConfig, known_run_ids
from swarmnode.identity import Identity
from swarmnode.node.card_server import serve_card
from swarmnode.observe.health import record_health
from swarmnode.observe.health_record import BootstrapHealth
from swarmnode.observe.metrics import serve_metrics
from swarmnode.observe.status_census import census_fields, read_census
from swarmnode.protocol.reachability import PUBLIC
from swarmnode.swarm.membership import Membership
from swarmnode.swarm.relay import relays_here
from swarmnode.swarm.relay_guard import RelayGuard
from swarmnode.swarm.relay_known import keep_known
from swarmnode.swarm.run_name import serve_run_name

logger = logging.getLogger(__name__)


UNROUTED = ("/ip4/192.0.2.", "/ip4/198.51.100.", "/ip4/203.0.113.", "/ip4/169.254.", "/ip6/fe80:")  # docs, link-local


def share_addresses(maddrs: list[str], announce: list[str]) -> list[str]:
    """Addresses to print for `--initial-peers`: announced first, then public/LAN, loopback, and last those no
    other machine routes to (documentation ranges, link-local)."""

    def rank(addr: str) -> int:
        if any(addr.startswith(a) for a in announce):
            return 0
        if addr.startswith(UNROUTED):
            return 3
        return 2 if addr.startswith(("/ip4/127.", "/ip6/::1")) else 1

    return sorted(dict.fromkeys(maddrs), key=rank)


def bootstrap_health(member: Membership, counts: dict[str, Any], connections: int) -> dict[str, Any]:
    """The bootstrap's health document (one JSON line per log interval with --json); `counts`: the run's live
    peers by role and reachability (`status_census.census_fields`: exact in a run of up to ~2,000 records, else
    estimated from a sample of the shards)."""
    return {
        "event": "health",
        "peer_id": member.identity.peer_id,
        "run_id": member.cfg.run_id,
        "uptime_s": round(time.monotonic() - member.started_at, 1),
        "connections": connections,
        "live_peers": counts["count"],
        "roles": counts["roles"],
        "reachability": counts["reachability"],
        "rejected_records": member.dht.validator.rejected if member.started else 0,
        "other_runs": member.dht.validator.runs_seen(known_run_ids()) if member.started else {},
    }


async def run_bootstrap(
    cfg: NodeConfig,
    identity: Identity,
    stop: asyncio.Event,
    *,
    as_json: bool,
    log_interval: float,
    emit: Callable[[str], None] = print,
    card: Path | None = None,
) -> None:
    """`swarmnode bootstrap`: a long-lived DHT peer that prints its addresses and logs the peers it sees (and
    keeps the run's `card` file in the DHT: `swarmnode host`)."""
    async with Membership(cfg, identity, "bootstrap") as member:
        await serve_run_name(member.dht.p2p, cfg.run_id)  # `status` without the run id asks
        if card is not None:
            asyncio.create_task(serve_card(member, card, stop))
        visible = [str(a) for a in await member.dht.p2p.get_visible_maddrs(latest=True)]
        net = cfg.network
        guard = RelayGuard.install(net, listening(net, visible)) if relays_here(net, visible) else RelayGuard()
        known = (
            asyncio.create_task(
                keep_known(guard, member.dht, cfg.trust.learner_keys, cfg.network.relay_known_after_s, stop)
            )
            if guard.strangers
            else None
        )
        try:
            await _serve(cfg, identity, member, visible, stop, as_json=as_json, log_interval=log_interval, emit=emit)
        finally:
            if known is not None:
                known.cancel()
            guard.remove()


def listening(net: NetworkConfig, visible: list[str]) -> list[str]:
    """The bootstrap's listening addresses: its fixed `host_maddrs`, and its visible ones not announced."""
    fixed = [a for a in net.host_maddrs if not a.rstrip("/").endswith("/0")]
    return fixed + [a for a in visible if not any(a.startswith(x) for x in net.announce_maddrs)]


async def _serve(
    cfg: NodeConfig,
    identity: Identity,
    member: Membership,
    visible: list[str],
    stop: asyncio.Event,
    *,
    as_json: bool,
    log_interval: float,
    emit: Callable[[str], None],
) -> None:
    """Print the addresses and `ready`, then log the peers seen until `stop`."""
    addrs = share_addresses(visible, cfg.network.announce_maddrs)
    for addr in addrs:
        emit(f"initial-peers: {addr}")
    own = BootstrapHealth(uptime=0.0, peers_seen=0, reachability=PUBLIC)  # what its record and /metrics carry
    member.update(health=record_health(own))
    if cfg.metrics.port is not None:
        port = serve_metrics(cfg.metrics.port, lambda: own, "bootstrap", cfg.metrics.addr)
        emit(f"metrics: http://{cfg.metrics.addr}:{port}/metrics")
    emit(f"ready peer_id={identity.peer_id} run={cfg.run_id}")
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), timeout=log_interval)
            break
        except TimeoutError:
            pass
        try:
            census = await read_census(member.dht)  # a bounded read, whatever the run's size
            counts = census_fields(census, [r for r in census.records if r.role == "learner"])
            connections = len(await member.dht.p2p.list_peers())
        except Exception as exc:
            logger.warning("health query failed: %s", exc)
            continue
        doc = bootstrap_health(member, counts, connections)
        own.update(uptime=doc["uptime_s"], peers_seen=doc["live_peers"], peers_by_reachability=doc["reachability"])
        member.update(health=record_health(own))
        if as_json:
            emit(json.dumps(doc, sort_keys=True))
        else:
            roles = ", ".join(f"{k} {v}" for k, v in sorted(doc["roles"].items())) or "none"
            others = ", ".join(f"{run} {n}" for run, n in sorted(doc["other_runs"].items()))
            reach = ", ".join(f"{k} {v}" for k, v in sorted(doc["reachability"].items()) if k != PUBLIC)
            emit(
                f"peers seen: {doc['live_peers']} ({roles}{'; ' + reach if reach else ''}); "
                f"connections {connections}; "
                f"uptime {doc['uptime_s']:.0f} s"
                + (
                    f"; records of other runs refused: {others} (this bootstrap serves run {cfg.run_id})"
                    if others
                    else ""
                )
            )
