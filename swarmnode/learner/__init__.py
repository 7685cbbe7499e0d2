"""The learner's network-free core (never imports `swarmnode.swarm`):

- `buffer`     ReplayBuffer: staleness policy, dedup, per-source quotas; RolloutInbox: groups in (from the swarm's
               receiver or a local sampler), waking the loop
- `loop`       LearnerLoop: draw, validate, recompute rewards, GEPO/GSPO/GRPO step, publish a version, checkpoint
- `hooks`      LearnerHooks: the callbacks and journal a node gives a LearnerLoop at construction
- `step_stats` a step's advantages and GEPO E_q[q], taken once over every group drawn, before any split
- `losses`     the policy losses and their diagnostics
- `reference`  the frozen reference policy of TRL's `beta` KL
- `checkpoint` atomic checkpoints, what a learner's checkpoint holds, RNG state
- `microbatch` token-budget micro-batches, accumulation chunks, their loss shares and merged diagnostics
- `steps_log`  the steps file (one JSON line per trained step)
"""
