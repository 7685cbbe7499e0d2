"""`swarmnode join --idle`: a node that only advertises its role (no model, no work): a network check."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from swarmnode.config import NodeConfig
from swarmnode.identity import Identity
from swarmnode.node.invite import card_software
from swarmnode.node.roles.base import ready_line
from swarmnode.observe.metrics import serve_metrics
from swarmnode.protocol.run_card import RunCard
from swarmnode.swarm.membership import Membership


async def run_idle(
    cfg: NodeConfig,
    identity: Identity,
    role: str,
    stop: asyncio.Event,
    emit: Callable[[str], None] = print,
    card: RunCard | None = None,
) -> None:
    """`swarmnode join` without role loops: join, advertise `role` (and the run `card` version it joined by, which
    it does not follow), idle until `stop` is set, leave."""
    async with Membership(cfg, identity, role) as member:
        if card is not None:
            member.update(software=card_software(member.fields.get("software", ""), card))
        if member.dht.reachability is not None:
            emit(member.dht.reachability.line())
        if cfg.metrics.port is not None:  # an idle node has only its uptime to report
            port = serve_metrics(
                cfg.metrics.port,
                lambda: {"uptime": round(time.monotonic() - member.started_at, 1), "reachability": member.reachability},
                role,
                cfg.metrics.addr,
            )
            emit(f"metrics: http://{cfg.metrics.addr}:{port}/metrics")
        emit(ready_line(identity, role, cfg.run_id, member))
        await stop.wait()
