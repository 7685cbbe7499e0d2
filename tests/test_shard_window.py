"""A sampler's bounded look at a small run's peer records in a real DHT (two in-process DHT nodes on their own
p2pd, throwaway-key records stored through the ordinary store path): every record on the first look, then a
window of shards a refresh, and a peer that joins later is seen within one pass of the rotation."""

from __future__ import annotations

import asyncio

import pytest
from flood_helpers import fake_peer_records, record_lifetime, store_records
from swarm_helpers import FAST_NET, LOOPBACK

from swarmnode.config import load_config
from swarmnode.identity import Identity
from swarmnode.swarm.dht import SwarmDHT
from swarmnode.swarm.follower import LivePeers
from swarmnode.swarm.shard_window import ShardWindow

RUN = "window-run"


def cfg_with(*sets: str):
    return load_config(
        None,
        [*FAST_NET, f"run_id={RUN}", f"network.host_maddrs=[{LOOPBACK}]", "network.missed_beats_to_expire=60", *sets],
    )


async def _small_run():
    server_id, reader_id = Identity.generate(), Identity.generate()
    server = await SwarmDHT.create(cfg_with(), server_id)
    reader = peers = None
    try:
        boot = str((await server.p2p.get_visible_maddrs())[0])
        addr, _, peer_id = boot.rpartition("/p2p/")
        reader = await SwarmDHT.create(cfg_with(f"network.initial_peers=[{boot}]"), reader_id)
        reads: list[list[int]] = []  # every batched shard read the reader makes, by its shards
        read_shards = reader.read_shards

        async def counted(shards, run_id=None):
            reads.append(list(shards))
            return await read_shards(shards, run_id)

        reader.read_shards = counted
        expiration = record_lifetime()
        first = fake_peer_records(RUN, 10, expiration, role="sampler", version=1, pad=False)
        assert await store_records(RUN, {peer_id: addr}, first, expiration) == 10
        peers = LivePeers(reader, reader_id.peer_id, max_age=0.0, sample=64)
        looks = []  # per refresh: (shard keys read, the sample's peer ids)

        async def look():
            reads.clear()
            await peers.refresh()
            looks.append(([s for r in reads for s in r], {r.peer_id for r in peers.window.records()}))

        await look()
        later = fake_peer_records(RUN, 5, expiration, role="sampler", version=1, pad=False)
        assert await store_records(RUN, {peer_id: addr}, later, expiration) == 5
        for _ in range(peers.window.passes_in()):
            await look()
        assert peers.window.shards_read == sum(len(shards) for shards, _ in looks)  # the lab's counter
        return {r.subkey for r in first}, {r.subkey for r in later}, looks, peers.window.passes_in()
    finally:
        if peers is not None:
            await peers.close()
        for node in (reader, server):
            if node is not None:
                await node.shutdown()


@pytest.mark.usefixtures("starts_processes")
def test_a_small_runs_sampler_reads_a_window_a_refresh_and_still_sees_every_peer():
    first, later, looks, passes = asyncio.run(_small_run())
    shards0, seen0 = looks[0]
    assert sorted(shards0) == list(range(64)) and first <= seen0  # first look: every shard, every record
    for shards, _ in looks[1:]:  # then one window a refresh, never the whole run
        assert len(shards) == len(set(shards)) == 8, shards
    rotation = [s for shards, _ in looks[1:] for s in shards]
    assert passes == 8 and sorted(rotation) == list(range(64))  # a pass reads each shard once
    assert first | later <= looks[-1][1]  # a peer that joined after the first look is seen within a pass
    # 64 + 8 x 8 shard reads in 9 refreshes, against 64 a look every 5th refresh (~154 a minute at 5 s) before
    assert sum(len(shards) for shards, _ in looks) == 128


def test_the_window_checks_its_bounds():
    with pytest.raises(ValueError):
        ShardWindow(64, 0)
    assert ShardWindow(4, 64, window=8).passes_in() == 1  # a window never exceeds the shards
