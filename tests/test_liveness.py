"""Holders and send targets only among peers proven alive: `ProvenAlive`'s bookkeeping, and `LivePeers`' choice
over a real DHT holding validly signed records of throwaway keys nobody runs (real p2pd daemons, 127.0.0.1)."""

from __future__ import annotations

import asyncio

import pytest
from flood_helpers import fake_peer_records, record_lifetime, store_records
from swarm_helpers import FAST_NET, LOOPBACK

from swarmnode.config import load_config
from swarmnode.identity import Identity
from swarmnode.protocol.peer import PeerRecord
from swarmnode.swarm.dht import SwarmDHT
from swarmnode.swarm.follower import LivePeers
from swarmnode.swarm.liveness import ProvenAlive
from swarmnode.swarm.weights import WeightServer, WeightStore

RUN = "test-run"
DEAD = 40  # throwaway records: 20 claiming to be learners with a version, 20 samplers


def cfg_with(*sets: str):
    return load_config(
        None,
        [*FAST_NET, f"run_id={RUN}", f"network.host_maddrs=[{LOOPBACK}]", "network.missed_beats_to_expire=30", *sets],
    )


def test_a_peer_is_alive_within_its_window_and_a_failed_probe_waits_longer_each_time():
    asked: list[str] = []

    async def probe(peer: str) -> bool:
        asked.append(peer)
        return peer == "live"

    async def scenario():
        alive = ProvenAlive(0.3, probe, probes_per_refresh=2, retry_after=0.2)
        alive.mark(["old"])
        assert alive.alive("old") and not alive.alive("live")
        await asyncio.sleep(0.35)
        assert not alive.alive("old")  # the proof lapsed
        alive.refresh(["dead", "live", "old"])  # two probes per round: the lapsed peer first
        await alive.settle()
        assert asked[0] == "old" and len(asked) == 2
        alive.refresh(["dead", "live", "old"])
        await alive.settle()
        assert sorted(asked) == ["dead", "live", "old"] and alive.alive("live") and not alive.alive("dead")
        alive.refresh(["dead", "live", "old"])  # both failed lately, the live one is proven: nothing to ask
        await alive.settle()
        assert len(asked) == 3
        await asyncio.sleep(0.25)
        alive.refresh(["dead", "old"])  # retry_after passed: asked again, then twice as long to wait
        await alive.settle()
        assert len(asked) == 5 and alive._failed["dead"].delay == 0.4
        return alive

    alive = asyncio.run(scenario())
    assert alive.probes == 5 and alive.probe_failures == 4


def test_a_holder_that_failed_a_fetch_is_not_alive_until_its_wait_is_over_even_when_connected():
    async def scenario():
        alive = ProvenAlive(10.0, None, retry_after=0.2)
        alive.mark(["staller"])
        alive.fail(["staller"])  # it stalled a fetch: dropped at once
        alive.mark(["staller"])  # its live connection is no proof meanwhile
        assert not alive.alive("staller")
        await asyncio.sleep(0.25)
        alive.mark(["staller"])
        assert alive.alive("staller")
        alive.fail(["staller"])
        assert alive._failed["staller"].delay == 0.2  # a proof in between starts the wait over

    asyncio.run(scenario())


async def _choice_scenario(tmp_path):
    reader_id, live_id, designated_dead = Identity.generate(), Identity.generate(), Identity.generate()
    reader = await SwarmDHT.create(cfg_with(), reader_id)
    live = None
    try:
        boot = str((await reader.p2p.get_visible_maddrs())[0])
        # a live learner (serving weights, as every holder does) that joined through the reader
        live = await SwarmDHT.create(cfg_with(f"network.initial_peers=[{boot}]"), live_id)
        await WeightServer(WeightStore(tmp_path / "live", RUN)).start(live.p2p)
        assert await live.store_peer(PeerRecord.create(live_id, role="learner", version=3))
        # throwaway keys' records (validly signed, nobody behind them), stored through the reader's store path
        expiration = record_lifetime()
        fakes = [
            *fake_peer_records(RUN, DEAD // 2, expiration, role="learner", version=10**6, pad=False),
            *fake_peer_records(RUN, DEAD // 2, expiration, role="sampler", version=3, pad=False),
        ]
        assert await store_records(RUN, {reader_id.peer_id: boot}, fakes, expiration) == DEAD
        assert len(await reader.live_peers()) == DEAD + 1  # every record reads as a live member
        # no designated learners (accept-any): only proven peers; a designated key is eligible as the trust root
        peers = LivePeers(reader, reader_id.peer_id, max_age=3600.0, designated=[designated_dead.peer_id])
        await peers.refresh()
        first = [str(p) for p in await peers.holders()], [str(p) for p in await peers.learners()]
        await peers.alive.settle()  # the background probes of the unproven: every dead one fails
        for _ in range(3):  # a few more refreshes: the dead ones are not probed again meanwhile
            await peers.refresh()
            await peers.alive.settle()
        after = [str(p) for p in await peers.holders()], [str(p) for p in await peers.learners()]
        return first, after, peers.alive.probes, peers.alive.probe_failures, live_id.peer_id, {r.subkey for r in fakes}
    finally:
        for node in (live, reader):
            if node is not None:
                await node.shutdown()


@pytest.mark.usefixtures("starts_processes")
def test_records_of_dead_peers_are_never_chosen_as_holders_or_send_targets(tmp_path):
    first, after, probes, failures, live, fakes = asyncio.run(_choice_scenario(tmp_path))
    for holders, learners in (first, after):
        assert not fakes & set(holders) and not fakes & set(learners)  # no dead record is ever picked
        assert holders == learners == [live]  # the live learner is proven (connected, or it answered a probe)
    # each dead record was probed once (16 per round), then waits out its retry: a bounded cost per heartbeat
    assert probes <= DEAD + 1 and failures >= DEAD - 1, (probes, failures)
