"""swarmnode: a peer-to-peer node for decentralized RL post-training of LLMs (GEPO over hivemind/libp2p)."""

__version__ = "0.1.0"
