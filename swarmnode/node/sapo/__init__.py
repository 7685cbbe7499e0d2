"""SAPO/HDEE mode (`mode: sapo`): every node samples and trains its own policy and shares rollouts as text.

- `pool`     ExternalPool: peers' text groups waiting to be used, bounded per peer, deduplicated, counted
- `plausibility` PlausibilityCheck: refuses peers' text the own policy would not have written (steering)
- `distrust` PeerDistrust: a peer whose groups keep being refused gets no place in batches for a while
- `rescore`  Rescorer: a peer's text -> a training group in this node's own tokens, rewards and behaviour log-probs
- `policy`   SapoPolicy: one node's policy, network-free: generate I groups, train on I local + J external
- `pull`     TextPuller: a node nobody can dial (NAT, no relay) fetches its peers' text over its own connections
- `role`     SapoRole: the node's run loop in this mode (shares text over hivemind P2P streams)
"""
