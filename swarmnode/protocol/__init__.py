"""Every record that crosses the network: one module per record, sharing the codec in `codec.py`.

- `codec`   InvalidRecord, msgpack framing with size limits, field checks, signing helpers
- `peer`    PeerRecord (DHT heartbeat)
- `public_name` public names: the run's policy, the node's own check, the harmless form a reader shows
- `rollout` RolloutGroup (sampler -> learner)
- `manifest` WeightManifest (learner -> everyone)
- `announce` VersionAnnouncement (a learner's DHT pointer to a version's manifest)
- `reachability` how a peer can be reached (public / relayed / client-only), as records carry it
- `run_settings` the generation settings a learner checks a group against, and what its `settings` ack says
- `run_card` RunCard (a run's shared settings signed by its owner) and the Invite string that finds it
- `text_rollout` TextRolloutGroup (SAPO: completions shared as text between nodes with their own policies)
"""

from swarmnode.protocol.codec import InvalidRecord

__all__ = ["InvalidRecord"]
