"""A node in a swarm: `swarmnode join`, `swarmnode bootstrap` and what they run.

- `join`        `join`: identity, membership, the role decision, the role's lifecycle
- `bootstrap`   `swarmnode bootstrap`: a DHT entry point that relays for peers behind NAT
- `host`        `swarmnode host`: the run owner's key, a bootstrap and a learner, the run card and the invite
- `invite`      `join <invite>`: fetch and check the run card, build the config from it, follow its updates
- `card_server` the host's bootstrap keeps the run card in the DHT
- `idle`        `join --idle`: advertise only (a network check)
- `preflight`   what is checked before a node announces itself (task data, packages, model, ports)
- `hardware`    probe the machine, estimate the model's memory needs, pick a role
- `preset_fit`  which shipped GPU presets fit this machine (`swarmnode hardware`)
- `disk_need`   how much disk a run's sampler and learner keep at most (`swarmnode hardware`)
- `selfcheck`   `swarmnode hardware --measure`: a learner step, generation, bf16 floor, fp16 check (package)
- `running`     the interface `join` runs every role by (`RunningRole`: its health and its work loop)
- `held_out`    `HeldOutEval`: the held-out split scored every `learner.eval_every` versions beside training
                (a learner's and a SAPO node's)
- `roles`       the sampler's and the learner's wiring (package)
- `sapo`        own-policy mode: every node samples, shares text and trains (package)
"""
