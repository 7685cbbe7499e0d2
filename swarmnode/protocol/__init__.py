"""Every record that crosses the network: one module per record, sharing the codec in `codec.py`.

- `codec`   InvalidRecord, msgpack framing with size limits, field checks, signing helpers
- `peer`    PeerRecord (DHT heartbeat)
- `rollout` RolloutGroup (sampler -> learner)
- `manifest` WeightManifest (learner -> everyone)
"""

from swarmnode.protocol.codec import InvalidRecord

__all__ = ["InvalidRecord"]
