"""The sampler's network-free core (never imports `swarmnode.swarm`):

- `engines` GenerationEngine: the contract and the transformers engine; in-place weight loads
- `vllm_engine` the vLLM engine
- `build`   build_engine: the engine `sampler.engine` names, with the configured model
- `loop`    SamplerLoop: prompts -> engine -> rewards -> signed RolloutGroups -> a RolloutSink
- `lora`    adapter-only versions in the engines
- `pacing`  Pacer: generate only what the learners invite (credits from acks)
- `starts`  next_start: a node's sampling start count, so a restarted sampler does not replay its seeds
- `undelivered` DeliveryGuard: stop generating when no learner takes the groups, and say why
- `seeded`  seeded groups: the draw a learner replays (a logits processor), and the line of an engine that cannot
- `prompt_skip` SkippedPrompts: prompts its learners told it came back all-solved/all-failed, mostly redrawn
"""
