"""`network.dht_bucket_size` (Kademlia's k) in a real DHT of 8 nodes, each on its own p2pd: with k below the run's
size a read asks fewer nodes than there are (its beam is k), and every record stored is still read back by every
node (stores go to the 5 nodes nearest the key, and a beam of k >= 5 finds them)."""

from __future__ import annotations

import asyncio

import pytest
from swarm_helpers import FAST_NET, LOOPBACK

from swarmnode.config import load_config
from swarmnode.identity import Identity
from swarmnode.protocol.peer import PeerRecord
from swarmnode.swarm.dht import STORE_REPLICAS, SwarmDHT

NODES = 8
BUCKET = STORE_REPLICAS  # the smallest k allowed: a beam as wide as a store's replicas


def cfg_with(*sets: str):
    return load_config(
        None,
        [
            *FAST_NET,
            "run_id=bucket-run",
            f"network.host_maddrs=[{LOOPBACK}]",
            "network.missed_beats_to_expire=60",
            f"network.dht_bucket_size={BUCKET}",
            *sets,
        ],
    )


def count_finds(node: SwarmDHT) -> list[int]:
    """Count the find calls `node` makes from now on (wraps its DHT protocol's call_find)."""
    calls = [0]
    call_find = node.node.protocol.call_find

    async def counted(peer, keys):
        calls[0] += 1
        return await call_find(peer, keys)

    node.node.protocol.call_find = counted
    return calls


async def _scenario():
    nodes = [await SwarmDHT.create(cfg_with(), Identity.generate())]
    try:
        boot = str((await nodes[0].p2p.get_visible_maddrs())[0])
        joined = cfg_with(f"network.initial_peers=[{boot}]")
        for _ in range(NODES - 1):
            nodes.append(await SwarmDHT.create(joined, Identity.generate()))
        for node in nodes:  # the routing tables fill as the nodes look each other up
            await node.node.find_nearest_nodes([nodes[-1].node.node_id])
        stored = [await node.store_peer(PeerRecord.create(node.identity, role="sampler", version=1)) for node in nodes]
        counters = [count_finds(node) for node in nodes]
        reads = [await node.learners() for node in nodes]  # one key each
        finds = [c[0] for c in counters]
        seen = [{r.peer_id for r in await node.all_peers()} for node in nodes]
        return nodes, stored, reads, finds, seen
    finally:
        await asyncio.gather(*(n.shutdown() for n in reversed(nodes)), return_exceptions=True)


@pytest.mark.usefixtures("starts_processes")
def test_a_read_asks_about_k_nodes_and_every_record_is_still_found():
    nodes, stored, reads, finds, seen = asyncio.run(_scenario())
    assert all(stored)
    assert all(read == [] for read in reads)  # no learner in this run: the key is empty, the search is whole
    # a beam of k: a read of an empty key (no early stop) asks about k nodes, not every other node
    assert sum(finds) / len(finds) < NODES - 1, finds
    assert max(finds) <= BUCKET + 2, finds
    everyone = {n.identity.peer_id for n in nodes}
    assert all(found == everyone for found in seen), [len(found) for found in seen]


def test_the_bucket_size_is_checked():
    import pytest

    with pytest.raises(Exception, match="dht_bucket_size"):
        load_config(None, ["network.dht_bucket_size=4"])
