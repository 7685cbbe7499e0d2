"""A Node: identity + DHT membership + data plane + the loop of its role, with one lifecycle.

`run_node(cfg, identity, stop)` is what `swarmnode join` runs. It joins the run (Membership), decides the role
(hardware, made swarm-aware: a node able to train becomes a learner only while the run has fewer learners than
it wants), then runs `LearnerRole` or `SamplerRole` until `stop` is set, and leaves cleanly (checkpoint, withdraw
the peer record, stop p2pd). Model work runs in a worker thread so the event loop keeps serving the network.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import random
import time
from pathlib import Path
from typing import Any, Callable

from hivemind.p2p import PeerID

from swarmnode.config import NodeConfig
from swarmnode.delay import parse_delay
from swarmnode.health import MAX_INVALID_PEERS, MAX_VERIFIED_PEERS, spot_check_health, RateMeter, StalenessHistogram, VersionSeries, record_health
from swarmnode.identity import Identity
from swarmnode.learner.buffer import ReplayBuffer
from swarmnode.learner.journal import GroupJournal
from swarmnode.preflight import check_trust_root
from swarmnode.swarm.membership import Membership

logger = logging.getLogger("swarmnode.node")
Emit = Callable[[str], None]
STEPS_FILE = "learner_steps.jsonl"
PUBLISHED_FILE = "published_version"  # the highest version this learner announced: a restart goes on above it
STEPS_FILE_MAX_BYTES = 64 << 20  # then it becomes <name>.1 (replacing the previous one): at most ~2x on disk
JOURNAL_FILE = "group_journal"  # acknowledged groups not yet in a checkpoint (swarmnode.learner.journal)
BACKPRESSURE_GROUPS = 64  # a sampler pauses generation while this many groups wait in its outbox
PROGRESS_EVERY_S = 20.0  # a working sampler prints one progress line this often


def decide_swarm_role(cfg: NodeConfig, learners_in_run: int) -> tuple[str, list[str]]:
    """The hardware decision for `cfg`, given how many learners the run already has."""
    from swarmnode.hardware import decide_role, estimate_memory, probe_hardware

    decision = decide_role(probe_hardware().for_config(cfg), estimate_memory(cfg), cfg.role, learners_in_run,
                           cfg.learner.max_learners)
    return decision.role, list(decision.reasons)


def _peer_ids(records) -> list[PeerID]:
    return [PeerID.from_base58(r.peer_id) for r in records]


class _Role:
    """What both roles share: config, identity, membership, task, tokenizer, the data directory."""

    def __init__(self, cfg: NodeConfig, identity: Identity, member: Membership, emit: Emit):
        from swarmnode.models import load_tokenizer
        from swarmnode.tasks import build_task

        self.cfg, self.identity, self.member, self.emit = cfg, identity, member, emit
        self.dht = member.dht
        self.p2p = member.dht.p2p
        self.data_dir = cfg.resolved_data_dir()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.task = build_task(cfg.task)
        self.tokenizer = load_tokenizer(cfg.model, cfg.task)
        self.started = time.monotonic()
        self.health: dict[str, Any] = {}
        self.serve_rate = RateMeter()
        self.delay = parse_delay(cfg.sync.simulate_delay)
        self.delay_rng = random.Random()

    def delay_for(self, what: str) -> float:
        """Seconds to hold back a `what` ('weights' or 'rollouts') delivery, per --simulate-delay."""
        if self.delay is None or self.cfg.sync.delay_target not in (what, "both"):
            return 0.0
        return self.delay.sample(self.delay_rng)

    def publish_health(self, **fields: Any) -> None:
        """Update `self.health` (what /metrics renders) and advertise its small form on the next heartbeat."""
        self.health.update(fields, uptime=round(time.monotonic() - self.started, 1))
        if (server := getattr(self, "server", None)) is not None:  # weight chunks this node served to peers
            self.health.update(served_mb=round(server.served_bytes / 1e6, 1),
                               serve_mb_s=round(self.serve_rate.update(server.served_bytes) / 1e6, 2))
        self.member.update(health=record_health(self.health))


class _HistogramBuffer(ReplayBuffer):
    """The replay buffer, counting the staleness of every group drawn for training (for the health record)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.histogram = StalenessHistogram()

    def draw(self, n: int) -> list:
        groups = super().draw(n)
        self.histogram.add(self.staleness(g) for g in groups)
        return groups


class LearnerRole(_Role):
    """Receive rollout groups into the buffer, train with GEPO, publish versions, serve their chunks."""

    async def run(self, stop: asyncio.Event) -> None:
        from swarmnode.learner.loop import LearnerLoop
        from swarmnode.models import load_model, pick_device
        from swarmnode.protocol.rollout import RolloutLimits
        from swarmnode.swarm.gossip import RolloutReceiver
        from swarmnode.swarm.weights import WeightServer, WeightStore

        cfg = self.cfg
        loop = asyncio.get_running_loop()
        self.store = WeightStore(self.data_dir / "weights", cfg.run_id, keep_versions=cfg.learner.keep_versions)
        self.server = await WeightServer(self.store).start(self.p2p)
        self.emit("loading the model...")
        model = await asyncio.to_thread(load_model, cfg.model, cfg.task, pick_device(cfg.learner.device))
        self.buffer = _HistogramBuffer.from_config(cfg, lineage=self.identity.peer_id)
        self.series = VersionSeries()

        def publish(version: int, state: dict) -> None:  # called from the training thread
            manifest = self.store.publish(version, state, self.identity, parent_version=version - 1,
                                          model_id=cfg.model.name)
            pointer = {"publisher": self.identity.peer_id, "total_bytes": manifest.total_bytes}
            asyncio.run_coroutine_threadsafe(self.dht.announce_version(version, pointer), loop)
            self.member.update(version=version, versions=self.store.versions())

        self.learner = LearnerLoop(model, self.tokenizer, self.task, cfg, self.buffer, publish,
                                   checkpoint_dir=self.data_dir / "checkpoints",
                                   published_path=self.data_dir / PUBLISHED_FILE)
        limits = RolloutLimits.from_config(cfg, vocab_size=len(self.tokenizer))
        self.journal = self.learner.journal = GroupJournal(self.data_dir / JOURNAL_FILE,
                                                           soft_limit=4 * cfg.learner.buffer_size,
                                                           hard_limit=16 * cfg.learner.buffer_size)
        if replayed := await asyncio.to_thread(self.journal.replay_into, self.buffer, limits):
            self.emit("acknowledged groups from before the restart: " +
                      ", ".join(f"{n} {reason}" for reason, n in sorted(replayed.items())))
        if self.learner.version not in self.store.versions():
            await asyncio.to_thread(self.learner.publish_current)
        else:
            await self.dht.announce_version(self.learner.version, {"publisher": self.identity.peer_id})
            self.member.update(version=self.learner.version, versions=self.store.versions())
        arrived = asyncio.Event()  # a group reached the buffer (the receiver runs on this loop)

        def admit(group) -> str:
            if self.journal.over_hard_limit:  # the learner is not checkpointing: accept no more than it can keep
                return "busy"
            status = self.buffer.add(group)
            arrived.set()
            return status

        async def durable(group, body: bytes) -> None:  # before the ack
            self.journal.append(body)
            await self.journal.sync()

        self.receiver = RolloutReceiver(cfg.run_id, admit, limits, journal=self.data_dir / "seen_groups",
                                        version=lambda: self.learner.version, durable=durable)
        self.learner.on_poisoned = lambda group, reason: loop.call_soon_threadsafe(
            self.receiver.strike, group.sampler_id, f"{reason}: group {group.group_id[:12]}")
        await self.receiver.start(self.p2p)
        self.publish_health(version=self.learner.version, step=self.learner.step_count, **self._health_extras())
        self.emit(f"learner ready: version {self.learner.version} ({'resumed' if self.learner.resumed else 'new'})")
        steps_file = _open_rotated(self.data_dir / STEPS_FILE)
        try:
            while not stop.is_set():
                began = time.monotonic()
                arrived.clear()
                diag = await asyncio.to_thread(self.learner.step)
                if diag is None:  # too few groups: go again as soon as one arrives (not after a fixed nap)
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(arrived.wait(), 0.5)
                    continue
                if not diag.get("trained"):  # the groups drawn had no reward signal; they are used up
                    continue
                record = self._step_record(diag, time.monotonic() - began)
                steps_file.write(json.dumps(record) + "\n")
                steps_file.flush()
                if steps_file.tell() > STEPS_FILE_MAX_BYTES:
                    steps_file.close()
                    steps_file = _open_rotated(self.data_dir / STEPS_FILE)
                self.series.add(record["version"], record)
                self.publish_health(**{**record, **self._health_extras()})
        finally:
            steps_file.close()
            await asyncio.to_thread(self.learner.save)
            self.receiver.close()
            self.journal.close()

    def _step_record(self, diag: dict, step_time: float) -> dict:
        """One line of the steps file: the step's diagnostics plus the node's counters."""
        stats = self.buffer.stats()
        return {
            **{k: (round(v, 6) if isinstance(v, float) else v) for k, v in diag.items()},
            "step": self.learner.step_count,
            "version": self.learner.version,
            "clip_frac": round(float(diag.get("clip_fraction", 0.0)), 6),
            "step_time": round(step_time, 4),
            "groups_received": self.receiver.accepted,
            "groups_rejected": sum(self._rejected().values()),
            "dropped_stale": stats["counters"]["stale"] + stats["counters"]["aged_out"],
            "staleness_hist": list(self.buffer.histogram.counts),  # cumulative, power-of-two buckets
            "time": round(time.time(), 3),
        }

    def _rejected(self) -> dict[str, int]:
        """Groups refused, by reason: at the door (invalid, duplicate, stale...) and by the learner's checks."""
        out = {k: v for k, v in self.receiver.statuses.items() if k != "ok" and v}
        for reason, count in self.learner.rejected.items():
            if reason != "reward_hint_mismatch" and count:  # a hint mismatch is counted, not refused
                out[reason] = out.get(reason, 0) + int(count)
        return out

    def _health_extras(self) -> dict:
        """The learner's health beyond one step: histogram, per-version history, rejections, offenders."""
        return {
            "staleness_hist": list(self.buffer.histogram.counts),
            **self.series.as_health(),
            "rejected": self._rejected(),
            "invalid_peers": self.receiver.recent_offenders()[:MAX_INVALID_PEERS],
            **spot_check_health(self.learner.verifier.worst(MAX_VERIFIED_PEERS)),
            "max_staleness": self.cfg.sync.max_staleness,
        }


class SamplerRole(_Role):
    """Generate rollout groups with the newest weights it can get, gossip them to the learners, serve chunks."""

    async def run(self, stop: asyncio.Event) -> None:
        from swarmnode.sampler.engines import build_engine
        from swarmnode.sampler.loop import SamplerLoop
        from swarmnode.swarm.gossip import RolloutSender
        from swarmnode.models import meta_state_dict
        from swarmnode.swarm.weights import ModelLayout, WeightServer, WeightStore

        cfg = self.cfg
        self.store = WeightStore(self.data_dir / "weights", cfg.run_id, keep_versions=cfg.learner.keep_versions)
        self.server = await WeightServer(self.store).start(self.p2p)
        self.sender = RolloutSender(self.p2p, cfg.run_id)
        await self.sender.start()
        self.emit("loading the model...")
        engine = await asyncio.to_thread(build_engine, cfg)
        self.layout = ModelLayout.of(await asyncio.to_thread(meta_state_dict, cfg.model))  # bounds manifests
        self.loop = SamplerLoop(engine, self.task, cfg, self.identity, send=self._send)
        self.newest = -1
        self.offered = -1
        check_trust_root(cfg.model_copy(update={"role": "sampler"}))  # a node whose role was auto, too
        if not cfg.learner.learner_keys:
            logger.warning("learner.accept_any_learner: trusting weights from whichever learner announces them")
        self._fetching: asyncio.Task | None = None
        self._peers: list = []  # live peer records, as of `_peers_at`
        self._peers_at = -math.inf
        await self._refresh_learners()
        await self._follow_versions(wait=True, timeout=cfg.network.startup_timeout)
        self.emit(f"sampler ready: version {self.loop.offered_version}")
        follower = asyncio.create_task(self._follower(stop))
        groups, t0 = 0, time.monotonic()
        next_report = t0 + PROGRESS_EVERY_S
        try:
            while not stop.is_set():
                if time.monotonic() >= next_report:
                    next_report = time.monotonic() + PROGRESS_EVERY_S
                    self.emit(f"sampler: version {self.loop.version} (newest {self.newest}), {groups} groups made, "
                              f"{self.sender.delivered} acked, {self.sender.pending} waiting to be sent")
                if cfg.sync.mode == "pull":
                    await self._follow_versions(wait=True, timeout=cfg.network.startup_timeout)
                if self.newest - self.loop.offered_version > cfg.sync.max_staleness:  # offered = swapped in next
                    self.publish_health(paused="too stale")
                    await self._follow_versions(wait=True, timeout=cfg.network.startup_timeout)
                    continue
                if self.sender.pending >= BACKPRESSURE_GROUPS:  # learners accept slower than we generate
                    await _sleep_or_stop(stop, 0.1)
                    continue
                began = time.monotonic()
                batch = await asyncio.to_thread(self.loop.step)
                self._follow_hint()
                if cfg.sampler.max_groups_per_second:
                    floor = len(batch) / cfg.sampler.max_groups_per_second
                    await _sleep_or_stop(stop, max(0.0, floor - (time.monotonic() - began)))
                groups += len(batch)
                elapsed = max(1e-6, time.monotonic() - t0)
                self.member.update(version=self.loop.version, versions=self.store.versions(),
                                   throughput=round(engine.tokens_per_second, 2))
                self.publish_health(version=self.loop.version, lag=max(0, self.newest - self.loop.version),
                                    rollouts_per_s=round(groups / elapsed, 3),
                                    tokens_per_s=round(engine.tokens_per_second, 2),
                                    groups_sent=self.loop.groups_sent, groups_acked=self.sender.delivered,
                                    groups_dropped=self.sender.dropped, paused="")
        finally:
            follower.cancel()
            await self.sender.close(flush_timeout=5.0)

    def _send(self, group) -> None:  # called from the generation thread
        hold = self.delay_for("rollouts")
        if hold:
            loop = self.sender._loop
            loop.call_soon_threadsafe(loop.call_later, hold, self.sender.send, group)
        else:
            self.sender.send(group)

    async def _refresh_learners(self) -> list:
        """Read the live peers (kept for weight holders until the next heartbeat); send groups to the learners."""
        self._peers = await self.dht.live_peers()
        self._peers_at = time.monotonic()
        learners = [p for p in self._peers if p.role == "learner"]
        self.sender.set_destinations(_peer_ids(learners))
        return learners

    async def _holders(self) -> list:
        """Live learners and samplers but us: the heartbeat's list, re-read only when older than a heartbeat (a
        fast learner's versions come several times a second; each read verifies every peer record)."""
        if time.monotonic() - self._peers_at > self.cfg.network.heartbeat_interval:
            await self._refresh_learners()
        return [p for p in self._peers if p.peer_id != self.identity.peer_id and p.role in ("learner", "sampler")]

    @property
    def _fetch_idle(self) -> bool:
        """No weight fetch is running (one at a time: a newer version waits for the current one)."""
        return self._fetching is None or self._fetching.done()

    def _follow_hint(self) -> None:
        """A learner's ack told a version newer than ours: fetch it from that learner now (its manifest must be
        signed by it, and it must be one of the run's learners), not at the next DHT look a heartbeat later."""
        hint, learner = self.sender.newest_hint, self.sender.hint_peer
        if hint <= self.offered or learner is None or not self._fetch_idle:
            return
        if self.cfg.learner.learner_keys and learner not in self.cfg.learner.learner_keys:
            return
        self._fetching = asyncio.create_task(self._fetch(hint, {"publisher": learner}))

    async def _follower(self, stop: asyncio.Event) -> None:
        """Background weight following (async mode) and learner discovery, once per heartbeat."""
        while not stop.is_set():
            try:
                await self._refresh_learners()
                await self._follow_versions(wait=False)
            except Exception as exc:  # a DHT hiccup must not end the sampler
                logger.warning("following versions failed: %s", exc)
            await _sleep_or_stop(stop, self.cfg.network.heartbeat_interval)

    async def _follow_versions(self, wait: bool, timeout: float = 60.0) -> None:
        """Fetch the newest announced version if newer than ours; `wait` blocks until it is loaded."""
        newest = await self.dht.newest_version()
        if newest is None:
            return
        self.newest = max(self.newest, newest[0])
        if newest[0] <= self.offered:  # until a learner's version arrives we hold only the local base model
            return
        if self._fetch_idle:
            self._fetching = asyncio.create_task(self._fetch(newest[0], newest[1]))
        if wait:
            try:
                await asyncio.wait_for(asyncio.shield(self._fetching), timeout)
            except asyncio.TimeoutError:
                logger.warning("version %d not fetched within %.0f s; generating with version %d",
                               newest[0], timeout, self.loop.version)

    async def _fetch(self, version: int, pointer: dict) -> None:
        from swarmnode.progress import fetch_progress
        from swarmnode.swarm.weights import FetchError, WeightFetcher

        # every live peer, not only those advertising the whole version: a peer fetching the same version right
        # now serves the chunks it has (holders answer `have` with their chunk maps), so samplers help each other
        publisher = pointer.get("publisher")
        allowed = self.cfg.learner.learner_keys or ([publisher] if isinstance(publisher, str) else [])
        try:
            ids = _peer_ids(await self._holders())
        except Exception as exc:  # a DHT hiccup: the publisher alone still serves the version
            logger.info("could not list weight holders (%s); fetching from the publisher", exc)
            ids = []
        if isinstance(publisher, str) and publisher not in {str(i) for i in ids}:
            ids.append(PeerID.from_base58(publisher))
        fetcher = WeightFetcher(self.p2p, self.store, allowed, layout=self.layout)
        try:
            with fetch_progress(f"weights v{version}", emit=self.emit) as progress:
                await fetcher.fetch(ids, version, progress=progress)
        except FetchError as exc:
            logger.warning("fetching version %d failed: %s", version, exc)
            return
        if (stats := fetcher.last_stats) is not None and stats.version == version:
            self.health.update(fetch_mb_s=round(stats.bytes_per_second / 1e6, 2),
                               fetch_seconds=round(stats.seconds, 3))
            if stats.seconds >= 2.0:  # worth a line (a small model's fetches take milliseconds)
                self.emit(f"fetched weights v{version}: {stats.fetched_bytes / 1e6:,.0f} MB in {stats.seconds:.1f} s "
                          f"({stats.bytes_per_second / 1e6:,.0f} MB/s), {stats.reused_bytes / 1e6:,.0f} MB reused, "
                          f"from {len(stats.chunks_by_holder)} peer(s)")
        hold = self.delay_for("weights")
        if hold:
            await asyncio.sleep(hold)
        state = await asyncio.to_thread(self.store.state_dict, version)
        if isinstance(publisher, str):
            self.loop.lineage = publisher  # groups name the learner line whose weights made them
        self.loop.offer_weights(state, version)
        self.offered = max(self.offered, version)
        self.member.update(versions=self.store.versions())


def _open_rotated(path: Path):
    """`path` opened for appending; if it is over STEPS_FILE_MAX_BYTES it is first moved to `<path>.1`."""
    if path.exists() and path.stat().st_size > STEPS_FILE_MAX_BYTES:
        path.replace(path.with_name(path.name + ".1"))
    return path.open("a")


async def _sleep_or_stop(stop: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except asyncio.TimeoutError:
        pass


async def run_node(cfg: NodeConfig, identity: Identity, stop: asyncio.Event, emit: Emit = print) -> None:
    """`swarmnode join`: join the run, pick a role, run its loop until `stop`, leave cleanly."""
    from swarmnode.hardware import probe_hardware

    async with Membership(cfg, identity, "auto") as member:
        if cfg.mode == "sapo":  # every node samples and trains its own policy (it advertises as a learner)
            role, reasons = "learner", ["mode sapo: this node samples and trains its own policy"]
        else:
            learners = await member.dht.live_peers("learner")
            role, reasons = await asyncio.to_thread(decide_swarm_role, cfg, len(learners))
        for reason in reasons:
            emit(f"role: {reason}")
        if role == "none":
            emit("this node cannot run the configured model; leaving")
            return
        hardware = await asyncio.to_thread(lambda: probe_hardware().for_config(cfg).summary())
        member.update(role=role, hardware=hardware)
        await member.publish()
        emit(f"ready peer_id={identity.peer_id} role={role} run={cfg.run_id} join_s={member.ready_s:.2f}")
        runner = LearnerRole if role == "learner" else SamplerRole
        if cfg.mode == "sapo":
            from swarmnode.sapo.role import SapoRole

            runner = SapoRole
        node = await asyncio.to_thread(runner, cfg, identity, member, emit)  # may build the tiny model: slow
        if cfg.metrics.port is not None:
            from swarmnode.metrics import serve_metrics

            port = serve_metrics(cfg.metrics.port, lambda: node.health, role, cfg.metrics.addr)
            emit(f"metrics: http://{cfg.metrics.addr}:{port}/metrics")
        await node.run(stop)
