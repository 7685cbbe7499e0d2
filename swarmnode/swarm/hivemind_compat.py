"""Every use of a private internal of hivemind, its p2pd client or asyncio, in one place.

hivemind's `P2P` has no public way to reach its daemon process (to stop or watch it), its unix sockets (to
remove them after a crash), or its daemon client (to dial one peer at an address and see why it failed), and
asyncio's `StreamReader` none to tell whether it still holds unread bytes (before `FrameSink` takes over a
stream's transport). These accessors use the private attributes of the pinned versions; importing this module
refuses any other hivemind version with one clear line, and tests/test_hivemind_compat.py exercises every
accessor against the installed hivemind, so an upgrade that renames an internal fails there first.
Nothing else in swarmnode touches `_`-prefixed attributes of another library's objects or attaches its own.
"""

from __future__ import annotations

import asyncio
from typing import Iterable

import hivemind
from hivemind.dht.storage import DictionaryDHTValue
from hivemind.p2p import P2P, PeerID
from hivemind.utils.multiaddr import Multiaddr

from swarmnode.errors import ExitCode, SwarmnodeError

PINNED_HIVEMIND = "1.1.12"


class HivemindVersionError(SwarmnodeError, ImportError):
    """The installed hivemind is not the version whose internals this module was written against."""

    exit_code = ExitCode.MISSING


def check_hivemind_version(installed: str = hivemind.__version__) -> None:
    """Raise HivemindVersionError unless `installed` is the pinned hivemind version."""
    if installed != PINNED_HIVEMIND:
        raise HivemindVersionError(
            f"swarmnode needs hivemind=={PINNED_HIVEMIND} (it relies on a few of its internals, see "
            f"swarmnode/swarm/hivemind_compat.py), but hivemind {installed} is installed: "
            f"pip install hivemind=={PINNED_HIVEMIND}")


check_hivemind_version()


def p2pd_process(p2p: P2P) -> asyncio.subprocess.Process | None:
    """The p2pd daemon process `p2p` started (None for a P2P attached to a daemon it does not own)."""
    return p2p._child


def daemon_socket_paths(p2p: P2P) -> list[str]:
    """The unix socket paths of `p2p`'s daemon and of its client (the files a crashed daemon leaves behind)."""
    paths = []
    for maddr in (p2p._daemon_listen_maddr, p2p._client_listen_maddr):
        try:
            paths.append(maddr["unix"])
        except Exception:  # not a unix socket address
            continue
    return paths


async def connect(p2p: P2P, peer_id: PeerID, addrs: Iterable[Multiaddr]) -> None:
    """Dial `peer_id` at `addrs` through the daemon; raises the daemon's error (its text says why) on failure."""
    await p2p._client.connect(peer_id, list(addrs))


async def ping_into_routing_table(node, peer_id: PeerID) -> bool:
    """Ask a DHT peer for its node id and (if it answers) put it back in `node`'s routing table (a hivemind
    DHTNode's protocol does both in `call_ping`)."""
    return await node.protocol.call_ping(peer_id) is not None


def use_local_storage(node, storage) -> None:
    """Make `storage` (a `DHTLocalStorage`, e.g. `CappedStorage`) the local storage of a hivemind `DHTNode`: what
    it keeps for others and for itself (hivemind takes no storage argument; its protocol holds the object).
    Records already stored move over."""
    for key, item in node.protocol.storage.items():
        if isinstance(item.value, DictionaryDHTValue):
            for subkey, sub in item.value.items():
                storage.store_subkey(key, subkey, sub.value, sub.expiration_time)
        else:
            storage.store(key, item.value, item.expiration_time)
    node.protocol.storage = storage


def has_buffered_bytes(reader: asyncio.StreamReader) -> bool:
    """Whether `reader` holds bytes it received that nobody has read yet."""
    return bool(reader._buffer)
