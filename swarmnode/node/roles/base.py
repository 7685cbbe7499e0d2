"""What both working roles share: config, identity, membership, task, tokenizer, the node's data directory, the
weight store and its server, the one thread their model work runs on (`ComputeThread`: loading, steps, batches,
saving), and its typed health record (published to /metrics and, shrunk, on every heartbeat)."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from typing import Any, ClassVar

from swarmnode.compute_thread import ComputeThread
from swarmnode.config import NodeConfig
from swarmnode.delay import parse_delay
from swarmnode.diskspace import SpaceWatch
from swarmnode.identity import Identity, node_data_dir
from swarmnode.model.models import load_tokenizer
from swarmnode.observe.health import RateMeter, record_health
from swarmnode.observe.health_record import HolderHealth
from swarmnode.observe.self_record import SelfRecord
from swarmnode.swarm.membership import Membership
from swarmnode.swarm.weights import WeightServer, WeightStore
from swarmnode.tasks import build_task

Emit = Callable[[str], None]
PROGRESS_EVERY_S = 20.0  # a working node prints one progress line this often


def ready_line(identity: Identity, role: str, run_id: str, member: Membership) -> str:
    """The node's `ready` line, printed once it works: a learner with its model loaded (warm start included), its
    version published and its inbox open; a sampler with its engine loaded and a version to sample from; a SAPO
    node with its model loaded and its streams open; an idle node once announced. `join_s`: start to the first
    published record; `ready_s`: start to this line."""
    return (
        f"ready peer_id={identity.peer_id} role={role} run={run_id} join_s={member.ready_s or 0.0:.2f} "
        f"ready_s={time.monotonic() - member.started_at:.2f}"
    )


async def sleep_or_stop(stop: asyncio.Event, seconds: float) -> None:
    """Sleep `seconds`, or less if `stop` is set meanwhile."""
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        pass


class NodeRole:
    """The shared part of a role. Subclasses build the rest in `create` and work in `run`."""

    HEALTH: ClassVar[type[HolderHealth]] = HolderHealth

    def __init__(self, cfg: NodeConfig, identity: Identity, member: Membership, emit: Emit) -> None:
        """The slow, blocking part of construction (task file, tokenizer): call it in a worker thread."""
        self.cfg, self.identity, self.member, self.emit = cfg, identity, member, emit
        self.dht = member.dht
        self.p2p = member.dht.p2p
        self.data_dir = node_data_dir(cfg, identity)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.task = build_task(cfg.task)
        self.tokenizer = load_tokenizer(cfg.model, cfg.task)
        self.store = WeightStore(self.data_dir / "weights", cfg.run_id, keep_versions=cfg.learner.keep_versions)
        self.store.space = SpaceWatch(self.data_dir, emit)  # a full disk: one line, then on when space is back
        self.server: WeightServer  # serving the store's chunks to peers (started in `_construct`)
        self.started = time.monotonic()
        self.health = self.HEALTH()
        self.serve_rate = RateMeter()
        self.delay = parse_delay(cfg.sync.simulate_delay)
        self.delay_rng = random.Random()
        self.compute = ComputeThread(f"{type(self).__name__.removesuffix('Role').lower()}-compute")
        # what `swarmnode status --self` reads: <data_dir>/health.json, rewritten every few seconds
        self.self_record = SelfRecord(
            self.data_dir,
            peer_id=identity.peer_id,
            role=(self.HEALTH.ROLES or ("node",))[0],
            run_id=cfg.run_id,
            heartbeat=cfg.network.heartbeat_interval,
        )

    @classmethod
    async def _construct(cls, cfg: NodeConfig, identity: Identity, member: Membership, emit: Emit) -> Any:
        role = await asyncio.to_thread(cls, cfg, identity, member, emit)
        role.server = await WeightServer(role.store, trusted=role.slot_trusted).start(role.p2p)
        return role

    def slot_trusted(self, peer: str) -> bool:
        """Whether `peer` may hold a trusted peer's share of the weight server's streams: one of the run's
        designated learners (everyone, in an insecure run that names none)."""
        keys = self.cfg.trust.learner_keys
        return not keys or peer in keys

    def delay_for(self, what: str) -> float:
        """Seconds to hold back a `what` ('weights' or 'rollouts') delivery, per --simulate-delay."""
        if self.delay is None or self.cfg.sync.delay_target not in (what, "both"):
            return 0.0
        return self.delay.sample(self.delay_rng)

    def report_health(self, **fields: Any) -> None:
        """Update the health record (what /metrics renders; an unknown field raises) and advertise its small
        form on the next heartbeat."""
        served = self.server.served_bytes  # weight chunks this node served to peers
        self.health.update(
            **fields,
            uptime=round(time.monotonic() - self.started, 1),
            disk_full=self.store.space.short or "" if self.store.space else "",
            served_mb=round(served / 1e6, 1),
            serve_mb_s=round(self.serve_rate.update(served) / 1e6, 2),
        )
        self.member.update(health=self._health_record)  # built on the next beat, not at every step
        self._write_self_record()

    def _health_record(self) -> dict[str, Any]:
        self._write_self_record()  # on every beat too: a node waiting for work still shows it is alive
        return record_health(self.health)

    def _write_self_record(self) -> None:
        """`<data_dir>/health.json` (throttled): the health record and the work counter, groups acknowledged
        (sampler) or optimiser steps (learner)."""
        h = self.health
        sampler = hasattr(h, "groups_acked")
        self.self_record.update(
            h.as_dict(),
            sent=getattr(h, "groups_sent" if sampler else "groups_received", None),
            work=getattr(h, "groups_acked" if sampler else "step", None),
        )
