"""The network: everything that talks to other peers over hivemind's libp2p host.

- `p2p`       starting p2pd for this node's identity
- `hivemind_compat` every use of a private internal of hivemind, its p2pd client or asyncio, in one place
- `dht`       the run's DHT: peer records, version announcements
- `peer_keys` the run's peer records sharded over several keys, and the learners' index
- `shard_window` a sampler's bounded look at the peer records: a few shards a refresh, rotating over all
- `dht_storage` a DHT node's local storage, bounded per key
- `bootstrap_watch` whether a node still reaches its run's bootstraps: said once when none answers, and when one is back
- `validator` which DHT records are accepted
- `board_keys` learners' contributors boards and curves in the DHT (store, read)
- `reachability` can others dial this node: the bootstraps' dial-back, relay reservation, client mode
- `recheck`   reachability after join: the relay reservation each heartbeat, the dial-back now and then
- `relay`     a bootstrap's circuit relay (v2) service and its limits, checked at start
- `relay_guard` per-address and per-prefix connection caps in front of a bootstrap's relay (iptables)
- `relay_known` the addresses a relaying bootstrap knows (the run's established keys'), for the guard's cap on strangers
- `liveness`  which peers proved alive (answered us, or hold a connection): holders and send targets
- `run_name`  which run a bootstrap serves (asked by `status` when its own run has no nodes)
- `membership` being a member of a run: join the DHT, a PeerRecord on a heartbeat, leave cleanly
- `frames`    length-prefixed frames on binary streams
- `rollout_push` rollout groups pushed to the learners (RolloutSender, RolloutReceiver)
- `weights`   the versioned weight store, its server and the fetcher
- `follower`  which version a sampler should hold next and getting it (WeightFollower, WeightPuller)
- `publisher` a learner's versions into the store and the DHT (VersionPublisher)
- `averaging` several learners of one run: rounds of parameter averaging through hivemind's own averager
"""
