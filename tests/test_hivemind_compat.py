"""The private internals swarmnode uses, exercised against the installed hivemind and asyncio (real p2pd)."""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import os
import re
import stat
from pathlib import Path

import pytest
from hivemind.dht.node import DHTNode
from hivemind.dht.routing import DHTID
from hivemind.p2p import P2P, PeerID
from hivemind.utils import get_dht_time
from hivemind.utils.multiaddr import Multiaddr

import swarmnode
from swarmnode.identity import Identity
from swarmnode.swarm.dht_storage import CappedStorage
from swarmnode.swarm.hivemind_compat import (
    PINNED_HIVEMIND,
    HivemindVersionError,
    check_hivemind_version,
    connect,
    daemon_listen_maddr,
    daemon_socket_paths,
    has_buffered_bytes,
    p2pd_process,
    use_local_storage,
)
from swarmnode.swarm.p2p import SOCKET_GLOB

KW = dict(host_maddrs=["/ip4/127.0.0.1/tcp/0"], nat_port_map=False, auto_nat=False)


def test_other_hivemind_versions_are_refused_with_one_line():
    check_hivemind_version()  # the installed one is the pinned one
    with pytest.raises(HivemindVersionError, match=rf"needs hivemind=={re.escape(PINNED_HIVEMIND)}.*1\.2\.0 is"):
        check_hivemind_version("1.2.0")


@pytest.mark.usefixtures("starts_processes")
def test_accessors_against_real_daemons():
    async def scenario():
        a = await P2P.create(**KW)
        b = await P2P.create(**KW)
        try:
            process = p2pd_process(a)
            assert process is not None and process.returncode is None
            assert "p2pd" in Path(f"/proc/{process.pid}/cmdline").read_text(errors="replace")
            paths = daemon_socket_paths(a)
            assert len(paths) == 2 and all(fnmatch.fnmatch(p, SOCKET_GLOB) for p in paths)  # daemon's, client's
            assert stat.S_ISSOCK(os.stat(paths[0]).st_mode)  # the client's exists once a handler is added
            addrs = [m.decapsulate(Multiaddr(f"/p2p/{a.peer_id}")) for m in await a.get_visible_maddrs()]
            await connect(b, a.peer_id, addrs)
            assert a.peer_id in {info.peer_id for info in await b.list_peers()}
            stranger = PeerID.from_base58(Identity.generate().peer_id)
            with pytest.raises(Exception):  # noqa: B017 (the daemon's ControlFailure: a peer id mismatch)
                await asyncio.wait_for(connect(b, stranger, addrs), 30)
        finally:
            for p in (a, b):
                with contextlib.suppress(Exception):
                    await p.shutdown()
        assert p2pd_process(a).returncode is not None  # the daemon we found is the one shutdown stopped

    asyncio.run(scenario())


def test_stream_reader_buffer_accessor():
    async def scenario():
        reader = asyncio.StreamReader()
        assert not has_buffered_bytes(reader)
        reader.feed_data(b"abc")
        assert has_buffered_bytes(reader)
        assert await reader.readexactly(3) == b"abc"
        assert not has_buffered_bytes(reader)

    asyncio.run(scenario())


@pytest.mark.usefixtures("starts_processes")
def test_a_dht_node_stores_into_the_storage_it_is_given():
    async def scenario():
        p2p = await P2P.create(**KW)
        node = await DHTNode.create(p2p=p2p, client_mode=False)
        try:
            now = get_dht_time()
            assert await node.store("k", b"held before", now + 60, subkey="a")
            use_local_storage(node, CappedStorage(max_subkeys=2))
            assert node.protocol.storage.get(DHTID.generate(source="k")) is not None  # moved over
            assert await node.store("k", b"second", now + 60, subkey="b")
            assert not await node.store("k", b"third", now + 60, subkey="c")  # refused by the cap: stored nowhere
            found = await node.get("k", latest=True)
            assert set(found.value) == {"a", "b"}
        finally:
            await node.shutdown()
            await p2p.shutdown()

    asyncio.run(scenario())


@pytest.mark.usefixtures("starts_processes")
def test_a_second_client_of_the_same_daemon():
    async def scenario():  # what the in-thread averager (ThreadedAverager, exercised in test_averaging) opens
        p2p = await P2P.create(**KW)
        try:
            replica = await P2P.replicate(daemon_listen_maddr(p2p))
            assert replica.peer_id == p2p.peer_id
            await replica.shutdown()
            assert p2pd_process(p2p).returncode is None  # the node's daemon lives on
        finally:
            await p2p.shutdown()

    asyncio.run(scenario())


def test_no_other_module_touches_these_internals():
    root = Path(swarmnode.__file__).parent
    pattern = re.compile(r"\._(child|client|buffer|daemon_listen_maddr|client_listen_maddr|swarmnode_\w+)\b")
    offenders = [
        f"{path.relative_to(root)}:{n}"
        for path in root.rglob("*.py")
        if path.name != "hivemind_compat.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert offenders == []


@pytest.mark.usefixtures("starts_processes")
def test_a_daemon_gets_the_extra_flags_and_they_replace_create_s_own():
    from swarmnode.swarm.hivemind_compat import disconnect, p2p_class_with_daemon_flags, p2pd_process

    async def main():
        flagged = await p2p_class_with_daemon_flags(
            {"relayService": False, "relayDataLimit": 12345, "natPortMap": True}
        ).create(**KW)
        other = await P2P.create(initial_peers=await flagged.get_visible_maddrs(), **KW)
        try:
            args = Path(f"/proc/{p2pd_process(flagged).pid}/cmdline").read_text().split("\0")
            assert "-relayService=0" in args and "-relayDataLimit=12345" in args
            assert "-natPortMap=1" in args and "-natPortMap=0" not in args
            assert isinstance(flagged, P2P)
            assert other.peer_id in {i.peer_id for i in await flagged.list_peers()}
            await disconnect(flagged, other.peer_id)  # (the other side may dial again at once: no assertion)
        finally:
            await other.shutdown()
            await flagged.shutdown()

    asyncio.run(main())
