"""The config sections, one pydantic model each; `swarmnode.config.schema` gathers them into `NodeConfig` and
re-exports them.

Modules:
- `base`: `Section`, the base of every section (unknown keys refused, assignments validated);
- `network`, `model`, `task`, `sampler`, `learner`, `trust`, `sync`, `sapo`, `metrics`, `names`: one section each,
  named as in a config file (`learner` holds `learner.lora` too, `model` holds `model.tiny`).
"""
