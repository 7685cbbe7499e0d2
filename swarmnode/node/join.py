"""A Node: identity + DHT membership + the role it works in, with one lifecycle. What `swarmnode join` runs.

`run_node(cfg, identity, stop)` joins the run (`Membership`), decides the role (hardware, made swarm-aware: a
node able to train becomes a learner only while the run has fewer learners than `learner.max_learners`; a node
that raced another into the role steps back to sampler), constructs that role whole (`LearnerRole` or
`SamplerRole` in `swarmnode.node.roles`), serves /metrics if asked, runs it until `stop` is set, and leaves cleanly
(checkpoint, withdraw the peer record, stop p2pd). A role's model work runs on its own worker thread
(`ComputeThread`) so the event loop keeps serving the network.
"""

from __future__ import annotations

import asyncio

from swarmnode.config import NodeConfig
from swarmnode.export.run_info import write_run_info
from swarmnode.identity import Identity, node_data_dir
from swarmnode.node.hardware import decide_role, estimate_memory, probe_hardware
from swarmnode.node.invite import CardError, CardWatch
from swarmnode.node.roles.base import Emit, ready_line
from swarmnode.node.roles.learner_role import LearnerRole
from swarmnode.node.roles.sampler_role import SamplerRole
from swarmnode.node.running import RunningRole
from swarmnode.node.sapo.role import SapoRole
from swarmnode.observe.health import record_health
from swarmnode.observe.health_record import LearnerHealth
from swarmnode.observe.metrics import serve_metrics
from swarmnode.protocol.peer import PeerRecord
from swarmnode.protocol.reachability import CLIENT_ONLY, RELAYED, with_reachability
from swarmnode.protocol.run_card import RunCard
from swarmnode.swarm.membership import Membership
from swarmnode.swarm.p2p import SwarmStartError
from swarmnode.swarm.relay import relay_limit_warning

__all__ = ["decide_swarm_role", "node_data_dir", "run_node"]


def decide_swarm_role(cfg: NodeConfig, learners_in_run: int) -> tuple[str, list[str]]:
    """The hardware decision for `cfg`, given how many learners the run already has."""
    decision = decide_role(
        probe_hardware().for_devices(cfg.sampler.device, cfg.learner.device),
        estimate_memory(cfg),
        cfg.role,
        learners_in_run,
        cfg.learner.max_learners,
    )
    return decision.role, list(decision.reasons)


def keeps_learner_role(me: str, learners: list[PeerRecord], max_learners: int) -> bool:
    """Whether this node (`me`, just announced as learner) stays one. Learners that already passed this check
    carry an `uptime` in their health and come first; those still deciding are ranked by peer id, so two nodes
    racing into the role reach the same answer from the same records."""
    settled = [r.peer_id for r in learners if r.peer_id != me and "uptime" in (r.health or {})]
    deciding = sorted({r.peer_id for r in learners if r.peer_id not in settled} | {me})
    return len(settled) + deciding.index(me) < max_learners


def not_designated(cfg: NodeConfig, identity: Identity) -> bool:
    """An automatic node of a run that names its learners (`trust.learner_keys`) without this node's key: its
    weights would be trusted by no sampler, so it never takes the learner role by itself."""
    keys = cfg.trust.learner_keys
    return cfg.role == "auto" and bool(keys) and identity.peer_id not in keys


def refuse_unreachable_learner(cfg: NodeConfig, member: Membership, role: str, emit: Emit) -> str:
    """A learner must be dialled by the samplers: a node nobody can dial (no relay either) is refused the role
    when it was asked for (SwarmStartError with the advice), and an automatic one samples instead."""
    reach = member.dht.reachability if member.started else None
    if role != "learner" or cfg.mode == "sapo" or reach is None or reach.status != CLIENT_ONLY:
        return role
    if cfg.role == "learner":
        raise SwarmStartError(
            f"this node cannot be a learner: samplers can neither dial it nor reach it through a "
            f"relay ({reach.how}); {reach.advice()}, or join through a bootstrap that relays"
        )
    emit("role: samplers cannot dial this node (no relay either): it samples instead of learning")
    return "sampler"


async def _choose_role(cfg: NodeConfig, identity: Identity, member: Membership, emit: Emit) -> str:
    """Decide, announce, and (for an automatic learner) re-check the run after the announcement has spread."""
    if cfg.mode == "sapo":  # every node samples and trains its own policy (it advertises as a learner)
        role, reasons = "learner", ["mode sapo: this node samples and trains its own policy"]
    elif not_designated(cfg, identity):  # the run names its learners: any other automatic node samples
        role, reasons = await asyncio.to_thread(decide_swarm_role, cfg, cfg.learner.max_learners)
        reasons.append("not one of the run's designated learners (trust.learner_keys): it samples")
    else:
        learners = await member.dht.live_peers("learner")
        role, reasons = await asyncio.to_thread(decide_swarm_role, cfg, len(learners))
    for reason in reasons:
        emit(f"role: {reason}")
    if role == "none":
        return role
    role = refuse_unreachable_learner(cfg, member, role, emit)
    hardware = await asyncio.to_thread(
        lambda: probe_hardware().for_devices(cfg.sampler.device, cfg.learner.device).summary()
    )
    member.update(role=role, hardware=hardware)
    settled = role == "learner" and (cfg.role != "auto" or cfg.mode == "sapo")  # these never step back
    if settled:
        member.update(health=record_health(LearnerHealth(uptime=0.0)))
    await member.publish()
    if role != "learner" or settled:
        return role
    await asyncio.sleep(1.5 * cfg.network.heartbeat_interval)  # a racing node's record reaches the DHT meanwhile
    learners = await member.dht.live_peers("learner")
    if keeps_learner_role(identity.peer_id, learners, cfg.learner.max_learners):
        member.update(health=record_health(LearnerHealth(uptime=0.0)))  # settled: later deciders rank us first
        await member.publish()
        return role
    role, reasons = await asyncio.to_thread(decide_swarm_role, cfg, cfg.learner.max_learners)
    emit(
        f"role: {len(learners)} learners announced at once (max_learners {cfg.learner.max_learners}); "
        f"this node steps back to {role}"
    )
    for reason in reasons:
        emit(f"role: {reason}")
    member.update(role=role)
    await member.publish()
    return role


async def run_node(
    cfg: NodeConfig, identity: Identity, stop: asyncio.Event, emit: Emit = print, card: RunCard | None = None
) -> None:
    """`swarmnode join`: join the run, pick a role, construct it, run it until `stop`, leave cleanly. A node that
    joined by invite follows its run `card` (`swarmnode.node.invite.CardWatch`) and leaves when it cannot."""
    async with Membership(cfg, identity, "auto") as member:
        watch = CardWatch(cfg, card, member, emit) if card is not None else None
        if member.dht.reachability is not None:
            emit(member.dht.reachability.line())
        role = await _choose_role(cfg, identity, member, emit)
        if role == "none":
            emit("this node cannot run the configured model; leaving")
            return
        relay_check: asyncio.Future | None = None
        reach = member.dht.reachability
        if role == "learner" and reach is not None and reach.status == RELAYED and reach.relay:
            relay_check = asyncio.ensure_future(_check_relay(reach.relay, emit))  # beside the model's load
        try:
            await _run_role(cfg, identity, member, role, stop, emit, watch)
        finally:
            if relay_check is not None:
                relay_check.cancel()
                await asyncio.gather(relay_check, return_exceptions=True)


async def _run_role(
    cfg: NodeConfig,
    identity: Identity,
    member: Membership,
    role: str,
    stop: asyncio.Event,
    emit: Emit,
    watch: CardWatch | None,
) -> None:
    """Construct the role, serve /metrics if asked, say `ready` (the role can work now: `ready_line`), run it until
    `stop` (following the run card if `watch`)."""
    node: RunningRole
    if cfg.mode == "sapo":
        sapo = await asyncio.to_thread(SapoRole, cfg, identity, member, emit)
        await sapo.start()
        node = sapo
    else:
        runner = LearnerRole if role == "learner" else SamplerRole
        node = await runner.create(cfg, identity, member, emit)  # may build the tiny model: slow
    # what `swarmnode export <data dir>` reads: the config (and card) this node runs with
    write_run_info(node_data_dir(cfg, identity), cfg, watch.card if watch is not None else None)
    if cfg.metrics.port is not None:
        port = serve_metrics(cfg.metrics.port, lambda: _with_reachability(node.health, member), role, cfg.metrics.addr)
        emit(f"metrics: http://{cfg.metrics.addr}:{port}/metrics")
    emit(ready_line(identity, role, cfg.run_id, member))
    if watch is None:
        await node.run(stop)
        return
    watch.on_change = getattr(node, "follow_card", None)
    following = asyncio.create_task(watch.run(stop))
    try:
        await node.run(stop)
    finally:
        following.cancel()
    if watch.left is not None:
        raise CardError(watch.left)


async def _check_relay(relay: str, emit: Emit) -> None:
    """Say in one line when this relayed learner's relay cannot carry its versions (`relay_limit_warning`)."""
    if (line := await relay_limit_warning(relay)) is not None:
        emit(line)


def _with_reachability(health, member: Membership) -> dict:
    """A role's health (record or dict) as a dict with the node's reachability (for /metrics)."""
    values = health.as_dict() if hasattr(health, "as_dict") else dict(health or {})
    return with_reachability(values, member.reachability)
