"""The model out: a run's weights as a Hugging Face model directory (or a PEFT adapter), pushed to the Hub, scored.

Modules, one concept each:
- `errors`     `ExportError` and its exit codes
- `staging`    a directory written beside its final name and renamed into place at the end (never half there)
- `run_info`   `<data dir>/run_config.json`: the config (and card) a node ran with, for exporting from its directory
- `versions`   a version's tensors from a weight store (a learner's data directory), checked against the run's keys
- `live`       a version fetched from a live run's peers (the sampler's fetcher: signatures, chunk hashes)
- `hf_dir`     the directory itself: config, safetensors, tokenizer, generation config, chat template; adapters
- `card`       the model card (README.md): run, version, base model and digest, task, card digest, key, reward
- `hub`        pushing a directory to the Hugging Face Hub (`huggingface_hub`)
- `command`    `swarmnode export SOURCE --out DIR`
- `saver`      a learner's `learner.save_every` directories (keep the last K) and `learner.push_to_hub`
- `scoring`    `swarmnode eval --model DIR`: an exported model and its base on the held-out split, paired
"""
