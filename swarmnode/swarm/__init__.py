"""The network: everything that talks to other peers over hivemind's libp2p host.

- `p2p`       starting p2pd for this node's identity
- `dht`       the run's DHT: peer records, version announcements
- `validator` which DHT records are accepted
- `frames`    length-prefixed frames on binary streams
- `gossip`    rollout groups between peers (RolloutSender, RolloutReceiver)
- `weights`   the versioned weight store, its server and the fetcher
- `follower`  which version a sampler should hold next and getting it (WeightFollower, WeightPuller)
- `publisher` a learner's versions into the store and the DHT (VersionPublisher)
"""
