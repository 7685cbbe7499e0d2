"""A one-command check of what this machine does with a preset's model: `swarmnode hardware --measure`.

With random weights of the preset's shape (nothing downloaded; the packaged and built-in models load their own),
on the learner's device:
- `step`: one learner step (peak memory against the estimator's first-step figure, tokens/s of a second step);
- `generation`: one generation batch per installed engine (tokens/s);
- `floor`: the bf16 log-prob floor (per-token |d log p| between the learner's fp32-output log-probs and bf16
  logits of the same weights: what an honest bf16 sampler's log-probs differ by);
- `fp16`: gradients under fp16 autocast, with and without the loss scaler, against fp32 on the same batch.

Modules: `weights` (random-weight model of a config's shape, synthetic rows), `step`, `generation`, `floor`,
`fp16`, `report` (runs them, one table).
"""

from swarmnode.node.selfcheck.report import format_selfcheck, run_selfcheck

__all__ = ["format_selfcheck", "run_selfcheck"]
