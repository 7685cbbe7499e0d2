"""Swarm membership with real p2pd daemons and real subprocesses on 127.0.0.1."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import time

import msgpack
import pytest
from hivemind.dht.routing import DHTID
from hivemind.dht.validation import DHTRecord
from hivemind.utils import get_dht_time
from hypothesis import given, settings
from hypothesis import strategies as st
from swarm_helpers import FAST_NET, LOOPBACK, LocalSwarm, pid_alive, swarmnode_cmd

from swarmnode.config import load_config
from swarmnode.errors import ExitCode
from swarmnode.identity import Identity
from swarmnode.protocol.codec import InvalidRecord, pack
from swarmnode.protocol.peer import MAX_PEER_RECORD_BYTES, PeerRecord
from swarmnode.swarm.dht import SwarmDHT
from swarmnode.swarm.follower import LivePeers
from swarmnode.swarm.p2p import SwarmStartError, clean_stale_sockets, p2pd_pid, parse_initial_peer, stop_p2p
from swarmnode.swarm.peer_keys import DEFAULT_PEER_SHARDS, peer_shard, peer_shard_key
from swarmnode.swarm.validator import SwarmValidator

RUN = "test-run"


def cfg_with(*sets: str):
    return load_config(None, [*FAST_NET, f"run_id={RUN}", f"network.host_maddrs=[{LOOPBACK}]", *sets])


def roles_of(doc: dict) -> dict[str, str]:
    return {p["peer_id"]: p["role"] for p in doc["peers"]}


def wait_until(predicate, timeout: float, interval: float = 0.3):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return predicate()


# ---------------------------------------------------------------- PeerRecord and the validator (no network)


def test_peer_record_roundtrip_and_tamper():
    me = Identity.generate()
    record = PeerRecord.create(
        me,
        role="sampler",
        version=3,
        versions=[2, 3],
        throughput=12.5,
        hardware={"gpu": "none", "ram_gb": 8.0},
        health={"loss": [0.1, 0.2]},
    )
    again = PeerRecord.decode(record.encode())
    assert again == record
    tampered = dict(msgpack.unpackb(record.encode(), raw=False), role="learner")
    with pytest.raises(InvalidRecord, match="signature"):
        PeerRecord.decode(pack(tampered))
    with pytest.raises(InvalidRecord):
        PeerRecord.create(me, role="sampler", health={"x": "y" * 1000})
    with pytest.raises(InvalidRecord):
        PeerRecord.create(me, role="wizard")


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=600))
def test_peer_record_decode_only_raises_invalid_record(blob):
    with pytest.raises(InvalidRecord):
        PeerRecord.decode(blob)


def _record(validator: SwarmValidator, key: str, subkey: str, payload: bytes, expiration: float) -> DHTRecord:
    unsigned = DHTRecord(
        DHTID.generate(source=key).to_bytes(), msgpack.packb(subkey), msgpack.packb(payload), expiration
    )
    return DHTRecord(unsigned.key, unsigned.subkey, validator.sign_value(unsigned), expiration)


def shard_of(identity: Identity) -> str:
    """The shard key of `identity`'s peer record in RUN (the default shard count)."""
    return peer_shard_key(RUN, peer_shard(identity.peer_id, DEFAULT_PEER_SHARDS))


def test_validator_owner_only_signed_and_schema_checked():
    owner, other = Identity.generate(), Identity.generate()
    v_owner, v_other = SwarmValidator(RUN, owner), SwarmValidator(RUN, other)
    payload = PeerRecord.create(owner, role="learner").encode()
    exp = get_dht_time() + 60
    good = _record(v_owner, shard_of(owner), owner.peer_id, payload, exp)
    assert v_other.validate(good)
    assert v_owner.strip_value(good) == msgpack.packb(payload)
    # a subkey written by another key
    assert not v_owner.validate(_record(v_other, shard_of(owner), owner.peer_id, payload, exp))
    # the owner's signature, moved to a longer life, another key, or another run
    assert not v_owner.validate(DHTRecord(good.key, good.subkey, good.value, exp + 10))
    assert not v_owner.validate(_record(v_owner, f"{RUN}/junk", owner.peer_id, payload, exp))
    assert not SwarmValidator("other-run", owner).validate(good)
    # bad signature bytes
    assert not v_owner.validate(DHTRecord(good.key, good.subkey, good.value[:-64] + bytes(64), exp))
    # wrong schema, properly signed by the subkey owner
    assert not v_other.validate(_record(v_other, shard_of(other), other.peer_id, b"hello", exp))
    # somebody else's (valid) peer record under my subkey
    assert not v_owner.validate(_record(v_other, shard_of(other), other.peer_id, payload, exp))
    # oversized
    assert not v_other.validate(_record(v_other, shard_of(other), other.peer_id, bytes(MAX_PEER_RECORD_BYTES + 1), exp))
    # properly signed, but claiming to live for a day: refused (nothing stays "live" without a process behind it)
    assert not v_other.validate(_record(v_owner, shard_of(owner), owner.peer_id, payload, get_dht_time() + 86400))
    # the owner's own record under another shard than its peer id's (each shard holds its own owners only)
    elsewhere = next(
        peer_shard_key(RUN, s) for s in range(DEFAULT_PEER_SHARDS) if peer_shard_key(RUN, s) != shard_of(owner)
    )
    assert not v_other.validate(_record(v_owner, elsewhere, owner.peer_id, payload, exp))
    assert v_owner.rejected >= 5 and v_other.rejected >= 4


def test_the_validator_keeps_one_decoded_record_a_peer_not_one_a_heartbeat():
    """A 2-hour soak's nodes grew ~30 MB/h while the validator kept every heartbeat's decoded record (up to 16,384);
    a peer's new record replaces its previous one, and an older one read late does not displace the newer."""
    owner, reader = Identity.generate(), Identity.generate()
    v = SwarmValidator(RUN, reader)
    exp = get_dht_time() + 60
    payloads = []
    for beat in range(50):
        record = PeerRecord.create(owner, role="sampler", version=beat)
        payloads.append(record.encode())
        assert v.validate(_record(SwarmValidator(RUN, owner), shard_of(owner), owner.peer_id, payloads[-1], exp))
    assert len(v._records) == 1 and v.peer_record(payloads[-1]).version == 49
    assert v.peer_record(payloads[0]) is None  # replaced: a reader decodes and verifies it itself
    old = _record(SwarmValidator(RUN, owner), shard_of(owner), owner.peer_id, payloads[10], exp + 1)
    assert v.validate(old) and v.peer_record(payloads[-1]).version == 49 and len(v._records) == 1


def test_parse_initial_peer_errors():
    with pytest.raises(SwarmStartError, match="/p2p/"):
        parse_initial_peer("/ip4/127.0.0.1/tcp/1")
    with pytest.raises(SwarmStartError):
        parse_initial_peer("not an address")


def test_clean_stale_sockets_removes_only_dead_ones(tmp_path):
    dead, live = "/tmp/hivemind-p2pd-swarmnodetest-dead.sock", "/tmp/hivemind-p2pd-swarmnodetest-live.sock"
    listener = socket.socket(socket.AF_UNIX)
    try:
        for path in (dead, live):
            if os.path.exists(path):
                os.unlink(path)
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(dead)  # bound, never listening, closed: what a SIGKILLed daemon leaves behind
        listener.bind(live)
        listener.listen()
        old = time.time() - 3600
        for path in (dead, live):
            os.utime(path, (old, old))
        removed = clean_stale_sockets()
        assert dead in removed and not os.path.exists(dead)
        assert os.path.exists(live)
    finally:
        listener.close()
        for path in (dead, live):
            if os.path.exists(path):
                os.unlink(path)


# ---------------------------------------------------------------- in-process DHT with a forging attacker


class _Forger(SwarmValidator):
    """Signs like the real validator (or not at all) but accepts anything: an attacker's node."""

    def __init__(self, identity, mode: str = "sign"):
        super().__init__(RUN, identity)
        self.mode = mode

    def sign_value(self, record):
        if self.mode == "garbage-signature":
            return record.value + os.urandom(64)
        return super().sign_value(record)

    def validate(self, record):
        return True


async def _forgery_scenario():
    honest_id, victim, attacker = Identity.generate(), Identity.generate(), Identity.generate()
    honest = await SwarmDHT.create(cfg_with(), honest_id)
    try:
        bootstrap = f"{(await honest.p2p.get_visible_maddrs())[0]}"
        cfg = cfg_with(f"network.initial_peers=[{bootstrap}]")
        await honest.store_peer(PeerRecord.create(honest_id, role="bootstrap"))
        # attacker: a hivemind DHT node on its own p2pd, signing with its own key (or junk) and validating nothing
        bad = await SwarmDHT.create(cfg, attacker)
        results = {}
        try:
            peers_key, exp = shard_of(victim), get_dht_time() + 30
            forger = _Forger(attacker)
            bad.node.protocol.record_validator = forger
            fake_victim = PeerRecord.create(attacker, role="learner").encode()
            results["foreign subkey"] = await bad.node.store(peers_key, fake_victim, exp, subkey=victim.peer_id)
            own_key = shard_of(attacker)
            results["wrong schema"] = await bad.node.store(own_key, b"not a record", exp, subkey=attacker.peer_id)
            results["oversized"] = await bad.node.store(own_key, bytes(20_000), exp, subkey=attacker.peer_id)
            results["unknown key"] = await bad.node.store(f"{RUN}/free-storage", b"x", exp, subkey=attacker.peer_id)
            forger.mode = "garbage-signature"
            results["bad signature"] = await bad.node.store(
                own_key, PeerRecord.create(attacker, role="sampler").encode(), exp, subkey=attacker.peer_id
            )
        finally:
            await bad.shutdown()
        reader = await SwarmDHT.create(cfg, Identity.generate(), client_mode=True)
        try:
            await honest.store_peer(PeerRecord.create(honest_id, role="bootstrap"))  # its heartbeat (2 s records)
            seen = [r.peer_id for r in await reader.all_peers()]
        finally:
            await reader.shutdown()
        return results, seen, honest_id.peer_id, honest.validator.rejected
    finally:
        await honest.shutdown()


@pytest.mark.usefixtures("starts_processes")
def test_forged_records_are_rejected_and_never_shown():
    results, seen, honest_peer, rejected = asyncio.run(_forgery_scenario())
    # the honest node refused each store (the attacker's only copy was its own, gone with it)
    assert len(results) == 5
    assert seen == [honest_peer]
    assert rejected >= len(results)


async def _versions_scenario():
    learner, intruder = Identity.generate(), Identity.generate()
    node = await SwarmDHT.create(cfg_with(f"trust.learner_keys=[{learner.peer_id}]"), learner)
    try:
        assert await node.newest_version() is None
        await node.announce_version(3, {"manifest": "abc", "bytes": 10})
        await node.announce_version(4, {"manifest": "def", "bytes": 10})
        await node.store_peer(PeerRecord.create(learner, role="learner", version=4, versions=[3, 4]))
        await node.store_learner(PeerRecord.create(learner, role="learner", version=4, versions=[3, 4]))
        boot = str((await node.p2p.get_visible_maddrs())[0])
        other = await SwarmDHT.create(
            cfg_with(f"network.initial_peers=[{boot}]", f"trust.learner_keys=[{learner.peer_id}]"), intruder
        )
        try:
            await other.announce_version(99, {"manifest": "evil"})  # valid record, but not from a learner key
            newest = await other.newest_version()
            assert len(await other.announcements()) == 1  # one subkey per learner, not one per version
            learners = [r.peer_id for r in await other.live_peers("learner")]
            samplers = await other.live_peers("sampler")
        finally:
            await other.shutdown()
        return newest, learners, samplers, learner.peer_id
    finally:
        await node.shutdown()


@pytest.mark.usefixtures("starts_processes")
def test_versions_newest_and_roles():
    newest, learners, samplers, learner = asyncio.run(_versions_scenario())
    assert newest == (4, {"manifest": "def", "bytes": 10})
    assert learners == [learner] and samplers == []


async def _loading_learner_scenario():
    learner = Identity.generate()
    node = await SwarmDHT.create(cfg_with(), learner)
    try:
        peers = LivePeers(node, "someone-else", max_age=0.0)
        peers.proven([learner.peer_id])  # it answered us (else its record alone would make no send target)
        await node.store_learner(PeerRecord.create(learner, role="learner"))  # announced, still loading (-1)
        loading = await peers.learners()
        await node.store_learner(PeerRecord.create(learner, role="learner", version=0))  # inbox open
        ready = await peers.learners()
        return loading, [str(p) for p in ready], learner.peer_id
    finally:
        await node.shutdown()


@pytest.mark.usefixtures("starts_processes")
def test_samplers_send_only_to_learners_holding_a_version():
    loading, ready, learner = asyncio.run(_loading_learner_scenario())
    assert loading == []  # a push now would fail and back off: the learner's model is not loaded yet
    assert ready == [learner]


async def _starved_learner_scenario():
    """A learner whose record expired from the DHT (too starved of CPU to heartbeat in time) while it still acks
    the reader's groups; then one that stopped acking; then one seen leaving."""
    learner = Identity.generate()
    node = await SwarmDHT.create(cfg_with(), learner)  # heartbeat 1 s, 2 missed beats: a record lives 2 s
    try:
        peers = LivePeers(node, "someone-else", max_age=0.0, live_window=1.0)
        seen = {}

        async def read(label: str) -> None:
            seen[label] = [str(p) for p in await peers.learners()]

        await node.store_learner(PeerRecord.create(learner, role="learner", version=0))
        peers.acked(learner.peer_id)
        await read("fresh")
        await asyncio.sleep(1.5)
        peers.acked(learner.peer_id)  # its groups' acks keep coming
        await asyncio.sleep(1.0)  # its record expired (2 s) and is older than the live window (1 s)
        seen["in the DHT"] = [r.peer_id for r in await node.learners()]
        peers.acked(learner.peer_id)
        await read("acking, no record")
        await asyncio.sleep(1.2)  # no ack within the live window
        await read("silent, no record")
        await node.store_learner(PeerRecord.create(learner, role="learner", version=0))
        peers.acked(learner.peer_id)
        await read("back")
        await node.store_learner(PeerRecord.create(learner, role="learner", version=0, state="leaving"))
        peers.acked(learner.peer_id)
        await read("leaving")
        return seen, learner.peer_id
    finally:
        await node.shutdown()


@pytest.mark.usefixtures("starts_processes")
def test_a_learner_that_acks_stays_a_send_target_when_its_record_lapses():
    """A sampler on a machine short of CPU: the learner's heartbeat record expires, but its acks prove it takes
    groups, so the sampler keeps sending (it paused before); a learner that neither heartbeats nor acks, or that
    says it is leaving, is dropped."""
    seen, learner = asyncio.run(_starved_learner_scenario())
    assert seen["fresh"] == [learner] and seen["in the DHT"] == []
    assert seen["acking, no record"] == [learner]
    assert seen["silent, no record"] == []
    assert seen["back"] == [learner] and seen["leaving"] == []


# ---------------------------------------------------------------- real subprocess swarms


@pytest.mark.slow  # CI: .ci/run
@pytest.mark.usefixtures("starts_processes")
def test_swarm_status_roles_expiry_and_no_orphans(tmp_path):
    with LocalSwarm(tmp_path) as swarm:
        boot = swarm.bootstrap()
        nodes = {
            name: swarm.join(name, role, wait=False)
            for name, role in [("s1", "sampler"), ("l1", "learner"), ("s2", "sampler")]
        }  # started in parallel
        ids = {name: node.ready_fields()["peer_id"] for name, node in nodes.items()}
        start = time.monotonic()
        doc = swarm.status()
        assert time.monotonic() - start < 30
        assert doc["schema_version"] == 2 and doc["run_id"] == RUN
        roles = roles_of(doc)
        expected = {ids["s1"]: "sampler", ids["l1"]: "learner", ids["s2"]: "sampler"}
        assert {k: roles.get(k) for k in expected} == expected
        assert boot.ready_fields()["peer_id"] in roles and doc["count"] == 4
        assert all(p["age_s"] < 10 for p in doc["peers"])

        # SIGKILL: the node's p2pd dies with it (by pid), its record expires (2 missed 1 s beats)
        victim = nodes["s1"]
        daemons = victim.p2pd
        assert daemons and all(pid_alive(pid) for pid in daemons)
        victim.popen.send_signal(signal.SIGKILL)
        victim.popen.wait(10)
        assert wait_until(lambda: not any(pid_alive(pid) for pid in daemons), timeout=10), "orphan p2pd"
        # SIGTERM: a clean leave marks the record as leaving at once
        assert nodes["s2"].stop() == 0

        def expired():
            d = swarm.status()
            return d if ids["s1"] not in roles_of(d) else None

        doc = wait_until(expired, timeout=20)
        assert doc is not None, "killed node still listed after its records expired"
        assert ids["s2"] not in roles_of(doc)
        assert roles_of(doc).get(ids["l1"]) == "learner"
        # the bootstrap's health lines count what it sees
        assert '"event": "health"' in boot.stdout()


@pytest.mark.slow  # ~30 s quiet: CI's long-scenario step runs it (.ci/run)
@pytest.mark.usefixtures("starts_processes")
def test_restart_keeps_peer_id_and_duplicate_identity_is_refused(tmp_path):
    with LocalSwarm(tmp_path) as swarm:
        swarm.bootstrap()
        key = tmp_path / "node.key"
        first = swarm.join("first", identity=key)
        peer_id = first.ready_fields()["peer_id"]
        assert (key.stat().st_mode & 0o777) == 0o600
        # a second live process with the same key on this machine: the lock refuses it at once
        twin = swarm.join("twin", identity=key, wait=False)
        # ... and on "another machine" (no shared lock dir): the DHT heartbeat check refuses it
        remote = swarm.join("remote-twin", identity=key, wait=False, env={"TMPDIR": str(tmp_path)})
        assert twin.popen.wait(30) == ExitCode.IN_USE
        assert "already used by a live node" in twin.stderr() and "Traceback" not in twin.stderr()
        assert remote.popen.wait(40) == ExitCode.IN_USE
        assert "already used by another live node" in remote.stderr(), remote.stderr()[-2000:]
        assert first.popen.poll() is None
        # restart after a clean stop: same peer id, joins without waiting
        assert first.stop() == 0
        again = swarm.join("again", identity=key)
        assert again.ready_fields()["peer_id"] == peer_id


@pytest.mark.usefixtures("starts_processes")
def test_unreachable_bootstrap_names_peer_retries_and_exits(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again below: nothing listens there
    ghost = f"/ip4/127.0.0.1/tcp/{port}/p2p/{Identity.generate().peer_id}"
    start = time.monotonic()
    result = subprocess.run(
        swarmnode_cmd(
            "join",
            *[a for s in FAST_NET for a in ("--set", s)],
            "--host-maddrs",
            LOOPBACK,
            "--identity-path",
            str(tmp_path / "k.key"),
            "--initial-peers",
            ghost,
            "--startup-timeout",
            "3",
            "--set",
            f"trust.learner_keys=[{Identity.generate().peer_id}]",
        ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    elapsed = time.monotonic() - start
    assert result.returncode == ExitCode.NETWORK
    err = result.stderr
    assert "Traceback" not in err
    assert err.count(f"initial peer {ghost} unreachable") >= 2, err  # it retried, naming the peer
    assert "error: none of the initial peers answered within 3 s" in err and "connection refused" in err
    assert elapsed < 30


@pytest.mark.usefixtures("starts_processes")
def test_one_dead_initial_peer_does_not_stop_the_join(tmp_path):
    with LocalSwarm(tmp_path) as swarm:
        swarm.bootstrap()
        ghost = f"/ip4/127.0.0.1/tcp/9/p2p/{Identity.generate().peer_id}"
        node = swarm.join("node", initial_peers=[ghost, swarm.initial_peers])
        assert node.ready_fields()["role"] == "sampler"
        assert f"initial peer {ghost} unreachable" in node.stderr()


@pytest.mark.usefixtures("starts_processes")
def test_bad_multiaddr_is_a_clear_error(tmp_path):
    result = subprocess.run(
        swarmnode_cmd("status", "--initial-peers", "/ip4/127.0.0.1/tcp/1", "--startup-timeout", "2"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == ExitCode.USAGE and "Traceback" not in result.stderr
    assert "/p2p/<peer id>" in result.stderr


@pytest.mark.usefixtures("starts_processes")
def test_in_process_p2pd_dies_with_stop(tmp_path):
    async def scenario():
        dht = await SwarmDHT.create(cfg_with(), Identity.generate())
        pid = p2pd_pid(dht.p2p)
        assert pid_alive(pid)
        await dht.shutdown()
        await stop_p2p(dht.p2p)  # idempotent
        return pid

    pid = asyncio.run(scenario())
    assert wait_until(lambda: not pid_alive(pid), timeout=5)


def test_a_store_keeping_many_versions_lists_its_newest_in_the_record():
    record = PeerRecord.create(Identity.generate(), role="learner", versions=list(range(100)))  # keep_versions 100
    assert record.versions == list(range(36, 100))
    assert PeerRecord.decode(record.encode()).versions == record.versions


def test_a_learner_key_holds_only_its_owners_learner_record():
    from swarmnode.swarm.validator import learner_key

    owner, other = Identity.generate(), Identity.generate()
    v = SwarmValidator(RUN, Identity.generate())  # knows no learner: the key certifies itself
    exp = get_dht_time() + 60
    mine = PeerRecord.create(owner, role="learner").encode()
    assert v.validate(_record(SwarmValidator(RUN, owner), learner_key(RUN, owner.peer_id), owner.peer_id, mine, exp))
    theirs = PeerRecord.create(other, role="learner").encode()  # another key's record under the learner's key
    assert not v.validate(
        _record(SwarmValidator(RUN, other), learner_key(RUN, owner.peer_id), other.peer_id, theirs, exp)
    )
    sampler = PeerRecord.create(owner, role="sampler").encode()  # a learner key holds a learner record only
    assert not v.validate(
        _record(SwarmValidator(RUN, owner), learner_key(RUN, owner.peer_id), owner.peer_id, sampler, exp)
    )
    assert not SwarmValidator("other-run", owner).validate(
        _record(SwarmValidator(RUN, owner), learner_key(RUN, owner.peer_id), owner.peer_id, mine, exp)
    )


async def _designated_scenario():
    learner, reader_id = Identity.generate(), Identity.generate()
    node = await SwarmDHT.create(cfg_with("network.missed_beats_to_expire=30"), learner)  # outlives a slow start
    try:
        record = PeerRecord.create(learner, role="learner", version=7, versions=[7])
        assert await node.store_learner(record)  # and in no shard of the peer records
        boot = str((await node.p2p.get_visible_maddrs())[0])
        reader = await SwarmDHT.create(cfg_with(f"network.initial_peers=[{boot}]"), reader_id)
        try:
            shared = [r.peer_id for r in await reader.all_peers()]
            found = [
                (r.peer_id, r.version) for r in await reader.designated_learners([learner.peer_id, reader_id.peer_id])
            ]
            peers = LivePeers(reader, reader_id.peer_id, max_age=0.0, designated=[learner.peer_id])
            learners = [str(p) for p in await peers.learners()]
        finally:
            await reader.shutdown()
        return shared, found, learners, learner.peer_id
    finally:
        await node.shutdown()


@pytest.mark.usefixtures("starts_processes")
def test_designated_learners_are_read_from_their_own_keys():
    """A learner missing from the shared peers key (a flood filled it) is still found by name."""
    shared, found, learners, learner = asyncio.run(_designated_scenario())
    assert shared == [] and found == [(learner, 7)] and learners == [learner]
