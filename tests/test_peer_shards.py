"""Sharded peer records in a real DHT (two in-process DHT nodes on their own p2pd): each record under its shard,
a sampler's bounded read, a census that is exact for a small run and a sample for a large one."""

from __future__ import annotations

import asyncio
import random

import pytest
from flood_helpers import fake_peer_records, record_lifetime, store_records
from swarm_helpers import FAST_NET, LOOPBACK

from swarmnode.config import load_config
from swarmnode.identity import Identity
from swarmnode.observe.census import estimate_total
from swarmnode.observe.status_census import read_census
from swarmnode.protocol.peer import PeerRecord
from swarmnode.swarm.dht import SwarmDHT
from swarmnode.swarm.follower import LivePeers
from swarmnode.swarm.peer_keys import peer_shard

pytestmark = pytest.mark.usefixtures("starts_processes")  # every test here starts processes

RUN = "shard-run"
FAKES = 600  # ~9 a shard over 64


def cfg_with(*sets: str):
    return load_config(
        None,
        [*FAST_NET, f"run_id={RUN}", f"network.host_maddrs=[{LOOPBACK}]", "network.missed_beats_to_expire=60", *sets],
    )


async def _scenario():
    server_id, reader_id = Identity.generate(), Identity.generate()
    server = await SwarmDHT.create(cfg_with(), server_id)
    reader = None
    try:
        boot = str((await server.p2p.get_visible_maddrs())[0])
        addr, _, peer_id = boot.rpartition("/p2p/")
        own = PeerRecord.create(server_id, role="sampler", version=1)
        assert await server.store_peer(own)
        reader = await SwarmDHT.create(cfg_with(f"network.initial_peers=[{boot}]"), reader_id)
        alone = await read_census(reader)  # a small run: every shard, exact
        expiration = record_lifetime()
        fakes = fake_peer_records(RUN, FAKES, expiration, role="sampler", version=1, pad=False)
        assert await store_records(RUN, {peer_id: addr}, fakes, expiration) == FAKES
        own_shard = (await reader.read_shards([peer_shard(server_id.peer_id, 64)]))[peer_shard(server_id.peer_id, 64)]
        peers = LivePeers(reader, reader_id.peer_id, max_age=0.0, sample=64)
        await peers.refresh()
        sampled = (len(peers.window.records()), peers.shards_read)
        later = []  # a large run: the sample is full, so a few shards are read every SHARED_EVERY refreshes only
        for _ in range(2 * LivePeers.SHARED_EVERY):
            await peers.refresh()
            later.append((peers.shards_read, len(peers.window.records())))
        await peers.close()
        small = await read_census(reader, records=100, rng=random.Random(1))
        whole = await read_census(reader, exact=True)
        everyone = await reader.all_peers()
        return alone, own, own_shard, sampled, later, small, whole, everyone
    finally:
        for node in (reader, server):
            if node is not None:
                await node.shutdown()


def test_records_sit_in_their_shards_and_readers_read_a_bounded_part():
    alone, own, own_shard, (sampled, shards_read), later, small, whole, everyone = asyncio.run(_scenario())
    assert alone.exact and [r.peer_id for r in alone.records] == [own.peer_id]
    assert own.peer_id in {r.peer_id for r in own_shard}  # under its own shard's key
    assert len(everyone) == FAKES + 1 and whole.exact and whole.count().value == FAKES + 1
    # a sampler's look for holders: whole shards until 64 records, far from the run's 601
    assert 64 <= sampled < 64 + 4 * 40 and shards_read < 64, (sampled, shards_read)
    # then about a sample's worth of shards (~7 of ~9 records) every SHARED_EVERY refreshes, never more
    reads = [n for n, _ in later if n]
    assert len(reads) == 2 and all(n <= 8 for n in reads), later
    assert all(64 <= kept < 64 + 40 for _, kept in later), later
    # a census stopped at 100 records: an estimate from the shards it read, whose interval is honest (the 95 %
    # coverage itself is measured over many draws in test_census.py; here twice the half-width, ~1 miss in 10^4)
    est = small.count()
    assert not small.exact and len(small.records) >= 100 and est.low >= len(small.records), est
    assert est == estimate_total([len(records) for records in small.read.values()], 64)
    assert abs(est.value - (FAKES + 1)) <= 2 * (est.high - est.value), est
