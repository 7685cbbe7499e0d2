"""The sampler loop's network-free core: prompts -> engine -> rewards -> signed RolloutGroups -> a RolloutSink.

The sink is the swarm (`swarm.rollout_push.RolloutSender.send`) or, in one process, the learner's inbox
(`learner.buffer.RolloutInbox.send`); the loop does not know which. Weights handed in with `offer_weights` (from
any thread: the swarm's `WeightFollower`, or the local trainer) are swapped into the engine between batches,
never during one, so every group carries the version (and lineage) that really generated it. An adapter-only
version (`adapter` given) is applied to the engine's base weights; one the engine refuses (other base weights)
is logged and dropped, and the engine keeps the weights it has.

Each sampler of a run draws its own prompts and samples: `sampler_seed(task seed, peer id, start)` seeds its prompt
order and its engine (the sampler role passes it to both), so two samplers of one run never repeat each other, and
a restarted one (its start count in its data directory, `sampler.starts`) does not replay its first run.

Seeded groups (`trust.seeded_groups`, off in SAPO mode): the loop's `stream` (its start count) and a counter of its
groups since that start fix each group's seed (`swarmnode.model.draws.group_seed`), its prompt
(`seeded_prompt`) and, on a `replayable` engine, its tokens; the group carries (stream, counter, replayable).
Learners' saturated-prompt hints are not used then (a seed's prompt is the seed's).
"""

from __future__ import annotations

import hashlib
import logging
import random
import threading

import torch

from swarmnode.config import SamplerConfig
from swarmnode.delivery import RolloutSink
from swarmnode.identity import Identity
from swarmnode.model.draws import group_seed, seeded_prompt
from swarmnode.protocol.manifest import AdapterSpec
from swarmnode.protocol.rollout import RolloutGroup
from swarmnode.sampler.engines import EngineError, GenerationEngine
from swarmnode.sampler.prompt_skip import SkippedPrompts
from swarmnode.tasks import Task

log = logging.getLogger(__name__)


def sampler_seed(task_seed: int, peer_id: str, start: int = 0) -> int:
    """A sampler's own seed for prompts and sampling, from the run's task seed, its peer id and how many times it
    started before (`sampler.starts.next_start`; 0 the first time) (32 bits)."""
    key = f"{task_seed}:{peer_id}" + (f":{start}" if start else "")
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big")


class SamplerLoop:
    """One batch per `step()`: sample prompts, generate G completions each, score, build, send."""

    def __init__(
        self,
        engine: GenerationEngine,
        task: Task,
        sc: SamplerConfig,
        run_id: str,
        identity: Identity,
        send: RolloutSink,
        *,
        seed: int,
        lineage: str = "",
        stream: int = 0,
        seeded: bool = False,
    ):
        """`sc`: the run's sampling settings; `seed`: its prompt order's (`sampler_seed`, or `task.seed`);
        `seeded`: groups seeded by (run, key, `stream`, counter) (`trust.seeded_groups`); `stream`: this sampler's
        start count (`sampler.starts`), the stream of its seeded groups' counters."""
        self.engine = engine
        self.task = task
        self.sc, self.run_id = sc, run_id
        self.identity = identity
        self.send = send
        self.lineage = lineage
        self.rng = random.Random(seed)
        self.skipped = SkippedPrompts()  # prompts its learners told it came back all-solved / all-failed
        self._pending: tuple[dict[str, torch.Tensor], int, str | None, AdapterSpec | None] | None = None
        self._lock = threading.Lock()
        self.groups_sent = 0
        self.send_errors = 0
        self.last_mean_reward: float | None = None
        self.seeded = seeded
        self.stream, self.counter = stream, 0  # the next seeded group's (stream, counter)

    @property
    def version(self) -> int:
        return self.engine.version

    @property
    def offered_version(self) -> int:
        """The newest version this sampler holds or has been handed (swapped in before the next batch)."""
        with self._lock:
            return self._pending[1] if self._pending else self.engine.version

    def offer_weights(
        self,
        state: dict[str, torch.Tensor],
        version: int,
        lineage: str | None = None,
        adapter: AdapterSpec | None = None,
    ) -> None:
        """Hand in a newer state (of learner line `lineage`, if given; LoRA adapter tensors if `adapter`); it is
        loaded before the next batch. Older versions are ignored, and so is the same version unless it comes from
        another learner line (a sampler's first version 0 names the learner whose line its groups belong to)."""
        with self._lock:
            newest, line = (
                (self._pending[1], self._pending[2]) if self._pending else (self.engine.version, self.lineage)
            )
            if version > newest or (version == newest and lineage is not None and lineage != line):
                self._pending = (state, version, lineage, adapter)

    def _swap_in(self) -> bool:
        with self._lock:
            pending, self._pending = self._pending, None
        if pending is None:
            return False
        state, version, lineage, adapter = pending
        try:
            if adapter is None:
                self.engine.load_state_dict(state, version)
            else:
                self.engine.load_adapter(state, adapter, version)
        except EngineError as exc:
            log.error(
                "weights version %d not applied: %s; generating with version %d still",
                version,
                exc,
                self.engine.version,
            )
            return False
        if lineage is not None:
            self.lineage = lineage  # groups name the learner line whose weights made them
        return True

    def step(self, prompts_count: int | None = None) -> list[RolloutGroup]:
        """Generate, score and send one batch of `prompts_count` prompts (default `sampler.prompts_per_batch`;
        a paced sampler makes fewer when its learners invite fewer); returns the groups built (also those whose
        send failed)."""
        self._swap_in()
        sampler = self.sc
        version = self.engine.version
        count = prompts_count or sampler.prompts_per_batch
        draws: list[tuple[int, int, int] | None] = [None] * count
        seeds: list[int] | None = None
        if self.seeded:
            draws = [(self.stream, self.counter + i, int(self.engine.replayable)) for i in range(count)]
            self.counter += count
            seeds = [group_seed(self.run_id, self.identity.peer_id, d[0], d[1]) for d in draws if d]
            prompts = [seeded_prompt(self.task, seed) for seed in seeds]
        else:
            prompts = self.skipped.sample(self.task, count, self.rng)
        gens = self.engine.generate(
            [p.text for p in prompts],
            sampler.num_generations,
            sampler.temperature,
            sampler.max_completion_length,
            seeds=seeds,
        )
        groups, rewards_seen = [], []
        for prompt, gen, draw in zip(prompts, gens, draws):
            rewards = self.task.score(prompt, gen.texts).rewards or [0.0] * len(gen.texts)  # a hint only
            rewards_seen.extend(rewards)
            group = RolloutGroup.create(
                identity=self.identity,
                run_id=self.run_id,
                prompt_id=prompt.prompt_id,
                prompt_tokens=gen.prompt_tokens,
                completions=gen.completions,
                logprobs=gen.logprobs,
                temperature=sampler.temperature,
                rewards=rewards,
                policy_version=version,
                lineage=self.lineage,
                draw=draw,
            )
            groups.append(group)
            try:
                self.send(group)
                self.groups_sent += 1
            except Exception as exc:  # a failing transport must not stop generation; counted for the health view
                self.send_errors += 1
                log.warning("sending rollout group %s failed: %s", group.group_id[:12], exc)
        if rewards_seen:
            self.last_mean_reward = sum(rewards_seen) / len(rewards_seen)
        return groups
