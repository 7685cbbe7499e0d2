"""SapoPolicy: one node's own policy in SAPO mode, network-free.

Per round: `generate()` samples I = `sapo.local_groups` groups of the node's own prompts with its current
weights (scored by its task) and returns them as signed text records to share; `receive()` takes peers'
records into the pool; `train_step()` trains on those I local groups plus up to J = `sapo.external_groups`
external ones taken from the pool (at most `sapo.max_groups_per_peer` per peer), re-tokenised and re-scored by
`Rescorer`. The step itself is the learner's (`LearnerLoop`: same loss, same checks, same optimiser); the
sampler generates with the very model the learner trains, so there are no weights to fetch and every local
group is on-policy. Nodes of any size and tokenizer mix: nothing here assumes the peers' architecture.
"""

from __future__ import annotations

import collections
import hashlib
import random
import statistics
from pathlib import Path

from swarmnode.config import ModelConfig, NodeConfig
from swarmnode.identity import Identity
from swarmnode.learner.buffer import ReplayBuffer
from swarmnode.learner.loop import LearnerLoop
from swarmnode.model.models import load_model, load_tokenizer, pick_device
from swarmnode.node.sapo.distrust import PeerDistrust
from swarmnode.node.sapo.plausibility import PlausibilityCheck
from swarmnode.node.sapo.pool import ExternalPool
from swarmnode.node.sapo.rescore import Rescorer
from swarmnode.protocol.rollout import RolloutGroup
from swarmnode.protocol.text_rollout import TextRolloutGroup
from swarmnode.sampler.engines import HFEngine
from swarmnode.sampler.loop import SamplerLoop
from swarmnode.tasks import build_task


def model_id(mc: ModelConfig, model) -> str:
    """What made a text: the configured model name and a short hash of its architecture (sizes differ)."""
    arch = hashlib.sha256(model.config.to_json_string(use_diff=False).encode()).hexdigest()[:10]
    return f"{mc.name[:100]}#{arch}"


class SapoPolicy:
    """One node's policy: generate I groups, share them as text, train on I local + J external groups."""

    def __init__(
        self,
        cfg: NodeConfig,
        identity: Identity,
        *,
        model=None,
        tokenizer=None,
        task=None,
        seed: int | None = None,
        checkpoint_dir: Path | str | None = None,
        clock=None,
    ):
        sc = cfg.sapo
        self.cfg, self.identity = cfg, identity
        self.task = task or build_task(cfg.task)
        self.tokenizer = tokenizer or load_tokenizer(cfg.model, cfg.task)
        self.model = model or load_model(cfg.model, cfg.task, pick_device(cfg.learner.device))
        self.model_id = model_id(cfg.model, self.model)
        per_step = sc.local_groups + sc.external_groups
        # no spot checks: local groups are this model's own, and external ones carry, by design, behaviour
        # log-probs that are not this model's (sapo.external_weighting)
        learner = cfg.learner.model_copy(update={"prompts_per_step": per_step})
        learner_cfg = cfg.model_copy(
            update={"learner": learner, "trust": cfg.trust.model_copy(update={"verify_fraction": 0.0})}
        )
        self.buffer = ReplayBuffer(4 * per_step, max_staleness=1 << 30, per_sampler_quota=1.0)
        self.learner = LearnerLoop(
            self.model, self.tokenizer, self.task, learner_cfg, self.buffer, None, checkpoint_dir
        )
        self.engine = HFEngine(self.model, self.tokenizer, cfg.sampler.max_prompt_length, self.learner.version)
        own_batch = cfg.sampler.model_copy(update={"prompts_per_batch": max(1, sc.local_groups)})
        self._local: list[RolloutGroup] = []
        self.sampler = SamplerLoop(
            self.engine,
            self.task,
            own_batch,
            cfg.run_id,
            identity,
            self._local.append,
            seed=cfg.task.seed if seed is None else seed,
        )
        self.pool = ExternalPool(
            identity.peer_id,
            sc.pool_per_peer,
            sc.max_external_age,
            rng=random.Random(f"pool:{seed}"),
            **({"clock": clock} if clock else {}),
        )
        self.distrust = PeerDistrust(
            sc.distrust_refused_share, sc.distrust_seconds, **({"clock": clock} if clock else {})
        )
        self.plausibility = (
            PlausibilityCheck(
                sc.plausibility_quantile,
                sc.plausibility_margin,
                sc.plausibility_window,
                sc.plausibility_min_samples,
                on_outcome=self.distrust.record,
            )
            if sc.plausibility_check
            else None
        )
        self.rescorer = Rescorer(
            self.model,
            self.tokenizer,
            self.task,
            cfg.sampler,
            cfg.sapo,
            self.learner.rows.prompt_tokens,
            lambda: self.learner.version,
            autocast=self.learner.precision.autocast,
            plausibility=self.plausibility,
        )
        self.external_by_peer: collections.Counter[str] = collections.Counter()  # groups trained on, per sender
        self.external_total = 0
        self.local_total = 0
        self.last_own_reward: float | None = None

    # ---- the round -----------------------------------------------------------------------------------
    def generate(self) -> list[TextRolloutGroup]:
        """Sample this round's I local groups (kept for the next step) and return them as text to share."""
        if self.cfg.sapo.local_groups == 0:
            return []
        self._local.clear()
        self.engine.version = self.learner.version
        self.sampler.step()
        if self.plausibility is not None:
            self.plausibility.observe(lp for g in self._local for lp in g.logprobs)
        rewards = [r for g in self._local for r in g.rewards]
        self.last_own_reward = statistics.fmean(rewards) if rewards else None
        return [self.to_text(g) for g in self._local]

    def to_text(self, group: RolloutGroup) -> TextRolloutGroup:
        """A local group as the signed text record peers receive."""
        eos = self.engine.eos_ids
        return TextRolloutGroup.create(
            identity=self.identity,
            run_id=self.cfg.run_id,
            prompt_id=group.prompt_id,
            prompt_text=self.task.get(group.prompt_id).text,
            completions=self.tokenizer.batch_decode(group.completions, skip_special_tokens=True),
            finished=[bool(c) and c[-1] in eos for c in group.completions],
            rewards=group.rewards,
            seq_logprobs=[float(sum(lp)) for lp in group.logprobs],
            temperature=group.temperature,
            model_id=self.model_id,
            created_at=group.created_at,
        )

    def receive(self, group: TextRolloutGroup) -> str:
        """A peer's validated record into the pool; its status ("ok", "duplicate", "own")."""
        return self.pool.add(group)

    def train_step(self) -> dict | None:
        """One optimiser step on this round's local groups plus up to J external ones; None if nothing to train."""
        sc = self.cfg.sapo
        local = self._local[-sc.local_groups :] if sc.local_groups else []
        self._local.clear()
        external = (
            self.rescorer.convert(
                self.pool.take(sc.external_groups, sc.max_groups_per_peer, self.distrust.distrusted())
            )
            if sc.external_groups and self._can_check()
            else []
        )
        groups = local + external
        if not groups:
            return None
        for group in groups:
            self.buffer.add(group)  # a duplicate is refused (and counted) by the buffer
        self.learner.lc = self.learner.lc.model_copy(update={"prompts_per_step": max(1, len(self.buffer))})
        diag = self.learner.step()
        self.engine.version = self.learner.version
        if diag is None:
            return None
        senders = collections.Counter(g.sampler_id for g in external)
        self.external_by_peer.update(senders)
        self.external_total += len(external)
        self.local_total += len(local)
        diag.update(
            local_groups=float(len(local)),
            external_groups=float(len(external)),
            step_external_peers=dict(senders),
            own_reward=self.last_own_reward,
        )
        return diag

    def _can_check(self) -> bool:
        """Whether peers' groups may be taken now: not before the plausibility check has its floor (unless this
        node samples nothing of its own, so never will)."""
        return self.plausibility is None or not self.cfg.sapo.local_groups or self.plausibility.floor() is not None

    def counters(self) -> dict:
        """What the health record shows: groups trained on by origin, pool outcomes, refusals and lies."""
        return {
            "local_groups_trained": self.local_total,
            "external_groups_trained": self.external_total,
            "external_by_peer": dict(self.external_by_peer),
            "pool": dict(self.pool.counters),
            "rejected": dict(self.rescorer.rejected),
            "reward_lies": dict(self.rescorer.lies),
            "implausible_by_peer": dict(self.plausibility.refused) if self.plausibility else {},
            "plausibility_floor": self.plausibility.floor() if self.plausibility else None,
            "distrusted": sorted(self.distrust.distrusted()),
        }
