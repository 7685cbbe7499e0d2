"""The sampler's network-free core (never imports `swarmnode.swarm`):

- `engines` GenerationEngine: transformers and vLLM, in-place weight loads
- `loop`    SamplerLoop: prompts -> engine -> rewards -> signed RolloutGroups -> a RolloutSink
- `lora`    adapter-only versions in the engines
- `pacing`  Pacer: generate only what the learners invite (credits from acks)
- `starts`  next_start: a node's sampling start count, so a restarted sampler does not replay its seeds
- `undelivered` DeliveryGuard: stop generating when no learner takes the groups, and say why
"""
