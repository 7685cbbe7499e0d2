"""Trackers: a node's figures reported to the trackers researchers use, named as TRL names them.

- `base`: the small interface every tracker implements (`Tracker`: `log(metrics, step)`, `close()`), the run a
  tracker reports (`TrackedRun`) and the package each tracker needs.
- `trackio_tracker`, `wandb_tracker`, `tensorboard_tracker`: one module per tracker; each is offline-first
  (trackio's local store, wandb's offline mode unless `WANDB_MODE` says otherwise, tensorboard event files).
- `names`: TRL's metric names for a learner's step record and a SAPO node's, plus the swarm's own
  (`swarm/...`: staleness buckets, groups received and refused by reason, samplers, versions, groups/s, tokens/s)
  and the held-out evaluation (`eval/...`).
- `hub`: `TrackerHub`, the trackers behind one bounded queue and one thread: a report never waits, a full
  queue drops it (counted), a tracker that raises is named once in the node's output and left out from then on.
- `build`: `check_trackers` (each named tracker's package is there: before `ready`) and `open_trackers`.

Nothing in the network-free learner or sampler core imports this package; the roles wire it in
(`swarmnode.node.roles.learner_role`, `swarmnode.node.sapo.role`).
"""

from swarmnode.trackers.build import check_trackers, open_trackers
from swarmnode.trackers.hub import TrackerHub

__all__ = ["TrackerHub", "check_trackers", "open_trackers"]
