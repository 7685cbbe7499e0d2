"""The contributors board: what each learner trained per sampler key over the whole run, and its curves.

- `tally`: `ContributorTally`, groups, tokens, first and last seen and refusals per key, bounded in keys;
- `curves`: `Curves`, the learner's curves over the whole run in at most 128 points;
- `record`: `BoardRecord` and `CurveRecord`, the signed, size-bounded records a learner publishes of them;
- `durable`: `LearnerBoard`, both kept in the learner's data directory across its restarts;
- `own_line`: a sampler's own line of the board, as `status --self` prints it.

Network-free and torch-free: the learner role feeds and publishes them (`swarmnode.node.roles.board_role`),
`status`, the dashboard and the run page read them (`swarmnode.observe.board_view`).
"""
