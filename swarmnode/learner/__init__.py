"""The learner's network-free core (never imports `swarmnode.swarm`):

- `inbox`      RolloutInbox: rollout groups in (from the swarm's receiver or a local sampler), waking the loop
- `buffer`     ReplayBuffer: staleness policy, dedup, per-source quotas
- `loop`       LearnerLoop: draw, validate, recompute rewards, GEPO/GSPO/GRPO step, publish a version, checkpoint
- `gradients`  PolicyGradient: one step's forward/backward (chunks, micro-batches, per-group isolation)
- `losses`     the policy losses and their diagnostics
- `checkpoint` atomic checkpoints and RNG state
- `steps_log`  the steps file (one JSON line per trained step)
"""
