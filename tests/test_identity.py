"""The node's persistent Ed25519 identity: file mode, reuse, signatures, and p2pd agreeing on the peer id."""

from __future__ import annotations

import asyncio
import os

import pytest

from swarmnode.config import load_config
from swarmnode.identity import ED25519, Identity, IdentityError, decode_key, encode_key, public_key_from_peer_id, verify
from swarmnode.swarm.p2p import IdentityLock, SwarmStartError, start_p2p, stop_p2p


def test_created_once_with_0600_and_reused(tmp_path):
    path = tmp_path / "deep" / "node.key"
    first = Identity.load_or_create(path)
    assert (path.stat().st_mode & 0o777) == 0o600
    again = Identity.load_or_create(path)
    assert again.peer_id == first.peer_id and again.peer_id.startswith("12D3KooW")
    assert Identity.load_or_create(tmp_path / "other.key").peer_id != first.peer_id


def test_sign_and_verify_from_peer_id_alone():
    me, other = Identity.generate(), Identity.generate()
    sig = me.sign(b"hello")
    assert verify(me.peer_id, b"hello", sig)
    assert not verify(me.peer_id, b"hellO", sig)
    assert not verify(other.peer_id, b"hello", sig)
    assert not verify("not-a-peer-id", b"hello", sig)
    assert not verify(me.peer_id, b"hello", sig[:-1])
    assert len(public_key_from_peer_id(me.peer_id)) == 32


def test_the_key_protobuf_written_by_hand_is_libp2ps(tmp_path):
    from hivemind.proto import crypto_pb2

    me = Identity.load_or_create(tmp_path / "k.key")
    parsed = crypto_pb2.PrivateKey.FromString((tmp_path / "k.key").read_bytes())
    assert parsed.key_type == crypto_pb2.KeyType.Ed25519 and bytes(parsed.data)[32:] == me.public_key
    public = crypto_pb2.PublicKey(key_type=crypto_pb2.KeyType.Ed25519, data=me.public_key).SerializeToString()
    assert encode_key(ED25519, me.public_key) == public and decode_key(public) == (ED25519, me.public_key)
    (tmp_path / "hivemind.key").write_bytes(parsed.SerializeToString())
    assert Identity.load(tmp_path / "hivemind.key").peer_id == me.peer_id
    with pytest.raises(ValueError):
        decode_key(public[:-1])


def test_garbage_key_file_is_a_clear_error(tmp_path):
    path = tmp_path / "bad.key"
    path.write_bytes(b"\x00garbage")
    with pytest.raises(IdentityError, match="bad.key"):
        Identity.load(path)


@pytest.mark.usefixtures("starts_processes")
def test_p2pd_uses_our_peer_id(tmp_path):
    identity = Identity.load_or_create(tmp_path / "node.key")
    cfg = load_config(
        None, ["network.nat_port_map=false", "network.auto_nat=false", "network.host_maddrs=[/ip4/127.0.0.1/tcp/0]"]
    )

    async def scenario() -> str:
        p2p = await start_p2p(cfg.network, identity)
        try:
            return str(p2p.peer_id)
        finally:
            await stop_p2p(p2p)

    assert asyncio.run(scenario()) == identity.peer_id


def test_identity_lock_is_exclusive_and_released(tmp_path):
    peer = Identity.generate().peer_id
    first = IdentityLock(peer, tmp_path)
    first.acquire()
    with pytest.raises(SwarmStartError, match=f"pid {os.getpid()}"):
        IdentityLock(peer, tmp_path).acquire()
    first.release()
    second = IdentityLock(peer, tmp_path)
    second.acquire()
    second.release()
