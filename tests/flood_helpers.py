"""Throwaway-key peer records stored into a run's DHT: validly signed by keys nobody runs (what a flooder stores),
sent by a real client DHT node over a real p2pd, through each target's ordinary store path (validated there)."""

from __future__ import annotations

import contextlib
from typing import NamedTuple

from hivemind.dht.node import DHTNode
from hivemind.dht.routing import DHTID
from hivemind.dht.validation import DHTRecord
from hivemind.p2p import P2P, PeerID
from hivemind.utils import get_dht_time
from hivemind.utils.serializer import MSGPackSerializer

from swarmnode.identity import Identity
from swarmnode.protocol.peer import PeerRecord
from swarmnode.swarm.peer_keys import DEFAULT_PEER_SHARDS, peer_shard, peer_shard_keys
from swarmnode.swarm.validator import SwarmValidator

BATCH = 50  # records per store request (one request must stay under p2pd's 4 MiB cap)


class FakeRecord(NamedTuple):
    """One throwaway key's peer record, signed for its shard key as a DHT value."""

    key: DHTID  # the shard key of the record's owner
    subkey: str  # the owner's peer id
    value: bytes  # the signed DHT value

    def __len__(self) -> int:  # the value's size: what a storing node's byte cap counts
        return len(self.value)


def fake_peer_records(
    run_id: str,
    count: int,
    expiration: float,
    *,
    role: str = "learner",
    version: int = 10**6,
    pad: bool = True,
    shards: int = DEFAULT_PEER_SHARDS,
    health: dict | None = None,
) -> list[FakeRecord]:
    """`count` `role` records from throwaway keys, each signed for its owner's shard key; `pad`: ~2.3 KB each
    (the signature covers the expiration time). Their addresses are loopback ports nobody listens on."""
    keys = [DHTID.generate(source=k) for k in peer_shard_keys(run_id, shards)]
    out = []
    for i in range(count):
        fake = Identity.generate()
        addrs = (
            [f"/ip4/127.0.0.1/tcp/{1 + i % 60000}/{'x' * 230}"] * 8 if pad else [f"/ip4/127.0.0.1/tcp/{1 + i % 60000}"]
        )
        record = PeerRecord.create(fake, role=role, version=version, addrs=addrs, health=health or {})
        key = keys[peer_shard(fake.peer_id, shards)]
        unsigned = DHTRecord(
            key.to_bytes(), MSGPackSerializer.dumps(fake.peer_id), MSGPackSerializer.dumps(record.encode()), expiration
        )
        signed = unsigned.value + fake.sign(SwarmValidator.signed_bytes(unsigned, unsigned.value))
        out.append(FakeRecord(key, fake.peer_id, signed))
    return out


async def store_records(run_id: str, targets: dict[str, str], records: list[FakeRecord], expiration: float) -> int:
    """Store `records` (from `fake_peer_records`) at every target (peer id -> multiaddr) from a client DHT node of
    its own; how many the targets accepted in all."""
    p2p = await P2P.create(
        host_maddrs=["/ip4/127.0.0.1/tcp/0"],
        nat_port_map=False,
        auto_nat=False,
        initial_peers=[f"{addr}/p2p/{pid}" for pid, addr in targets.items()],
    )
    node = await DHTNode.create(p2p=p2p, client_mode=True, ensure_bootstrap_success=False, wait_timeout=60)
    accepted = 0
    try:
        for target in targets:
            for start in range(0, len(records), BATCH):
                batch = records[start : start + BATCH]
                ok = await node.protocol.call_store(
                    PeerID.from_base58(target),
                    [r.key for r in batch],
                    [r.value for r in batch],
                    expiration,
                    subkeys=[r.subkey for r in batch],
                )
                assert ok is not None, "a target did not answer the store"
                accepted += sum(ok)
    finally:
        with contextlib.suppress(Exception):
            await node.shutdown()
        with contextlib.suppress(Exception):
            await p2p.shutdown()
    return accepted


def record_lifetime(seconds: float = 250) -> float:
    """An expiration time `seconds` from now (within the validator's lifetime cap)."""
    return get_dht_time() + seconds
