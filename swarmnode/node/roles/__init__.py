"""A node's two working roles, each constructed whole (`await Role.create(...)`), then run (`await role.run(stop)`).

- `base`: what both share: config, identity, membership, task, tokenizer, the per-node data directory, the
  typed health record and its publication.
- `sampler_role`: engine -> `SamplerLoop` -> `RolloutSender` (gossip); `WeightFollower` keeps the weights new.
- `learner_role`: `RolloutReceiver` (gossip) -> `RolloutInbox` -> `LearnerLoop` -> `VersionPublisher`.
- `averaging_rounds`: when one of several learners averages (`learner.max_learners` > 1), and what it publishes.
- `board_role`: the contributors board: a learner keeps and publishes it, a sampler reads its own line.
- `own_sampling`: `OwnSampler`, a learner's own batches when it would otherwise wait (`learner.sample_when_idle`).
"""
