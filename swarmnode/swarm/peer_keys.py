"""Where a run's peer records live in the DHT: sharded over `network.peer_shards` keys, so that no key holds the
whole run.

A node's record goes under `<run>/peers/<shard>` (subkey = its peer id), its shard being a prefix of the peer id's
hash (`peer_shard`): each shard key hashes to its own place in the DHT, so the heartbeats of N nodes land on the
DHT nodes nearest `peer_shards` different keys instead of all on the few nearest one, and a read of one shard
returns about N / peer_shards records. The learners (role `learner`) also store theirs under `<run>/learners`,
the run's small index of learners (who a node joining with `--role auto` counts, and where a sampler that names no
`trust.learner_keys` finds send targets). Every node of a run must use the same shard count: it is part of the
run's keys, like the run id.
"""

from __future__ import annotations

import hashlib

DEFAULT_PEER_SHARDS = 64  # ~160 records a shard at 10,000 nodes: a shard read stays far under a reply's cap


def peer_shard(peer_id: str, shards: int) -> int:
    """The shard of `peer_id`'s record among `shards`: the top 32 bits of its SHA-256, scaled to the count."""
    if shards < 1:
        raise ValueError("shards must be at least 1")
    return (int.from_bytes(hashlib.sha256(peer_id.encode()).digest()[:4], "big") * shards) >> 32


def peer_shard_key(run_id: str, shard: int) -> str:
    """The DHT key of one shard of the run's peer records."""
    return f"{run_id}/peers/{shard}"


def peer_shard_keys(run_id: str, shards: int) -> list[str]:
    """Every shard key of the run's peer records, by shard number."""
    return [peer_shard_key(run_id, s) for s in range(shards)]


def learners_key(run_id: str) -> str:
    """The run's index of learners: each learner's record (subkey = its peer id) beside the one in its shard."""
    return f"{run_id}/learners"
