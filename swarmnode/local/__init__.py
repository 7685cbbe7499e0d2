"""On one machine: the demo, a local swarm of real processes, single-process RL.

- `demo`        `swarmnode demo`: a bootstrap, a learner and samplers on 127.0.0.1, then a summary
- `swarm`       a swarm of real `swarmnode` processes on 127.0.0.1 (the demo's, the tests' and the benches')
- `trainer`     `swarmnode train-local`: sampler and learner in one process
- `evaluation`  held-out evaluation
"""
