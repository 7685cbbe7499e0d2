"""Circuit relays (v2) in p2pd, for nodes that cannot be dialled: waiting for a reservation, and starting a
bootstrap's daemon so that the relay limits it was given are the ones in force.

p2pd starts two relays when relaying is on: one with its `-relay*` flags (`network.relay_*`) and one with
libp2p's default limits (128 KiB and 2 minutes per relayed connection: groups pass, weights do not). Which of the
two serves is a race at its start (bench/relay-cost/README.md). `start_relay_p2p` checks and restarts.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import time

from hivemind.p2p import P2P

from swarmnode.config import NetworkConfig
from swarmnode.identity import Identity
from swarmnode.swarm.hivemind_compat import p2p_class_with_daemon_flags
from swarmnode.swarm.p2p import start_p2p, stop_p2p

logger = logging.getLogger(__name__)


def ip_of(addr: str) -> str | None:
    """The IP of an /ip4 or /ip6 multiaddr (text), else None."""
    parts = addr.split("/")
    return parts[2] if len(parts) > 2 and parts[1] in ("ip4", "ip6") else None


def is_private(ip: str) -> bool:
    """Whether `ip` is not a global address (private, loopback, link-local, shared, reserved)."""
    try:
        return not ipaddress.ip_address(ip).is_global
    except ValueError:
        return False


async def wait_for_relay(p2p: P2P, timeout: float) -> str | None:
    """The relay part of our first `/p2p-circuit` address once p2pd holds a reservation; None after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            addrs = [str(a) for a in await p2p.get_visible_maddrs(latest=True)]
        except ValueError:  # a daemon that listens nowhere has no address until it holds a reservation
            addrs = []
        for addr in addrs:
            if "/p2p-circuit" in addr:
                return addr.split("/p2p-circuit")[0]
        if time.monotonic() >= deadline:
            return None
        await asyncio.sleep(0.2)


RELAY_CHECK = "swarmnode.relaycheck/1"
RELAY_CHECK_BYTES = 512 * 1024  # over p2pd's default relay limit (128 KiB per connection and direction)


async def relay_carries_data(relay_addr: str, nbytes: int = RELAY_CHECK_BYTES, timeout: float = 30.0) -> bool:
    """Whether the relay at `relay_addr` (…/p2p/<id>) carries `nbytes` over one relayed connection: two
    throwaway daemons on this machine, one holding a reservation there (and listening nowhere else), the other
    fetching `nbytes` from it through the relay. p2pd starts a relay with libp2p's default limits (128 KiB,
    2 min per connection) beside the one configured by its `-relay*` flags, and which of the two serves is a
    race at its start; this tells them apart."""
    hidden = fetcher = None
    try:
        hidden = await p2p_class_with_daemon_flags({"relayService": False, "relayDiscovery": False}).create(
            initial_peers=[relay_addr],
            host_maddrs=[],
            no_listen=True,
            nat_port_map=False,
            auto_nat=False,
            use_relay=True,
            use_auto_relay=True,
            trusted_relays=[relay_addr],
            force_reachability="private",
            check_if_identity_free=False,
        )
        if await wait_for_relay(hidden, timeout / 2) is None:
            return False

        async def serve(_info, _reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(bytes(nbytes))
            await writer.drain()
            writer.close()

        await hidden.add_binary_stream_handler(RELAY_CHECK, serve)
        fetcher = await p2p_class_with_daemon_flags({"relayService": False}).create(
            initial_peers=[relay_addr],
            host_maddrs=["/ip4/127.0.0.1/tcp/0"],
            nat_port_map=False,
            auto_nat=False,
            use_relay=True,
            check_if_identity_free=False,
        )

        async def fetch() -> int:
            _, reader, writer = await fetcher.call_binary_stream_handler(hidden.peer_id, RELAY_CHECK)
            got = 0
            while got < nbytes and (chunk := await reader.read(1 << 16)):
                got += len(chunk)
            writer.close()
            return got

        for _ in range(3):  # the fetcher may not know the relay's routing table yet: ask again
            try:
                return await asyncio.wait_for(fetch(), timeout / 4) >= nbytes  # cut short: the default limits
            except (ConnectionError, asyncio.IncompleteReadError):
                return False
            except Exception as exc:
                logger.info("relay check: %s", str(exc).splitlines()[0] if str(exc) else repr(exc))
                await asyncio.sleep(1.0)
        return False
    except Exception as exc:  # a daemon that did not start, a timeout
        logger.info("relay check: %s", str(exc).splitlines()[0] if str(exc) else repr(exc))
        return False
    finally:
        for daemon in (fetcher, hidden):
            if daemon is not None:
                await daemon.shutdown()


async def relay_limit_warning(relay_addr: str) -> str | None:
    """For a learner reached only through the relay at `relay_addr`: None when the relay carries weights (more
    than libp2p's default 128 KiB per relayed connection), else the one line that says what to change."""
    if await relay_carries_data(relay_addr):
        return None
    return (
        f"relay: {relay_addr} did not carry {RELAY_CHECK_BYTES >> 10} KiB over one relayed connection: samplers "
        "may get this learner's groups but not its versions (p2pd's default relay limits, 128 KiB and 2 min per "
        "connection); restart that bootstrap (it checks its limits at start) or forward a port to this node"
    )


RELAY_START_TRIES = 12


def _global_addr(addrs: list[str]) -> str | None:
    return next((a for a in addrs if (ip := ip_of(a)) is not None and not is_private(ip)), None)


def relays_here(net: NetworkConfig, visible: list[str]) -> bool:
    """Whether a bootstrap with these visible addresses relays: relaying on, and a public address to relay at."""
    return net.relay_service is not False and net.use_relay and _global_addr(visible) is not None


async def start_relay_p2p(net: NetworkConfig, identity: Identity) -> P2P:
    """Start the daemon of a node that relays (a bootstrap) so that its configured relay limits are the ones in
    force: checked with `relay_carries_data` and the daemon restarted (same key and addresses) until they are,
    at most `RELAY_START_TRIES` times. Only where it has a public address: libp2p uses no relay at a private one."""
    p2p = await start_p2p(net, identity, relay_service=True)
    for attempt in range(1, RELAY_START_TRIES + 1):
        addr = _global_addr([str(a) for a in await p2p.get_visible_maddrs(latest=True)])  # a port 0 moves
        if addr is None:
            logger.info("relay: no public address, so no node will reserve a relay here")
            return p2p
        if await relay_carries_data(addr):
            logger.info("relay: serving within network.relay_* limits (p2pd start %d)", attempt)
            return p2p
        if attempt == RELAY_START_TRIES:
            break
        await stop_p2p(p2p)
        p2p = await start_p2p(net, identity, relay_service=True)
    logger.warning(
        "relay: p2pd's default relay limits (128 KiB and 2 min per relayed connection) are in force "
        "after %d starts: relayed nodes exchange groups, but weight transfers to or from them fail; "
        "restart this bootstrap",
        RELAY_START_TRIES,
    )
    return p2p
