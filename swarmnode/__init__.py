"""swarmnode: a peer-to-peer node for decentralized RL post-training of LLMs (GEPO over hivemind/libp2p).

The package map, by concern (docs/architecture.md draws the layers; `lint-imports` keeps them):

The command line
- `cli`, `__main__`     the typer app, one thin function per command; `python -m swarmnode`
- `cli_runtime`         logging to stderr, running until Ctrl-C or SIGTERM
- `errors`              `SwarmnodeError` and the exit codes

A node in a swarm
- `node`                `join`: identity, membership, the role decision, the role's lifecycle
- `bootstrap`, `idle`   `swarmnode bootstrap`; `join --idle` (advertise only: a network check)
- `preflight`           what is checked before a node announces itself (task data, packages, model, ports)
- `hardware`            probe the machine, estimate the model's memory needs, pick a role
- `preset_fit`          which shipped GPU presets fit this machine (`swarmnode hardware`)
- `selfcheck`           `swarmnode hardware --measure`: a learner step, generation, bf16 floor, fp16 check (package)
- `roles`               the sampler's and the learner's wiring (package)
- `sapo`                own-policy mode, every node samples and trains (package)
- `compute_thread`      the one thread a role runs its model work on
- `allocator`           keep freed heap memory in the process (fewer page faults while generating)
- `identity`            the node's Ed25519 key: peer id and signatures

Watching a swarm
- `status`, `status_schema`   `swarmnode status` and its JSON schema
- `dashboard`           the live terminal view
- `health`, `health_record`   the swarm's health from peer records; one typed record per role
- `metrics`, `progress` Prometheus on every node; transfer progress for a person

Models and prompts
- `models`, `packaged_models`, `warmstart`   building models (hub, directory, packaged GGUF, built-in tiny) and the
                        tiny model's warm start
- `prompting`, `logprobs`, `adapters`   prompt encoding; chunked log-probs; LoRA adapter versions
- `transfers`           host-device copies through pinned memory and read-backs in one transfer

On one machine
- `demo`, `local_swarm` `swarmnode demo`; a swarm of real processes on 127.0.0.1 (the demo's and the benches')
- `local_trainer`, `evaluation`   `swarmnode train-local` (single-process RL); held-out evaluation
- `delay`               simulated weight and rollout delays for latency experiments

The parts underneath
- `swarm`               the network: p2pd, the DHT, rollout gossip, weight versions, averaging (package)
- `sampler`, `learner`  the network-free sampler and learner cores (packages)
- `protocol`            every record that crosses the network (package)
- `tasks`, `config`     prompts and rewards; the configuration and its presets (packages)
- `delivery`, `staleness`, `backoff`   the rollout sink interface; staleness buckets; backoff with jitter
"""

__version__ = "0.1.0"
