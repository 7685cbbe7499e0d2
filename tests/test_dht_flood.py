"""A flood of throwaway-key peer records against a run's DHT: the storage cap per key (`CappedStorage`) and a live
swarm (real bootstrap, learner and sampler processes on 127.0.0.1, the flooder a real p2pd in this process)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

import pytest
from flood_helpers import fake_peer_records, record_lifetime, store_records
from hivemind.dht.routing import DHTID
from hivemind.utils import get_dht_time
from restart_helpers import WORK, learner_args, steps, wait_rows
from swarm_helpers import FAST_NET, LOOPBACK, LocalSwarm

from swarmnode.config import load_config
from swarmnode.identity import Identity
from swarmnode.observe.status import client_member, read_status
from swarmnode.swarm.dht import SwarmDHT
from swarmnode.swarm.dht_storage import MAX_BYTES_PER_KEY, CappedStorage
from swarmnode.swarm.follower import LivePeers
from swarmnode.swarm.membership import Membership

RUN = "test-run"
FAKES = 2000  # ~2.3 KB each: ~4.6 MB under one key, over p2pd's 4 MiB cap on one reply


def test_capped_storage_refuses_new_subkeys_of_a_full_key_but_keeps_its_members():
    storage = CappedStorage(max_subkeys=4, max_bytes=100, remember_s=60)
    key, now = DHTID.generate(source="run/peers"), get_dht_time()
    assert all(storage.store_subkey(key, f"m{i}", b"x" * 10, now + (1 if i == 2 else 30)) for i in range(3))
    assert not storage.store_subkey(key, "s0", b"x" * 80, now + 30) and storage.refused == 1  # 110 bytes
    assert storage.store_subkey(key, "s0", b"x" * 60, now + 30)  # 90 bytes, 4 subkeys: full
    assert not storage.store_subkey(key, "s1", b"x", now + 30) and storage.refused == 2
    assert storage.store_subkey(key, "m0", b"y" * 10, now + 40)  # a member refreshes its record
    time.sleep(max(0.0, now + 1.1 - get_dht_time()))  # m2's record lapses: a stranger takes the free place
    assert storage.store_subkey(key, "s1", b"x" * 10, now + 30)
    assert storage.store_subkey(key, "m2", b"z" * 10, now + 30)  # m2 returns (held within remember_s)
    assert not storage.store_subkey(key, "s2", b"x", now + 30)  # a new stranger does not
    assert set(dict(storage.get(key).value.items())) == {"m0", "m1", "m2", "s0", "s1"}


async def flood(run_id: str, targets: dict[str, str]) -> tuple[int, int]:
    """Store `FAKES` fake learner records at every target (peer id -> multiaddr); (records accepted, the bytes of
    the largest shard's share). Sharded over 64 keys, no key gets near the storage cap (~75 KB of 512 KB each),
    where one shared key took 4.6 MB, over p2pd's 4 MiB cap on one reply."""
    expiration = record_lifetime()
    records = fake_peer_records(run_id, FAKES, expiration)
    per_key = Counter(r.key for r in records)
    largest = max(len(r) for r in records) * max(per_key.values())
    return await store_records(run_id, targets, records, expiration), largest


PAUSED = "no learner of the run is live"  # what a sampler prints when it has nobody to send to


def learner_shown(doc: dict, learner_id: str) -> bool:
    """`status` lists `learner_id` first, as a designated learner (not one of the fakes' self-declared ones)."""
    first = doc["peers"][0] if doc["peers"] else {}
    return first.get("peer_id") == learner_id and first.get("designated") is True


async def _in_process_flood(tmp_path: Path):
    """A bootstrap DHT node, a learner member and a sampler's DHT node in this process (real p2pd each); 2,000
    fake learner records stored at all three. What a sampler and `status` then see."""
    boot_id, learner_key, sampler_id = Identity.generate(), Identity.generate(), Identity.generate()
    boot = await SwarmDHT.create(cfg_with(), boot_id)
    nodes: list = []
    try:
        boot_addr = str((await boot.p2p.get_visible_maddrs())[0])  # with its /p2p/ part
        joined = cfg_with(f"network.initial_peers=[{boot_addr}]", f"trust.learner_keys=[{learner_key.peer_id}]")
        learner = Membership(joined, learner_key, "learner")
        nodes.append(learner)
        learner.update(version=4)
        await learner.start()
        sampler = await SwarmDHT.create(joined, sampler_id)
        nodes.append(sampler)
        targets = {}
        for p2p in (boot.p2p, learner.dht.p2p, sampler.p2p):
            addr, _, peer_id = str((await p2p.get_visible_maddrs())[0]).rpartition("/p2p/")
            targets[peer_id] = addr
        accepted, largest = await flood(RUN, targets)
        peers = LivePeers(sampler, sampler_id.peer_id, max_age=0.0, designated=[learner_key.peer_id])
        learners = [str(p) for p in await peers.learners()]  # what the sampler sends to: empty would pause it
        await peers.alive.settle()  # its probes of the unproven fakes end (all fail)
        holders = {str(p) for p in await peers.holders()}
        await peers.close()
        member = client_member(joined)
        nodes.append(member)
        await member.start()
        before = await read_status(member)
        learner.update(version=5)
        await learner.publish()
        after = await read_status(member)
        return accepted, largest, learners, holders, before, after, learner_key.peer_id, len(targets)
    finally:
        for node in reversed(nodes):
            await (node.stop() if isinstance(node, Membership) else node.shutdown())
        await boot.shutdown()


def cfg_with(*sets: str):
    return load_config(
        None,
        [*FAST_NET, f"run_id={RUN}", f"network.host_maddrs=[{LOOPBACK}]", "network.missed_beats_to_expire=30", *sets],
    )


@pytest.mark.usefixtures("starts_processes")
def test_a_flood_of_2000_fake_learner_records_neither_pauses_a_sampler_nor_hides_the_learner(tmp_path: Path):
    accepted, largest, learners, holders, before, after, learner, n_targets = asyncio.run(_in_process_flood(tmp_path))
    assert 0 < accepted <= n_targets * FAKES and largest < MAX_BYTES_PER_KEY // 4, (accepted, largest)
    assert learners == [learner]  # the sampler's send targets: the designated learner alone, so no pause
    assert holders == {learner}  # no fake record is a weight holder (none proved alive)
    for doc in (before, after):
        assert learner_shown(doc, learner), doc["peers"][:2]
        assert doc["roles"].get("learner", 0) > 1  # the fakes are read too, and marked self-declared
    # newest_version is the designated learner's (the fakes claim 1,000,000), and it rises with it
    assert (before["newest_version"], after["newest_version"]) == (4, 5)


@pytest.mark.slow  # ~20-40 s quiet: CI's long-scenario step runs it (.ci/run); the suite's 10-minute budget
@pytest.mark.usefixtures("starts_processes")
def test_a_flood_of_fake_peer_records_hides_no_member_and_stalls_no_sampler(tmp_path: Path):
    steps_file = tmp_path / "learner" / "learner_steps.jsonl"
    # records live 8 s (the defaults: 15 s): a DHT read that returns a few hundred records takes ~1 s on a busy
    # machine, and the tests' usual 2 s lifetime would let members' records expire during the read itself
    with LocalSwarm(tmp_path, extra_sets=["network.missed_beats_to_expire=8"]) as swarm:
        swarm.bootstrap()
        learner = swarm.join("learner", "learner", wait=False, **learner_args(tmp_path))
        learner_id = learner.ready_fields(timeout=300)["peer_id"]  # generous: the machine may be busy
        sampler = swarm.join(
            "sampler",
            "sampler",
            work=True,
            wait=False,  # names the learner's key
            extra=[*WORK, "--set", f"data_dir={tmp_path / 'sampler'}"],
        )
        sampler.ready_fields(timeout=300)
        wait_rows(steps_file, lambda rows: len(rows) >= 3, 240, "3 learner steps")
        keys = [f"trust.learner_keys=[{learner_id}]"]  # how an operator reads a run: its designated learner
        doc = swarm.status(sets=keys)
        members = {p["peer_id"]: p["role"] for p in doc["peers"]}
        assert members.get(learner_id) == "learner" and "sampler" in members.values(), members
        targets = {p["peer_id"]: p["addrs"][0] for p in doc["peers"] if p["addrs"]}
        bootstrap_addr, _, bootstrap_id = swarm.initial_peers.rpartition("/p2p/")
        targets[bootstrap_id] = bootstrap_addr
        accepted, largest = asyncio.run(flood(swarm.run_id, targets))
        # spread over the shards: no key holds more than a fraction of its cap (one shared key took ~4.6 MB)
        assert 0 < accepted <= len(targets) * FAKES and largest < MAX_BYTES_PER_KEY // 4, (accepted, largest)
        seen = len(steps(steps_file))
        # `status` during the flood shows the designated learner first, read from its own key, and a newest
        # version that keeps rising (the fakes claim 1,000,000 and are left out)
        during = [swarm.status(timeout=120, sets=keys)]
        wait_rows(steps_file, lambda rows: len(rows) >= seen + 5, 180, "5 learner steps during the flood")
        during.append(swarm.status(timeout=120, sets=keys))
        assert all(learner_shown(d, learner_id) for d in during), [d["peers"][:1] for d in during]
        newest = [d["newest_version"] for d in during]
        assert doc["newest_version"] <= newest[0] < newest[1] < 10**6, (doc["newest_version"], newest)
        # the sampler kept sending to the real learner throughout: never paused for want of one
        assert PAUSED not in sampler.stdout(), sampler.stdout()[-2000:]
