"""SapoRole: a node's run loop in `mode: sapo` (the network wiring of `SapoPolicy`).

Every node samples and trains its own policy; nobody fetches weights. Each round it generates its I local groups,
sends them as signed text to every live peer of the run over hivemind P2P streams (the rollout gossip's
machinery on its own stream name, `swarmnode/<run>/text-rollouts/1`: acks, retries, per-peer rate limits,
strikes and bans, dedup), waits up to `sapo.external_wait` seconds for J external groups, and takes one step
on I local + up to J external groups. A node that nobody can dial (client-only) gets no pushes: it pulls its
peers' text over its own connections instead (`sapo.pull`), for as long as its reachability says so. It
advertises itself as a learner (it trains) with `mode: sapo` in its health record (`SapoHealth`), plus its own
reward, the groups it trained on by origin (external ones per peer), the reward lies it caught and the groups its
plausibility check refused (per peer, with the floor); `/metrics` and `status --json` show the same fields, and the
trackers `metrics.report_to` names get each step's figures (`swarmnode.trackers.names`: TRL's names and `sapo/...`).
Every `learner.eval_every` versions it scores the task's held-out split as a learner does (`HeldOutEval`, beside
training): the figures go to its steps file, the trackers and its health record. Its checkpoints, steps file and dedup journal live in its own directory (`identity.node_data_dir`: `<run>/<peer id>`
unless `data_dir`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import torch
from hivemind.p2p import PeerID

from swarmnode.compute_thread import ComputeThread
from swarmnode.config import NodeConfig
from swarmnode.identity import Identity, node_data_dir
from swarmnode.node.held_out import HeldOutEval
from swarmnode.node.running import RunningRole
from swarmnode.node.sapo.policy import SapoPolicy
from swarmnode.node.sapo.pull import TextPuller
from swarmnode.observe.health import MAX_INVALID_PEERS, record_health
from swarmnode.observe.health_record import SapoHealth
from swarmnode.protocol.reachability import CLIENT_ONLY, dialable
from swarmnode.protocol.text_rollout import TextRolloutGroup, TextRolloutLimits
from swarmnode.swarm.membership import Membership
from swarmnode.swarm.rollout_push import RolloutReceiver, RolloutSender
from swarmnode.trackers import open_trackers
from swarmnode.trackers.names import StepMetrics

logger = logging.getLogger(__name__)
STREAM = "text-rollouts"
STEPS_FILE = "sapo_steps.jsonl"
TOP_PEERS = 8  # external senders listed in the health record (most groups first)
HEALTH_FIELDS = frozenset(f.name for f in dataclasses.fields(SapoHealth))  # a step record's other keys stay local


PROGRESS_EVERY_S = 20.0  # a working node prints one progress line this often (as the other roles do)


class SapoProgress:
    """A SAPO node's progress line every `PROGRESS_EVERY_S` (step, own reward, external groups, steps/s) and its
    summary when it stops."""

    def __init__(self, emit: Callable[[str], None]) -> None:
        self.emit = emit
        self.started = self.since = time.monotonic()
        self.rewards: list[float] = []
        self.last: dict | None = None
        self.first_reward: float | None = None

    def step(self, record: dict) -> None:
        self.last = record
        if record.get("own_reward") is not None:
            self.rewards.append(float(record["own_reward"]))
            self.first_reward = self.rewards[0] if self.first_reward is None else self.first_reward
        elapsed = time.monotonic() - self.since
        if elapsed < PROGRESS_EVERY_S:
            return
        reward = f"{sum(self.rewards) / len(self.rewards):.3f}" if self.rewards else "-"
        self.emit(
            f"sapo: step {record['step']}, own reward {reward}, {record['step_external_groups']} external "
            f"groups in the step ({record['external_groups']} in all), {record['groups_received']} received, "
            f"{record['groups_sent']} sent, {len(self.rewards) / elapsed:.2f} steps/s"
        )
        self.since, self.rewards = time.monotonic(), []

    def summary(self) -> None:
        if self.last is None:
            self.emit("sapo: stopped before its first training step")
            return
        self.emit(
            f"sapo: stopped after {self.last['step']} steps in {time.monotonic() - self.started:.0f} s; "
            f"{self.last['local_groups']} own and {self.last['external_groups']} external groups trained; "
            f"own reward first {_num(self.first_reward)}, last {_num(self.last.get('own_reward'))}"
        )


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


class SapoRole(RunningRole):
    """Generate, share as text, train on I local + J external groups; see the module docstring."""

    def __init__(self, cfg: NodeConfig, identity: Identity, member: Membership, emit: Callable[[str], None]):
        self.cfg, self.identity, self.member, self.emit = cfg, identity, member, emit
        self.p2p = member.dht.p2p
        self.data_dir = node_data_dir(cfg, identity)  # its own: two nodes on one machine share nothing
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.started = time.monotonic()
        self.health = SapoHealth(mode="sapo")
        # each node its own prompt order and sampling randomness: with one config and one seed every node of a run
        # would draw the same prompts and (same model, same torch seed) the very same completions
        seed = int.from_bytes(hashlib.sha256(f"{cfg.task.seed}:{identity.peer_id}".encode()).digest()[:4], "big")
        torch.manual_seed(seed)
        self.policy = SapoPolicy(cfg, identity, seed=seed, checkpoint_dir=self.data_dir / "checkpoints")
        self.compute = ComputeThread("sapo-compute")  # generation, steps and saving, all on one thread
        self.peers: list[PeerID] = []  # the run's other nodes that can be dialled
        self.trackers = open_trackers(cfg, self.data_dir, "sapo", identity.peer_id, emit)
        self.tracked = StepMetrics("sapo", cfg.sampler.num_generations, cfg.metrics.logging_steps)

    async def start(self) -> None:
        """Open the text streams (receive, send) and find the run's peers: after this the node works."""
        cfg, policy = self.cfg, self.policy
        limits = TextRolloutLimits.from_config(cfg)
        self.arrived = arrived = asyncio.Event()

        def admit(group: TextRolloutGroup) -> str:
            status = policy.receive(group)
            self.puller.saw(group.sampler_id, group.created_at)
            arrived.set()
            return status

        self.receiver = RolloutReceiver(
            cfg.run_id,
            admit,
            limits,
            stream=STREAM,
            decode=lambda body: TextRolloutGroup.decode(body, limits),
            journal=self.data_dir / "seen_text_groups",
        )
        self.puller = TextPuller(
            self.p2p, self.receiver, limit=cfg.sapo.pool_per_peer, max_age=cfg.sapo.max_external_age
        )
        await self.receiver.start(self.p2p)
        self.sender = RolloutSender(self.p2p, cfg.run_id, stream=STREAM, window=cfg.network.push_window)
        await self.sender.start()
        await self._refresh_peers()
        self.emit(
            f"sapo node ready: I={cfg.sapo.local_groups} local + J={cfg.sapo.external_groups} external "
            f"groups per step, external weighting {cfg.sapo.external_weighting}, model {policy.model_id}"
        )
        self.held_out = HeldOutEval(
            policy.learner, policy.task, policy.tokenizer, cfg, self.emit, lambda fields: self._publish(**fields)
        )
        self._publish(step=policy.learner.step_count)

    async def run(self, stop: asyncio.Event) -> None:
        """Generate, share, wait for external groups and train, until `stop` (after `start`)."""
        cfg, policy, arrived = self.cfg, self.policy, self.arrived
        refresher = asyncio.create_task(self._refresher(stop))
        pulling = asyncio.create_task(self.puller.run(self._pull_from, stop))
        if self.member.reachability == CLIENT_ONLY:
            self.emit(
                f"sapo: peers cannot dial this node; it pulls their text every {self.puller.every:.0f} s "
                "over its own connections"
            )
        steps_file = (self.data_dir / STEPS_FILE).open("a")
        progress = SapoProgress(self.emit)
        try:
            await self.held_out.maybe_start(self.compute)  # the version it starts with: the baseline
            while not stop.is_set():
                began = time.monotonic()
                for group in await self.compute.run(policy.generate):
                    self.sender.send(group)
                await self._wait_for_external(stop, arrived)
                diag = await self.compute.run(policy.train_step)
                if diag is not None and diag.get("trained"):
                    record = self._step_record(diag, time.monotonic() - began) | self.held_out.take()
                    steps_file.write(json.dumps(record) + "\n")
                    steps_file.flush()
                    if self.trackers is not None and (report := self.tracked.step(record)):
                        self.trackers.report(report, record["step"])
                    self._publish(**{k: v for k, v in record.items() if not isinstance(v, (dict, list))})
                    progress.step(record)
                    await self.held_out.maybe_start(self.compute)
                if cfg.sampler.max_groups_per_second and cfg.sapo.local_groups:
                    floor = cfg.sapo.local_groups / cfg.sampler.max_groups_per_second
                    await _sleep_or_stop(stop, floor - (time.monotonic() - began))
        finally:
            refresher.cancel()
            pulling.cancel()
            steps_file.close()
            await self.held_out.close()
            if self.trackers is not None:
                await asyncio.to_thread(self.trackers.close)
            progress.summary()
            await self.compute.run(policy.learner.save)
            self.compute.close()
            await self.sender.close(flush_timeout=2.0)
            self.receiver.close()

    async def _wait_for_external(self, stop: asyncio.Event, arrived: asyncio.Event) -> None:
        """Give peers' groups up to `sapo.external_wait` seconds to make up J (nobody waits longer)."""
        deadline = time.monotonic() + self.cfg.sapo.external_wait
        while (
            len(self.policy.pool) < self.cfg.sapo.external_groups
            and not stop.is_set()
            and (left := deadline - time.monotonic()) > 0
        ):
            arrived.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(arrived.wait(), left)

    async def _refresh_peers(self) -> None:
        """Every live peer of the run but this node gets our text."""
        peers = await self.member.dht.live_peers("learner")  # sapo nodes advertise as learners
        self.peers = [
            PeerID.from_base58(p.peer_id) for p in peers if p.peer_id != self.identity.peer_id and dialable(p)
        ]
        self.sender.set_destinations(self.peers)

    def _pull_from(self) -> list[PeerID]:
        """The peers to pull text from now: all dialable ones while nobody can dial this node, else none (they
        push)."""
        return self.peers if self.member.reachability == CLIENT_ONLY else []

    async def _refresher(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await _sleep_or_stop(stop, self.cfg.network.heartbeat_interval)
            try:
                await self._refresh_peers()
            except Exception as exc:  # a DHT hiccup must not end the node
                logger.warning("listing peers failed: %s", exc)

    def _step_record(self, diag: dict, step_time: float) -> dict:
        """One line of the steps file: the step's diagnostics plus the node's SAPO counters."""
        counts = self.policy.counters()
        top = sorted(counts["external_by_peer"].items(), key=lambda kv: -kv[1])[:TOP_PEERS]
        return {
            **{k: (round(v, 6) if isinstance(v, float) else v) for k, v in diag.items()},
            "step": self.policy.learner.step_count,
            "version": self.policy.learner.version,
            "own_reward": diag.get("own_reward"),
            "step_external_groups": int(diag.get("external_groups", 0)),
            "clip_frac": round(float(diag.get("clip_fraction", 0.0)), 6),
            "step_time": round(step_time, 4),
            "local_groups": counts["local_groups_trained"],
            "external_groups": counts["external_groups_trained"],
            "external_peers": [peer for peer, _ in top],
            "external_counts": [n for _, n in top],
            "reward_lies": sum(counts["reward_lies"].values()),
            "implausible_by_peer": counts["implausible_by_peer"],
            "plausibility_floor": counts["plausibility_floor"],
            "distrusted": counts["distrusted"],
            "pool": counts["pool"],
            "refused": counts["rejected"],
            "groups_received": self.receiver.accepted,
            "groups_sent": self.sender.delivered,
            "time": round(time.time(), 3),
        }

    def _publish(self, **fields: Any) -> None:
        """Update the typed health record (what /metrics renders) with the fields it declares, and advertise its
        small form on the next heartbeat."""
        counts = self.policy.counters()
        top = sorted(counts["external_by_peer"].items(), key=lambda kv: -kv[1])[:TOP_PEERS]
        rejected = {k: v for k, v in self.receiver.statuses.items() if k not in ("ok", "duplicate") and v}
        for reason, count in [*counts["rejected"].items(), ("pool_overflow", counts["pool"].get("overflow", 0))]:
            if count:
                rejected[reason] = rejected.get(reason, 0) + int(count)
        values = {k: v for k, v in fields.items() if k in HEALTH_FIELDS}
        implausible = sorted(counts["implausible_by_peer"].items(), key=lambda kv: -kv[1])[:TOP_PEERS]
        if counts["plausibility_floor"] is not None:
            values["plausibility_floor"] = round(counts["plausibility_floor"], 4)
        values.update(
            implausible_groups=sum(counts["implausible_by_peer"].values()),
            distrusted_peers=[peer[-12:] for peer in counts["distrusted"][:TOP_PEERS]],
            implausible_peers=[peer[-12:] for peer, _ in implausible],
            implausible_counts=[n for _, n in implausible],
            uptime=round(time.monotonic() - self.started, 1),
            tokens_per_s=round(self.policy.engine.tokens_per_second, 2),
            reward_mean=self.policy.last_own_reward if self.policy.last_own_reward is not None else 0.0,
            external_peers=[peer[-12:] for peer, _ in top],
            external_counts=[n for _, n in top],
            local_groups=counts["local_groups_trained"],
            external_groups=counts["external_groups_trained"],
            reward_lies=sum(counts["reward_lies"].values()),
            rejected=rejected,
            invalid_peers=self.receiver.recent_offenders()[:MAX_INVALID_PEERS],
        )
        self.health.update(**values)
        self.member.update(version=self.policy.learner.version, health=record_health(self.health))


async def _sleep_or_stop(stop: asyncio.Event, seconds: float) -> None:
    if seconds <= 0:
        return
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
