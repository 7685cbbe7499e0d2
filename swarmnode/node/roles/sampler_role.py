"""The sampler role: generate rollout groups with the newest weights it can get, gossip them to the learners,
serve the weight chunks it holds.

A group's path: `SamplerLoop.step` (engine, task rewards, signed `RolloutGroup`) -> the loop's sink, which is
`RolloutSender.send` (or a `DelayedSink` around it) -> the learners. A batch is generated only when the
learners take it (`Pacer`: the credits their acks tell, see `swarm.rollout_push.credit`). Weights come the other way: a
`WeightFollower` sees new versions (DHT announcements each heartbeat, learners' acks at once) and its
`WeightPuller` hands the fetched state to `SamplerLoop.offer_weights`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import Counter
from typing import Any

from swarmnode.backoff import Backoff
from swarmnode.config import NodeConfig
from swarmnode.config.trust import check_trust_root
from swarmnode.delivery import DelayedSink, RolloutSink
from swarmnode.identity import Identity, node_data_dir
from swarmnode.model.models import meta_state_dict
from swarmnode.node.roles.base import PROGRESS_EVERY_S, Emit, NodeRole, sleep_or_stop
from swarmnode.node.roles.board_role import OwnLine
from swarmnode.observe.health_record import SamplerHealth
from swarmnode.observe.progress import fetch_progress
from swarmnode.protocol.run_settings import differences, run_values
from swarmnode.sampler.build import build_engine
from swarmnode.sampler.loop import SamplerLoop, sampler_seed
from swarmnode.sampler.pacing import Pacer
from swarmnode.sampler.seeded import unreplayed_line
from swarmnode.sampler.starts import next_start
from swarmnode.sampler.undelivered import DeliveryGuard, Evidence, stop_line, undelivered_limit, why_undelivered
from swarmnode.staleness import too_stale
from swarmnode.swarm.follower import LivePeers, WeightFollower, WeightPuller
from swarmnode.swarm.membership import Membership
from swarmnode.swarm.rollout_push import RolloutSender
from swarmnode.swarm.weights import ModelLayout

logger = logging.getLogger(__name__)
PACE_WAIT_S = 0.25  # a paced sampler waits at most this long for an ack before asking its pacer again
NO_LEARNER_POLL_S = 0.25  # how often a sampler with no live learner looks for one (else once per heartbeat)
SETTINGS_SAY_EVERY_S = 60.0  # a sampler whose groups are refused for their settings says so this often at most
NO_LEARNER = "no learner"  # health `paused`: no live learner (that the run trusts) to send groups to


def no_learner_line(untrusted: list[str]) -> str:
    """Why generation is paused with no learner to send to: none is live, or those live are not trusted."""
    if not untrusted:
        return "sampler: no learner of the run is live; generation paused until one joins"
    names = ", ".join(untrusted[:3]) + (f" and {len(untrusted) - 3} more" if len(untrusted) > 3 else "")
    return (
        f"sampler: learner {names} is live but not in trust.learner_keys; generation paused until a trusted "
        "learner joins (check trust.learner_keys: `swarmnode identity --identity-path KEY` prints a key's id)"
    )


class SamplerRole(NodeRole):
    """See the module docstring. Build with `await SamplerRole.create(...)`, then `await role.run(stop)`."""

    HEALTH = SamplerHealth
    health: SamplerHealth
    sender: RolloutSender
    loop: SamplerLoop
    follower: WeightFollower
    puller: WeightPuller
    peers: LivePeers
    learners: list  # the live learners groups go to (peer ids), as of the last heartbeat

    @classmethod
    async def create(cls, cfg: NodeConfig, identity: Identity, member: Membership, emit: Emit) -> SamplerRole:
        """Serve the store, start the sender, load the engine, and fetch the newest version (up to
        `network.startup_timeout`)."""
        self: SamplerRole = await cls._construct(cfg, identity, member, emit)
        self.sender = RolloutSender(
            self.p2p, cfg.run_id, spread=True, window=cfg.network.push_window
        )  # several learners: each group to one
        self.sender.on_settings = self._settings_differ
        await self.sender.start()
        emit("loading the model...")
        # its own prompts and samples (not another sampler's, nor its own before a restart)
        start = next_start(node_data_dir(cfg, identity))
        seed = sampler_seed(cfg.task.seed, identity.peer_id, start)
        engine = await self.compute.run(functools.partial(build_engine, cfg, seed=seed))
        unreplayed_line(cfg, engine, emit)
        layout = ModelLayout.of(
            await asyncio.to_thread(meta_state_dict, cfg.model),  # bounds manifests
            base_hash=engine.base_hash,
        )  # adapter versions must be for this base
        sink: RolloutSink = self.sender.send
        self.delayed = DelayedSink(sink, lambda: self.delay_for("rollouts")) if self.delay is not None else None
        self.loop = SamplerLoop(
            engine,
            self.task,
            cfg.sampler,
            cfg.run_id,
            identity,
            self.delayed or sink,
            seed=seed,
            stream=start,
            seeded=cfg.trust.seeded_groups and cfg.mode != "sapo",
        )
        self.sender.on_saturated = self.loop.skipped.update  # prompts its learners found all-solved / all-failed
        self.pacer = Pacer(cfg.sampler.prompts_per_batch, credits=cfg.sync.pacing == "credits")
        self.guard = DeliveryGuard(undelivered_limit(cfg.sampler.prompts_per_batch))
        self._guard_seen: tuple = (0, Counter(), -1, frozenset())  # acked, statuses, version, learners at last look
        self._stops_told = 0
        check_trust_root(cfg.model_copy(update={"role": "sampler"}))  # a node whose role was auto, too
        if not cfg.trust.learner_keys:
            logger.warning("trust.accept_any_learner: trusting weights from whichever learner announces them")
        self.peers = LivePeers(
            self.dht,
            identity.peer_id,
            cfg.network.heartbeat_interval,
            designated=cfg.trust.learner_keys,
            use_relay=cfg.network.use_relay,
        )
        self.sender.on_delivered = lambda peer, _group, _status: self.peers.acked(peer)  # a send target still
        self._relayed_told: set[str] = set()
        self.untrusted: list[str] = []  # live learners whose keys are not in trust.learner_keys (while none is)
        self._paused_told: tuple | None = None
        self._untrusted_at = -float("inf")
        self.puller = WeightPuller(
            self.p2p,
            self.store,
            self.peers,
            self.loop,
            trusted=cfg.trust.learner_keys,
            emit=emit,
            progress=functools.partial(fetch_progress, emit=emit),
            layout=layout,
            hold=lambda: self.delay_for("weights"),
        )
        self.follower = WeightFollower(
            self.dht.newest_version,
            self.puller,
            trusted=cfg.trust.learner_keys,
            ask_learners=lambda: self.puller.newest_from(self.learners),
        )
        await self._discover()
        await self.follower.poll(wait=True, timeout=cfg.network.startup_timeout)
        emit(f"sampler ready: version {self.loop.offered_version}")
        return self

    def _settings_differ(self, peer: str, run: Any) -> None:
        """A learner refused a group as made under other settings: say which, once a minute at most."""
        said = differences(run_values(self.cfg.sampler), run)
        now = time.monotonic()
        if said is not None and now - getattr(self, "_settings_said", -SETTINGS_SAY_EVERY_S) >= SETTINGS_SAY_EVERY_S:
            self._settings_said = now
            self.emit(f"your settings differ from the run's: {said} (learner {peer[-8:]} refuses these groups)")

    def follow_card(self, changes: list) -> None:
        """A run card update (already applied to `cfg`): the learner keys are copied into the weight followers."""
        if any(key == "trust.learner_keys" for key, _, _ in changes):
            keys = list(self.cfg.trust.learner_keys)
            self.peers.designated, self.puller.trusted, self.follower.trusted = keys, keys, frozenset(keys)

    async def _discover(self) -> None:
        """Re-read the live peers; new groups go to the learners among them that the run trusts (a peer record
        saying "learner" is self-declared: with `trust.learner_keys` set, only those keys are sent to)."""
        await self.peers.refresh()
        trusted = set(self.cfg.trust.learner_keys)
        self.learners = [p for p in await self.peers.learners() if not trusted or str(p) in trusted]
        self.sender.set_destinations(self.learners)
        now = time.monotonic()
        if trusted and not self.learners and now - self._untrusted_at >= self.cfg.network.heartbeat_interval:
            self._untrusted_at = now  # a learner live under another key: the paused line names it
            self.untrusted = [r.peer_id for r in await self.dht.learners() if r.peer_id not in trusted]
        for peer in set(self.peers.relayed_only) - self._relayed_told:  # a path that cannot work: said once
            self._relayed_told.add(peer)
            self.emit(
                f"sampler: learner {peer[-8:]} is reached only through a relay, and this node has "
                "network.use_relay=false: it cannot send to it nor fetch from it; set network.use_relay=true"
            )

    async def _heartbeat(self, stop: asyncio.Event) -> None:
        """Learner discovery and a look for a newer version once per heartbeat (every `NO_LEARNER_POLL_S` while no
        learner is live; backing off while the DHT fails)."""
        interval = self.cfg.network.heartbeat_interval
        backoff = Backoff(base=interval, cap=8 * interval)
        while not stop.is_set():
            try:
                await self._discover()
                await self.follower.poll()
                await self._read_own_line()
                backoff.success()
                wait = interval if self.learners else min(interval, NO_LEARNER_POLL_S)  # find a joining one fast
            except Exception as exc:  # a DHT hiccup must not end the sampler
                wait = backoff.failure()
                logger.warning("following versions failed: %s (next try in %.1f s)", exc, wait)
            await sleep_or_stop(stop, wait)

    async def _read_own_line(self) -> None:
        """This sampler's line of its learners' boards, every few beats, into `health.json` (`status --self`)."""
        if not hasattr(self, "own_line"):
            self.own_line = OwnLine(self.dht, self.identity.peer_id)
        line = await self.own_line.maybe_read([str(p) for p in self.learners])
        if line is not None:
            self.self_record.extra["board"] = line

    async def run(self, stop: asyncio.Event) -> None:
        cfg = self.cfg
        heartbeat = asyncio.create_task(self._heartbeat(stop))
        stale_backoff = Backoff(base=0.5, cap=cfg.network.heartbeat_interval * 4)
        groups, t0, credit_wait_s = 0, time.monotonic(), 0.0
        next_report = t0 + PROGRESS_EVERY_S
        try:
            while not stop.is_set():
                if time.monotonic() >= next_report:
                    next_report = time.monotonic() + PROGRESS_EVERY_S
                    self.emit(
                        f"sampler: version {self.loop.version} (newest {self.follower.newest}), {groups} "
                        f"groups made, {self.sender.delivered} acked, {self.sender.pending} waiting to be sent, "
                        f"{credit_wait_s:.1f} s of {time.monotonic() - t0:.1f} s waiting for credit"
                    )
                if not self.learners:  # nobody would receive what we make: wait for a learner to join
                    told = (NO_LEARNER, tuple(self.untrusted))
                    if self._paused_told != told and not self.peers.relayed_only:  # (else said once)
                        self._paused_told = told
                        self.emit(no_learner_line(self.untrusted))
                    self.report_health(paused=NO_LEARNER)
                    await sleep_or_stop(stop, min(NO_LEARNER_POLL_S, cfg.network.heartbeat_interval))
                    continue
                self._paused_told = None
                if self.health.paused == NO_LEARNER:  # one just joined: fetch its weights before generating (its
                    # lineage check refuses groups made with our own copy of its first version)
                    await self.follower.poll(wait=True, timeout=cfg.network.startup_timeout)
                    self.report_health(paused="")
                if cfg.sync.mode == "pull":  # the newest version, asked of the learners we send to (not the DHT)
                    await self.follower.poll(wait=True, timeout=cfg.network.startup_timeout, direct=True)
                held = self.loop.offered_version  # the version swapped in before the next batch
                lag = self.follower.newest - held
                if too_stale(lag, cfg.sync.max_staleness) or self.pacer.stale_on_arrival(lag, cfg.sync.max_staleness):
                    self.report_health(paused="too stale")
                    await self.follower.poll(wait=True, timeout=cfg.network.startup_timeout)
                    if self.loop.offered_version == held:  # no progress (failing fetch, hint not announced yet)
                        await sleep_or_stop(stop, stale_backoff.failure())
                    continue
                stale_backoff.success()
                if not self._deliverable(groups):  # nobody took the last groups: stop (see sampler.undelivered)
                    await sleep_or_stop(stop, min(1.0, max(0.05, self.guard.next_try_s())))
                    continue
                outstanding = self.sender.pending + (self.delayed.waiting if self.delayed is not None else 0)
                if not (prompts := self.pacer.next_batch(outstanding, self.sender.invited)):  # learners take no more
                    self.self_record.extra["waiting_for"] = "credit"  # `status --self`: idle, and why
                    waited = time.monotonic()
                    await self.sender.wait_answer(PACE_WAIT_S)
                    credit_wait_s += time.monotonic() - waited
                    self.follower.hint(self.sender.newest_hint, self.sender.hint_peer)  # fetch what the acks told
                    continue
                began, newest = time.monotonic(), self.follower.newest
                batch = await self.compute.run(self.loop.step, prompts)
                self.follower.hint(self.sender.newest_hint, self.sender.hint_peer)
                self.pacer.batch_took(self.follower.newest - newest)
                if cfg.sampler.max_groups_per_second:
                    floor = len(batch) / cfg.sampler.max_groups_per_second
                    await sleep_or_stop(stop, max(0.0, floor - (time.monotonic() - began)))
                groups += len(batch)
                self.self_record.extra["waiting_for"] = ""
                self._report_batch(groups / max(1e-6, time.monotonic() - t0))
        finally:
            heartbeat.cancel()
            await self.follower.close()
            await self.peers.close()
            if self.delayed is not None:
                self.delayed.close()
            await self.sender.close(flush_timeout=5.0)
            self.compute.close()

    def _deliverable(self, made: int) -> bool:
        """Whether the next batch may be made (`DeliveryGuard`); prints why and advertises it when it stops."""
        acked, statuses, version, learners = self._guard_seen
        now_learners = frozenset(str(p) for p in self.learners)
        if self.sender.delivered > acked:
            statuses = Counter(self.sender.statuses)  # answers after the last ack are what counts
        if self.loop.offered_version != version or now_learners != learners:
            self.guard.reset(made)  # a new version or other learners: they may take the next groups
        self._guard_seen = (self.sender.delivered, statuses, self.loop.offered_version, now_learners)
        was_stopped = self.guard.stopped
        if self.guard.allow(made, self.sender.delivered):
            if was_stopped and not self.guard.stopped:
                self.emit("sampler: groups are acknowledged again (or something changed); generating")
            return True
        evidence = Evidence(
            made=made - self.guard.base,
            statuses=Counter(self.sender.statuses) - statuses,
            learners=len(self.learners),
            version_loaded=self.follower.offered >= 0,
            fetch_error=self.follower.last_error,
            push_error=self.sender.last_error,
            use_relay=self.cfg.network.use_relay,
        )
        if self.guard.stops != self._stops_told:
            self._stops_told = self.guard.stops
            self.emit(stop_line(evidence, self.guard.next_try_s()))
        self.report_health(paused=why_undelivered(evidence)[1], groups_wasted=self._wasted(made))
        return False

    def _wasted(self, made: int) -> int:
        """Groups made that no learner took and none waits for any more (refused, dropped, given up)."""
        return max(0, made - self.sender.delivered - self.sender.queued)

    def _report_batch(self, groups_per_s: float) -> None:
        tokens_per_s = round(self.loop.engine.tokens_per_second, 2)
        self.member.update(version=self.loop.version, versions=self.store.versions(), throughput=tokens_per_s)
        if (stats := self.puller.last_stats) is not None:
            self.health.update(fetch_mb_s=round(stats.bytes_per_second / 1e6, 2), fetch_seconds=round(stats.seconds, 3))
        self.report_health(
            version=self.loop.version,
            lag=self.follower.lag(self.loop.version),
            rollouts_per_s=round(groups_per_s, 3),
            tokens_per_s=tokens_per_s,
            groups_sent=self.loop.groups_sent,
            groups_acked=self.sender.delivered,
            groups_dropped=self.sender.dropped + self.sender.unrouted,
            paused="",
            groups_wasted=self._wasted(self.loop.groups_sent),
            prompts_told=len(self.loop.skipped.told),
            prompts_redrawn=self.loop.skipped.redrawn,
        )
