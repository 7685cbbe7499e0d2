"""The learner role: receive rollout groups, train with GEPO, publish versions, serve their chunks.

A group's path in: `RolloutReceiver` (gossip: size and rate limits, signature, dedup) -> `RolloutInbox.admit`
(the replay buffer's verdict goes back in the ack, with the learner's version; an accepted group is journaled
to disk first, and replayed after a crash) -> `LearnerLoop.step` draws it
(staleness, rewards recomputed, GEPO loss) -> every `publish_every` steps `VersionPublisher` writes and
announces the new version. Every step goes to the steps file and, every `metrics.logging_steps`, to the trackers
`metrics.report_to` names (`swarmnode.trackers`); every `learner.eval_every` versions the held-out split is scored
beside training (`HeldOutEval`). With `learner.max_learners` > 1 the learners of the run average their parameters
through hivemind every `average_every` steps and publish one version per round (`AveragingRounds`).
"""

from __future__ import annotations

import asyncio
import time

from swarmnode.config import NodeConfig
from swarmnode.export.saver import VersionSaver
from swarmnode.identity import Identity
from swarmnode.learner.buffer import ACCEPTED, RolloutInbox
from swarmnode.learner.hooks import LearnerHooks
from swarmnode.learner.journal import GroupJournal, journal_limits
from swarmnode.learner.loop import LearnerLoop
from swarmnode.learner.steps_log import StepsLog
from swarmnode.learner.waste import MeteredBuffer
from swarmnode.model.models import load_model, pick_device
from swarmnode.node.held_out import HeldOutEval
from swarmnode.node.roles.averaging_rounds import AveragingRounds, averaging_enabled
from swarmnode.node.roles.base import PROGRESS_EVERY_S, Emit, NodeRole
from swarmnode.node.roles.board_role import BoardKeeper
from swarmnode.node.roles.own_sampling import OwnSampler
from swarmnode.observe.health import MAX_INVALID_PEERS, MAX_VERIFIED_PEERS, VersionSeries, spot_check_health
from swarmnode.observe.health_record import LearnerHealth
from swarmnode.observe.stall import StallWatch
from swarmnode.protocol.rollout import RolloutLimits
from swarmnode.protocol.run_settings import SETTINGS_STATUS, group_mismatch, run_values
from swarmnode.swarm.averaging import LearnerAveraging
from swarmnode.swarm.membership import Membership
from swarmnode.swarm.publisher import VersionPublisher
from swarmnode.swarm.rollout_push import RolloutReceiver
from swarmnode.swarm.rollout_push.credit import counts_against, pacing_credits
from swarmnode.swarm.rollout_push.streams import FULL
from swarmnode.trackers import open_trackers
from swarmnode.trackers.names import StepMetrics

PUBLISHED_FILE = "published_version"  # the highest version this learner announced: a restart goes on above it
JOURNAL_FILE = "group_journal"  # acknowledged groups not yet in a checkpoint (swarmnode.learner.journal)
CAUGHT_REASONS = ("logprob_mismatch", "draw_mismatch", "atypical", "seed_prompt", "draw_gaps", "unseeded")
EXTRAS_EVERY_S = 0.5  # the health record's histories, rejections and offenders are rebuilt at most this often


class LearnerRole(NodeRole):
    """See the module docstring. Build with `await LearnerRole.create(...)`, then `await role.run(stop)`."""

    HEALTH = LearnerHealth
    health: LearnerHealth
    learner: LearnerLoop
    buffer: MeteredBuffer
    inbox: RolloutInbox
    receiver: RolloutReceiver
    publisher: VersionPublisher

    @classmethod
    async def create(cls, cfg: NodeConfig, identity: Identity, member: Membership, emit: Emit) -> LearnerRole:
        """Serve the store, load the model (and its checkpoint), publish the version held, open the inbox."""
        self: LearnerRole = await cls._construct(cfg, identity, member, emit)
        emit("loading the model...")
        model = await self.compute.run(load_model, cfg.model, cfg.task, pick_device(cfg.learner.device))
        averaging = averaging_enabled(cfg)  # groups made with any of the run's learners' versions are ours too
        self.buffer = buffer = MeteredBuffer.from_config(cfg, lineage=None if averaging else identity.peer_id)
        self.publisher = VersionPublisher(self.store, self.dht, identity, cfg.model.name, asyncio.get_running_loop())
        self.journal = GroupJournal(self.data_dir / JOURNAL_FILE, **journal_limits(cfg.learner, cfg.sync.max_staleness))
        self.board = BoardKeeper(self.data_dir, self.dht, identity, cfg.run_id, cfg.network.heartbeat_interval)
        self._named: set[tuple[str, str]] = set()  # (sampler, reason) already named in the log
        self.rounds: AveragingRounds | None = None
        loop = asyncio.get_running_loop()
        hooks = LearnerHooks(
            journal=self.journal,
            # a group that poisoned a step or lied counts against its sender
            on_poisoned=lambda group, reason: loop.call_soon_threadsafe(self._poisoned, group, reason),
            # with averaging: what a learner that joins later downloads
            on_publish=lambda version: self.rounds.averaging.share(version) if self.rounds else None,
            checkable=lambda group: self.rounds.checkable(group) if self.rounds else True,
        )
        self.learner = LearnerLoop(
            model,
            self.tokenizer,
            self.task,
            cfg,
            buffer,
            self.publisher,
            checkpoint_dir=self.data_dir / "checkpoints",
            published_path=self.data_dir / PUBLISHED_FILE,
            publish_in_background=True,
            hooks=hooks,
            local_versions=not averaging,
        )
        self.learner.space = self.store.space  # a full disk said on the node's own output, once
        limits = RolloutLimits.from_config(cfg, vocab_size=len(self.tokenizer))
        # every version a group may claim stays checkable: kept on disk for the window, and back in memory now
        if self.learner.verifier.enabled:
            self.store.keep_versions = max(self.store.keep_versions, self.learner.verifier.window)
            for version in self.store.versions():
                self.learner.verifier.remember(
                    version, await asyncio.to_thread(_copied, self.store.state_dict(version))
                )
        if replayed := await asyncio.to_thread(self.journal.replay_into, buffer, limits):
            emit(
                "acknowledged groups from before the restart: "
                + ", ".join(f"{n} {reason}" for reason, n in sorted(replayed.items()))
            )
        self.replay_pending = bool(buffer.replayed)  # checkpointed once drawn: a second crash keeps their steps
        if averaging:
            await self._start_averaging()
        if self.learner.version not in self.store.versions():
            await self.compute.run(self.learner.publish_current)
            await asyncio.to_thread(self.learner.flush_publish)
        else:
            await self.dht.announce_version(self.learner.version, {"publisher": identity.peer_id})
        self.member.update(versions=self.store.versions)  # read when the record is built (once per heartbeat)
        self.inbox = RolloutInbox(buffer, self.journal)
        self.saver = VersionSaver(cfg, self.data_dir, self.store, emit)  # learner.save_every, learner.push_to_hub
        self.own = (
            OwnSampler(self.learner, self.task, cfg, identity, self.inbox.send)
            if cfg.learner.sample_when_idle
            else None
        )
        rate = cfg.learner.max_groups_per_second_per_sampler
        self.credits = credits = pacing_credits(
            cfg, lambda: len(buffer), lambda: oldest_behind(buffer), self._on_probation
        )
        high_water = cfg.learner.buffer_high_water or 4 * cfg.learner.prompts_per_step  # pacing off
        full = credits.full if credits is not None else lambda: len(buffer) >= high_water
        run = run_values(cfg.sampler)
        self.watch = StallWatch(cfg.sampler.max_prompt_length, cfg.sampler.max_completion_length)

        def admit(group) -> str:
            status = SETTINGS_STATUS if group_mismatch(group, run) else self.inbox.admit(group)
            if status == ACCEPTED:
                self.watch.groups([group])  # what a stall's line reads (zero-signal, prompts or completions cut)
            return status

        admit = self.board.counting(admit)  # refusals count against their senders on the board

        self.receiver = RolloutReceiver(
            cfg.run_id,
            admit,
            limits,
            journal=self.data_dir / "seen_groups",
            settings=run,
            rate=rate,
            burst=2 * rate,
            full=full,
            credit=credits.grant if credits is not None else None,
            turn=credits.in_turn if credits is not None else None,  # fair turns
            turn_wait=credits.turn_wait if credits is not None else None,
            settle=self._settle,  # a turn is taken by a kept group; a refusal the sender earned is a strike
            on_ban=credits.forget if credits is not None else None,
            # acks tell the newest version published (training may be ahead)
            version=lambda: self.publisher.newest,
            durable=self.inbox.durable,
        )
        self.receiver.saturated = lambda peer: self.learner.saturated.news_for(peer)  # told in the acks
        await self.receiver.start(self.p2p)
        self.member.update(version=lambda: self.learner.version)  # samplers send to learners holding a version:
        await self.member.publish()  # this one accepts groups from now on; they learn it now, not at the next beat
        self.series = VersionSeries()
        self.trackers = open_trackers(cfg, self.data_dir, "learner", identity.peer_id, emit)
        self.tracked = StepMetrics("learner", cfg.sampler.num_generations, cfg.metrics.logging_steps)
        self.held_out = HeldOutEval(
            self.learner, self.task, self.tokenizer, cfg, emit, lambda fields: self.report_health(**fields)
        )
        self.idle_seconds = 0.0  # the loop's time waiting for enough groups (the swarm's samplers too slow)
        self._idle_reported = self._extras_at = -float("inf")
        self.report_health(
            version=self.learner.version, step=self.learner.step_count, idle_seconds=0.0, **self._health_extras()
        )
        emit(f"learner ready: version {self.learner.version} ({'resumed' if self.learner.resumed else 'new'})")
        return self

    def slot_trusted(self, peer: str) -> bool:
        """One of `trust.learner_keys`, or a sampler whose groups passed this learner's spot checks (proven work);
        every other peer is a stranger here, whatever the config names."""
        learner = getattr(self, "learner", None)  # streams may arrive while the model loads
        return peer in self.cfg.trust.learner_keys or (learner is not None and learner.verifier.clean.get(peer, 0) > 0)

    def _on_probation(self, peer: str) -> bool:
        """A key not yet proven here: on spot-check probation (or caught), or, with checks off, one none of whose
        groups this learner has kept yet."""
        verifier = self.learner.verifier
        if verifier.enabled:
            return verifier.suspect(peer)
        return peer not in verifier.passed and peer not in self.cfg.trust.learner_keys

    def _settle(self, peer: str, status: str) -> bool:
        """A group of `peer` past the door has its verdict `status`: its turn settled (`CreditPolicy.settle`);
        True when the refusal counts against `peer` (the receiver strikes it)."""
        against = status != "ok" and counts_against(status, self._on_probation(peer))
        if self.credits is not None:
            self.credits.settle(peer, status == "ok", against)
        return against

    def follow_card(self, changes: list) -> None:
        """A run card update (already applied to `cfg`): the buffer takes the new staleness bound."""
        if any(key == "sync.max_staleness" for key, _, _ in changes):
            self.buffer.max_staleness = self.cfg.sync.max_staleness
            self.buffer.set_version(self.buffer.version)

    async def _replay_done(self) -> None:
        """Every group replayed after a restart was drawn or dropped: say how many of each, and checkpoint now, so
        a second crash does not lose the steps they trained again."""
        self.replay_pending = False
        outcome = self.learner.buffer.replay_outcome
        await self.compute.run(self.learner.save)
        self.emit(
            f"groups replayed after the restart: {outcome['trained']} trained, {outcome['dropped']} dropped; "
            f"checkpoint at step {self.learner.step_count}"
        )

    def _poisoned(self, group, reason: str) -> None:
        """A group that poisoned a step or lied counts against its sender; a caught liar is named in the log."""
        self.receiver.strike(group.sampler_id, f"{reason}: group {group.group_id[:12]}")
        if reason.startswith("poisoned_group"):  # (a lie is counted with its step's refusals)
            self.board.refuse(group.sampler_id, "poisoned_group")
        if reason.startswith(CAUGHT_REASONS) and (group.sampler_id, reason.split()[0]) not in self._named:
            if not reason.startswith(("logprob_mismatch", "draw_mismatch", "atypical")):  # named once per reason
                self._named.add((group.sampler_id, reason.split()[0]))
            passed = self.learner.verifier.passed.get(group.sampler_id, 0)
            self.emit(
                f"caught sampler {group.sampler_id} claiming version {group.policy_version}: {reason}; "
                f"{passed} of its groups passed to training so far; "
                f"{self.learner.rejected['liar_buffered']} buffered groups of caught samplers dropped"
            )

    async def _start_averaging(self) -> None:
        """Start this learner's hivemind averager and take a newer state from another learner, if one has it."""
        cfg = self.cfg
        averaging = LearnerAveraging(
            self.learner.trainable,
            self.dht,
            cfg.run_id,
            group_size=cfg.learner.max_learners,
            timeout=cfg.learner.averaging_timeout,
            trusted=cfg.trust.learner_keys,
            outer_lr=cfg.learner.averaging_outer_lr,
            version=self.learner.version,
        )
        await asyncio.to_thread(averaging.start)
        self.rounds = AveragingRounds(self.learner, averaging, self.dht, cfg, self.identity.peer_id, self.emit)
        await self.rounds.join()

    async def run(self, stop: asyncio.Event) -> None:
        steps_log = StepsLog(self.data_dir)
        progress = _Progress(self.emit)
        board = asyncio.create_task(self.board.run(stop))
        try:
            await self.held_out.maybe_start(self.compute)  # the version it starts with: the baseline
            while not stop.is_set():
                began = time.monotonic()
                if self.credits is not None:  # what it holds now sets how many groups it invites
                    self.credits.ready()
                diag = await self.compute.run(self.learner.step)
                if diag is None and self.own is not None:  # too few groups: make some rather than wait
                    await self.compute.run(self.own.batch)
                    continue
                if diag is None:  # too few groups: go again as soon as enough arrive (not after a fixed nap)
                    await asyncio.to_thread(self.inbox.wait, self.cfg.learner.prompts_per_step, 0.5)
                    self.idle_seconds += time.monotonic() - began  # waiting for data, not training
                    self._report_idle()
                    continue
                if not diag.get("trained"):  # the groups drawn had no reward signal; they are used up
                    self.board.step(diag)  # (its refusals count)
                    self._say_stall()
                    continue
                if self.watch.said_at is not None:  # the stall it said is over
                    self.report_health(stalled="")
                self.watch.stepped()
                if self.rounds is not None:
                    await self.rounds.after_step()
                if self.replay_pending and not self.learner.buffer.replayed:
                    await self._replay_done()
                self.saver.poll()  # a due save runs on its own thread
                record = self._step_record(diag, time.monotonic() - began) | self.held_out.take()
                steps_log.write(record)
                self.board.step(record)  # the board counts what the steps file holds
                if self.trackers is not None and (report := self.tracked.step(record, self._rejected())):
                    self.trackers.report(report, record["step"])
                self.series.add(record["version"], record)
                self._publish_step(record)
                progress.step(record)
                await self.held_out.maybe_start(self.compute)
        finally:
            steps_log.close()
            board.cancel()
            await asyncio.to_thread(self.board.board.save)
            await self.held_out.close()
            if self.trackers is not None:
                await asyncio.to_thread(self.trackers.close)
            await asyncio.to_thread(self.learner.flush_publish, 10.0)
            if self.rounds is not None:
                await asyncio.to_thread(self.rounds.averaging.stop)
            await self.compute.run(self.learner.save)
            await asyncio.to_thread(self.saver.close)
            self.compute.close()
            self.receiver.close()
            self.journal.close()

    def _say_stall(self) -> None:
        """No step from the groups drawn: past `observe.stall.SAY_AFTER_S`, say why (and put it in the health
        record, where `status` shows it as an alert)."""
        if why := self.watch.due():
            self.emit(f"learner: {why}")
            self.report_health(stalled=self.watch.short())

    def _report_idle(self) -> None:
        """While no step can be taken, the health record's `idle_seconds` still grows (once per heartbeat): a
        learner with no samplers shows it is starved, not frozen at its last step's figures."""
        now = time.monotonic()
        if now - self._idle_reported >= self.cfg.network.heartbeat_interval:
            self._idle_reported = now
            self.report_health(idle_seconds=round(self.idle_seconds, 3), **self._health_extras())

    def _step_record(self, diag: dict, step_time: float) -> dict:
        """One line of the steps file: the step's diagnostics plus the node's counters."""
        stats = self.learner.buffer.stats()
        return {
            **{k: (round(v, 6) if isinstance(v, float) else v) for k, v in diag.items()},
            "step": self.learner.step_count,
            "version": self.learner.version,
            "clip_frac": round(float(diag.get("clip_fraction", 0.0)), 6),
            "step_time": round(step_time, 4),
            "groups_received": self.receiver.accepted,
            "groups_rejected": sum(self._rejected().values()),
            "dropped_stale": stats["counters"]["stale"] + stats["counters"]["aged_out"],
            "buffer_counters": stats["counters"],  # cumulative, by reason (ok, stale, aged_out, quota, ...)
            "fates": self.buffer.lengths.summary(),  # groups drawn / dropped and their completion lengths
            "credit_target": self.credits.target if self.credits is not None else None,  # groups it invites
            "staleness_hist": list(self.learner.staleness_hist.counts),  # cumulative, power-of-two buckets
            "idle_seconds": round(self.idle_seconds, 3),
            "groups_self_made": self.own.groups if self.own is not None else 0,
            **(self.rounds.health() if self.rounds is not None else {}),
            "time": round(time.time(), 3),
        }

    def _publish_step(self, record: dict) -> None:
        """The health record after a step: each field named (a renamed diagnostic fails here, loudly)."""
        self.report_health(
            step=record["step"],
            version=record["version"],
            reward_mean=record["reward_mean"],
            reward_std=record["reward_std"],
            kl=record["kl"],
            is_weight_var=record["is_weight_var"],
            ratio_peqq_var=record.get("ratio_peqq_var"),
            entropy=record.get("entropy"),
            clip_frac=record["clip_frac"],
            masked_frac=record.get("masked_fraction"),
            grad_norm=record["grad_norm"],
            staleness_max=record["staleness_max"],
            staleness_mean=record["staleness_mean"],
            step_time=record["step_time"],
            dropped_stale=record["dropped_stale"],
            groups_received=record["groups_received"],
            groups_rejected=record["groups_rejected"],
            idle_seconds=record["idle_seconds"],
            **self._extras_due(),
        )

    def _extras_due(self) -> dict:
        """`_health_extras` at most every `EXTRAS_EVERY_S` (a step is ~30 ms on the tiny model; nobody reads them
        that often), else nothing."""
        now = time.monotonic()
        if now - self._extras_at < EXTRAS_EVERY_S:
            return {}
        self._extras_at = now
        return self._health_extras()

    def _rejected(self) -> dict[str, int]:
        """Groups refused, by reason: at the door (invalid, duplicate, stale...) and by the learner's checks."""
        out = {k: v for k, v in self.receiver.statuses.items() if k not in ("ok", FULL) and v}
        for reason, count in self.learner.rejected.items():
            if reason not in ("reward_hint_mismatch", "replayed_unchecked") and count:  # counted, not refused
                out[reason] = out.get(reason, 0) + int(count)
        return out

    def _health_extras(self) -> dict:
        """The learner's health beyond one step: histogram, per-version history, rejections, offenders."""
        return {
            "staleness_hist": list(self.learner.staleness_hist.counts),
            **self.series.as_health(),
            "rejected": self._rejected(),
            "invalid_peers": self.receiver.recent_offenders()[:MAX_INVALID_PEERS],
            **spot_check_health(self.learner.verifier.worst(MAX_VERIFIED_PEERS)),
            "max_staleness": self.cfg.sync.max_staleness,
            **self.held_out.health(),
            **(self.rounds.health() if self.rounds is not None else {}),
        }


def _copied(state: dict) -> dict:
    """CPU copies of a stored version's tensors (the store hands views of its buffer)."""
    return {k: v.clone() for k, v in state.items()}


def oldest_behind(buffer: MeteredBuffer) -> int:
    """Versions the oldest group `buffer` holds is behind its version (0 when it holds none)."""
    held = buffer.held()
    return buffer.version - min(int(g.policy_version) for g in held) if held else 0


class _Progress:
    """The learner's progress line every `PROGRESS_EVERY_S` (samplers print theirs too): step, version, mean
    reward and steps/s since the last line, groups received, mean staleness."""

    def __init__(self, emit: Emit) -> None:
        self.emit = emit
        self.since = time.monotonic()
        self.rewards: list[float] = []
        self.staleness: list[float] = []

    def step(self, record: dict) -> None:
        self.rewards.append(float(record["reward_mean"]))
        self.staleness.append(float(record.get("staleness_mean", 0.0)))
        elapsed = time.monotonic() - self.since
        if elapsed < PROGRESS_EVERY_S:
            return
        self.emit(
            f"learner: step {record['step']}, version {record['version']}, reward "
            f"{sum(self.rewards) / len(self.rewards):.3f}, {len(self.rewards) / elapsed:.2f} steps/s, "
            f"{record['groups_received']} groups received, staleness mean "
            f"{sum(self.staleness) / len(self.staleness):.1f}"
        )
        self.since, self.rewards, self.staleness = time.monotonic(), [], []
