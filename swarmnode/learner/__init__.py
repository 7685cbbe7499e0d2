"""The learner's network-free core (never imports `swarmnode.swarm`):

- `buffer`     ReplayBuffer: staleness policy, dedup, per-source quotas; RolloutInbox: groups in (from the swarm's
               receiver or a local sampler), waking the loop
- `loop`       LearnerLoop: draw, validate, recompute rewards, GEPO/GSPO/GRPO step, publish a version, checkpoint
- `draw`       a step's groups: check budgets, validated rows, spot checks, a caught liar's groups dropped
- `gradients`  a step's gradients: statistics, micro-batches, the loss (a poisoned group isolated), the optimiser
- `versions`   a learner's versions (recorded, then published), weight snapshots, checkpoints and resume
- `optimizer`  the learner's AdamW (fused where torch has the kernel)
- `hooks`      LearnerHooks: the callbacks and journal a node gives a LearnerLoop at construction
- `step_stats` a step's advantages and GEPO E_q[q], taken once over every group drawn, before any split
- `losses`     the policy losses and their diagnostics
- `loss_stats` the paper's importance-weight variance, the learner-sampler KL diagnostic, staleness figures
- `corrections` off-policy corrections (TRL's delta, importance-sampling correction, off-policy mask; gepo+,
               truncated completions)
- `step_totals` a step's figures from its micro-batches': sums and counts, divided once
- `fill`       dynamic sampling (a step filled with groups that carry signal); prompts seen all-solved/all-failed
- `reference`  the frozen reference policy of TRL's `beta` KL
- `checkpoint` atomic checkpoints, what a learner's checkpoint holds, RNG state
- `microbatch` token-budget micro-batches, accumulation chunks and their loss shares
- `steps_log`  the steps file (one JSON line per trained step)
- `rows`       a received group -> the rows a learner trains on (prompt tokens checked, rewards recomputed), or a
               counted refusal
- `verify`     spot checks: recompute a sample of groups' behaviour log-probs, score each sampler's mismatch
- `mismatch`   a checked group's per-token differences judged: median, mean, mean |d|, off tokens, per completion
- `draw_check` seeded groups: refusals (no seed, a chosen prompt), counter gaps per key, a replayed draw judged
- `typicality` every trained group's tokens against the policy's entropy (the training forward's)
- `check_budget` per step: a key's unchecked groups and the checks of keys on probation, bounded
- `journal`    every acknowledged group, durable before the ack, replayed after a crash
- `publish_worker` versions published from a worker thread while training goes on
- `precision`  fp32 master weights, forward/backward under autocast
- `schedule`   the learning-rate schedule (linear warmup, then constant or cosine)
- `lora`       LoRA through peft: only the adapters train; adapter tensors in and out
- `memory`     what one learner process needs in memory for a step (pure arithmetic on the shapes)
- `hooks`      LearnerHooks: the node's callbacks and journal, given to LearnerLoop at construction
- `step_stats` a step's advantages and GEPO's E_q[q], once per step before any split
- `row_tensors` a micro-batch's per-row data built on the host and copied to the device in one go
- `waste`      MeteredBuffer: dropped vs trained groups and their completion lengths (sampler pacing)
"""
