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
from hivemind.p2p import P2P, PeerID
from hivemind.utils.multiaddr import Multiaddr

import swarmnode
from swarmnode.identity import Identity
from swarmnode.swarm.p2p import SOCKET_GLOB
from swarmnode.swarm.hivemind_compat import (PINNED_HIVEMIND, HivemindVersionError, check_hivemind_version, connect,
                                             daemon_socket_paths, has_buffered_bytes, p2pd_process)

KW = dict(host_maddrs=["/ip4/127.0.0.1/tcp/0"], nat_port_map=False, auto_nat=False)


def test_other_hivemind_versions_are_refused_with_one_line():
    check_hivemind_version()  # the installed one is the pinned one
    with pytest.raises(HivemindVersionError, match=rf"needs hivemind=={re.escape(PINNED_HIVEMIND)}.*1\.2\.0 is"):
        check_hivemind_version("1.2.0")


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


def test_no_other_module_touches_these_internals():
    root = Path(swarmnode.__file__).parent
    pattern = re.compile(r"\._(child|client|buffer|daemon_listen_maddr|client_listen_maddr|swarmnode_\w+)\b")
    offenders = [f"{path.relative_to(root)}:{n}" for path in root.rglob("*.py") if path.name != "hivemind_compat.py"
                 for n, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]
    assert offenders == []
