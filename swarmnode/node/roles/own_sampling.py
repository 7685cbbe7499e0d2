"""`OwnSampler`: a learner's own rollout batches, made when it would otherwise wait (`learner.sample_when_idle`).

The batch is generated with the very model the learner trains (no weights to fetch, every group on-policy),
signed with the learner's identity and put into its inbox like a sampler's; the learner's step then draws it with
whatever the samplers sent. The learner role calls `batch()` between steps (in a worker thread, as it runs the
steps), never during one, so the weights do not change under a batch.
"""

from __future__ import annotations

from swarmnode.config import NodeConfig
from swarmnode.delivery import RolloutSink
from swarmnode.identity import Identity, node_data_dir
from swarmnode.learner.loop import LearnerLoop
from swarmnode.sampler.engines import HFEngine
from swarmnode.sampler.loop import SamplerLoop, sampler_seed
from swarmnode.sampler.starts import next_start
from swarmnode.tasks import Task


class OwnSampler:
    """One batch of `sampler.prompts_per_batch` prompts per `batch()`, with the learner's current weights."""

    def __init__(self, learner: LearnerLoop, task: Task, cfg: NodeConfig, identity: Identity, sink: RolloutSink):
        self.learner = learner
        model = learner.model
        # its own prompt stream and samples, from task.seed and its peer id as a sampler's, and new after a restart
        seed = sampler_seed(cfg.task.seed, f"{identity.peer_id}:own", next_start(node_data_dir(cfg, identity), "own"))
        self.engine = HFEngine(model, learner.tokenizer, cfg.sampler.max_prompt_length, learner.version, seed=seed)
        model.train()  # the engine put the model in eval mode; the learner trains it
        self.loop = SamplerLoop(
            self.engine, task, cfg.sampler, cfg.run_id, identity, sink, lineage=identity.peer_id, seed=seed
        )
        self.groups = 0  # groups made so far

    def batch(self) -> int:
        """Generate, score and hand over one batch; the number of groups made."""
        model = self.learner.model
        self.engine.version = self.learner.version
        model.eval()
        try:
            made = len(self.loop.step())
        finally:
            model.train()
        self.groups += made
        return made
