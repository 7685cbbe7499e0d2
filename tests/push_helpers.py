"""Real p2pd daemons on loopback and a started rollout sender, shared by the rollout-push tests."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

from gossip_peer import RUN
from hivemind.p2p import P2P

from swarmnode.identity import Identity
from swarmnode.protocol.rollout import RolloutGroup
from swarmnode.swarm.rollout_push import RolloutSender


@contextlib.asynccontextmanager
async def daemons(n: int, identities: list[Identity] | None = None, tmp: Path | None = None):
    """`n` real p2pd daemons on loopback (optionally with given identities); always shut down."""
    kw = dict(host_maddrs=["/ip4/127.0.0.1/tcp/0"], nat_port_map=False, auto_nat=False, check_if_identity_free=False)
    peers: list[P2P] = []
    try:
        for i in range(n):
            extra = {}
            if identities:
                path = tmp / f"id{i}.key"
                path.write_bytes(identities[i].libp2p_key_bytes())
                extra["identity_path"] = str(path)
            if peers:
                extra["initial_peers"] = await peers[0].get_visible_maddrs()
            peers.append(await P2P.create(**kw, **extra))
        yield peers
    finally:
        for p in peers:
            with contextlib.suppress(Exception):
                await p.shutdown()


async def wait_for(cond, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)


async def pushing(sp: P2P, lp: P2P, groups: list[RolloutGroup], **options) -> RolloutSender:
    """A started sender on `sp` with `lp` as its one destination, every group of `groups` queued to it."""
    sender = RolloutSender(sp, RUN, **options)
    await sender.start()
    sender.set_destinations([lp.peer_id])
    for g in groups:
        sender.send(g)
    return sender
