"""Watching a swarm: what a node reports about itself and what `status` and the dashboard read.

- `health_record`  one typed health record per role (what a node puts in its peer record)
- `health_fields`  the health fields as the outputs see them: `FIELDS`, `WIRE_FIELDS`, their JSON schema
- `health_tables`  the generated tables of docs/status-and-metrics.md (`python -m swarmnode.observe.health_tables`)
- `health`      the swarm's health from peer records: counts, versions, staleness, alerts
- `sampler_kl`  the samplers whose claimed log-probs sit far from a learner's (KL against the run's others)
- `status_schema`  the JSON schema of `swarmnode status --json`
- `status`      `swarmnode status`: read a run's records through a bootstrap
- `census`      counts over a run from some of its record shards: exact, or an estimate with its interval; paging
- `status_census` what `status` reads (the learners, a census of shards) and the document's counts from it
- `status_text` `status` as text: a table, or past a page a summary and a page of the worst peers
- `card_view`   the run card in `status <invite>` and the dashboard: summary, old-card warnings, panel
- `dashboard`   the live terminal view: the loop, the keys, log lines kept out of the view
- `dashboard_view` the view itself, pure: a status document (and earlier polls) -> a rich renderable
- `board_view`  public names mended and the learners' contributors boards and curves in the status document
- `board_schema` the JSON schema of the document's `board` and `curves`
- `board_panel` the dashboard's contributors panel and peer cells with public names
- `metrics`     Prometheus on every node
- `progress`    transfer progress for a person
- `self_record`  the node's own health on its own disk (`<data_dir>/health.json`)
- `stall`       no silent stall: why a learner takes no step (zero-signal groups, prompts or completions cut)
- `self_status`  `swarmnode status --self`: is this machine's node working? one line, an exit code, alerts
"""
