"""Watching a swarm: what a node reports about itself and what `status` and the dashboard read.

- `health_record`  one typed health record per role (what a node puts in its peer record)
- `health`      the swarm's health from peer records: counts, versions, staleness, alerts
- `sampler_kl`  the samplers whose claimed log-probs sit far from a learner's (KL against the run's others)
- `status_schema`  the JSON schema of `swarmnode status --json`
- `status`      `swarmnode status`: read a run's records through a bootstrap
- `dashboard`   the live terminal view
- `metrics`     Prometheus on every node
- `progress`    transfer progress for a person
- `self_record`  the node's own health on its own disk (`<data_dir>/health.json`)
- `self_status`  `swarmnode status --self`: is this machine's node working? one line, an exit code, alerts
"""
