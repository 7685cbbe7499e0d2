"""Reachability at join: can other peers dial this node? Asked of the bootstraps, bounded in time, decided before
the node announces `ready`, and acted on with what p2pd already has.

The check is a dial-back, as Petals does it: the joining node asks each initial peer it reached (over the
connection it opened) to dial it back; the helper dials, from a separate listen-less p2pd with a throwaway key,
the addresses the node listens on and its observed address with the same ports, and answers whether one
connected. Reachable when at least half of the helpers that answered got through. (p2pd's AutoNAT stays on
where configured, but its answer is not exposed to the daemon's client, arrives after a 15 s boot delay, and
AutoNAT servers refuse to dial private addresses, so a LAN swarm would never be confirmed.)

What follows the decision:
- public: the node goes on as before (a DHT server);
- not reachable, and a helper offers a relay: p2pd restarts with a circuit-relay v2 reservation on those helpers
  (`-autoRelay` with them as static relays, reachability forced private so it reserves at once); once its
  address list holds a `/p2p-circuit` address it is `relayed`;
- otherwise `client-only`.
Unreachable nodes join the DHT as clients. `Reachability.line()` is the one line the node prints.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from google.protobuf.wrappers_pb2 import BytesValue
from hivemind.p2p import P2P, P2PContext, PeerID
from hivemind.utils.multiaddr import Multiaddr

from swarmnode.config import NetworkConfig
from swarmnode.identity import Identity
from swarmnode.protocol.codec import InvalidRecord, pack, unpack
from swarmnode.protocol.reachability import CLIENT_ONLY, PUBLIC, RELAYED, UNKNOWN
from swarmnode.swarm.hivemind_compat import connect, disconnect, p2p_class_with_daemon_flags
from swarmnode.swarm.p2p import arm_watchdog, parse_initial_peer, start_p2p, stop_p2p
from swarmnode.swarm.relay import ip_of, is_private, wait_for_relay

logger = logging.getLogger(__name__)

DIALBACK = "swarmnode.dialback/1"  # one per host, whatever the run: a bootstrap may serve several runs
MAX_DIALS = 8  # addresses a helper dials for one request
MAX_REQUEST_BYTES = 4096
DIAL_TIMEOUT_S = 4.0


@dataclass(frozen=True)
class DialbackAnswer:
    """One helper's answer: whether it dialled us back (and at which address), what it saw us as, whether it
    relays."""

    helper: str
    reachable: bool
    addr: str | None = None
    observed: str | None = None
    relay: bool = False


@dataclass
class Reachability:
    """This node's reachability and how it was decided."""

    status: str  # PUBLIC, RELAYED, CLIENT_ONLY or UNKNOWN (not checked: treated as public)
    how: str  # e.g. "1 of 1 bootstraps dialled back", "network.reachability=public"
    addr: str | None = None  # the address a helper reached us at (public)
    observed: str | None = None  # the address helpers saw our connection come from
    relay: str | None = None  # the relay's address (relayed)
    port: int | None = None  # the TCP port this node listens on (for the advice)
    relays_offered: list[str] = field(default_factory=list)

    def line(self) -> str:
        """The one line `join` prints before `ready`."""
        if self.status == PUBLIC:
            where = f" at {self.addr}" if self.addr else ""
            return f"reachability: public{where} ({self.how})"
        if self.status == UNKNOWN:
            return f"reachability: unknown ({self.how}); this node assumes others can dial it"
        seen = f", seen as {self.observed}" if self.observed else ""
        if self.status == RELAYED:
            return (
                f"reachability: not reachable ({self.how}{seen}); relayed through {self.relay}: sampling and "
                f"training work, relayed traffic is slower; {self.advice()}"
            )
        return (
            f"reachability: not reachable and no relay ({self.how}{seen}): this node joins as a client; "
            f"sampling works, a learner needs a relaying bootstrap or {self.advice()}"
        )

    def advice(self) -> str:
        port = self.port or "<port>"
        ip = self.observed.split("/")[2] if self.observed and self.observed.startswith("/ip") else "<public ip>"
        return (
            f"to be dialled directly, forward TCP port {port} on your router to this machine and pass "
            f"--announce-maddrs /ip4/{ip}/tcp/{port}"
        )


def decide(answers: list[DialbackAnswer]) -> bool | None:
    """Reachable if at least half of the helpers that answered dialled us back; None when none answered."""
    if not answers:
        return None
    return 2 * sum(a.reachable for a in answers) >= len(answers)


def dial_candidates(listen: list[str], observed: str | None) -> list[str]:
    """The addresses a helper dials back (at most `MAX_DIALS`): the asker's own listen addresses, kept only where
    their host is the one its connection came from or both are private (a LAN or this machine: a helper is never
    made to dial a third party's public address), then its observed address with each listen port (a forwarded
    port). Circuit addresses are not dial-backs and are left out."""
    out: list[str] = []
    seen_ip = ip_of(observed) if observed else None
    ports = []
    for addr in listen:
        if "p2p-circuit" in addr or "/tcp/" not in addr:
            continue
        ip = ip_of(addr)
        port = addr.split("/tcp/")[1].split("/")[0]
        if port not in ports:
            ports.append(port)
        if ip is not None and seen_ip is not None and (ip == seen_ip or (is_private(ip) and is_private(seen_ip))):
            out.append(addr.split("/p2p/")[0])
    if seen_ip is not None:
        kind = "ip6" if ":" in seen_ip else "ip4"
        out += [f"/{kind}/{seen_ip}/tcp/{port}" for port in ports]
    return list(dict.fromkeys(out))[:MAX_DIALS]


def _parsed(addrs: list[str]) -> list[Multiaddr]:
    out = []
    for addr in addrs:
        try:
            out.append(Multiaddr(addr))
        except Exception:  # not a multiaddr: nothing to dial there
            continue
    return out


class DialbackService:
    """Answers other nodes' dial-back requests (bootstraps and other public nodes). Its probe daemon starts on the
    first request; `close()` stops it."""

    def __init__(self, p2p: P2P, relay: bool, dial_timeout: float = DIAL_TIMEOUT_S):
        self.p2p, self.relay, self.dial_timeout = p2p, relay, dial_timeout
        self._probe: P2P | None = None
        self._probe_lock = asyncio.Lock()
        self._busy = asyncio.Semaphore(4)
        self.answered = 0

    async def start(self) -> DialbackService:
        await self.p2p.add_protobuf_handler(DIALBACK, self._handle, BytesValue)
        return self

    async def _probe_p2p(self) -> P2P:
        async with self._probe_lock:
            if self._probe is None:
                # no DHT: it dials the given addresses only, never ones a DHT lookup would find
                probe = p2p_class_with_daemon_flags({"dhtClient": False})
                self._probe = await probe.create(
                    host_maddrs=[],
                    no_listen=True,
                    nat_port_map=False,
                    auto_nat=False,
                    use_relay=False,
                    dht_mode="client",
                    idle_timeout=0,
                )
                arm_watchdog(self._probe)
            return self._probe

    async def _observed(self, peer: PeerID) -> str | None:
        for info in await self.p2p.list_peers():
            if info.peer_id == peer:
                direct = [str(a) for a in info.addrs if "p2p-circuit" not in str(a)]
                if direct:
                    return direct[0]
        return None

    async def _handle(self, request: BytesValue, context: P2PContext) -> BytesValue:
        asker = context.remote_id
        try:
            body = unpack(request.value, MAX_REQUEST_BYTES)
            listen = [a for a in body.get("addrs", []) if isinstance(a, str) and len(a) < 256][:MAX_DIALS]
        except (InvalidRecord, AttributeError):
            listen = []
        observed = await self._observed(asker)
        reached = None
        candidates = _parsed(dial_candidates(listen, observed))
        async with self._busy:
            if candidates:
                probe = await self._probe_p2p()
                try:  # all at once (p2pd dials a peer's addresses in parallel): a router that drops costs one wait
                    await asyncio.wait_for(connect(probe, asker, candidates), self.dial_timeout)
                    reached = next(
                        (
                            str(info.addrs[0])
                            for info in await probe.list_peers()
                            if info.peer_id == asker and info.addrs
                        ),
                        str(candidates[0]),
                    )  # the one that answered
                except Exception:  # refused, unreachable, timed out, or another peer answered there
                    pass
                finally:
                    try:
                        await disconnect(probe, asker)
                    except Exception:
                        pass
        self.answered += 1
        return BytesValue(
            value=pack({"reachable": reached is not None, "addr": reached, "observed": observed, "relay": self.relay})
        )

    async def close(self) -> None:
        if self._probe is not None:
            await stop_p2p(self._probe)
            self._probe = None


async def ask_dialback(p2p: P2P, helper: PeerID, listen: list[str], timeout: float) -> DialbackAnswer | None:
    """Ask `helper` to dial us back; its answer, or None if it does not offer the check or did not answer."""
    try:
        reply = await asyncio.wait_for(
            p2p.call_protobuf_handler(helper, DIALBACK, BytesValue(value=pack({"addrs": listen})), BytesValue), timeout
        )
        body = unpack(reply.value, MAX_REQUEST_BYTES)
    except Exception as exc:  # an older helper without the handler, a timeout, a malformed answer
        logger.info("dial-back check by %s failed: %s", helper, str(exc).splitlines()[0] if str(exc) else exc)
        return None
    text = lambda v: v if isinstance(v, str) else None  # noqa: E731
    return DialbackAnswer(
        str(helper),
        bool(body.get("reachable")),
        text(body.get("addr")),
        text(body.get("observed")),
        bool(body.get("relay")),
    )


def _listen_port(addrs: list[str]) -> int | None:
    for addr in addrs:
        if "/tcp/" in addr and "p2p-circuit" not in addr and not addr.startswith("/ip4/127."):
            return int(addr.split("/tcp/")[1].split("/")[0])
    return None


async def helpers_reached(p2p: P2P, net: NetworkConfig) -> list[tuple[PeerID, str]]:
    """The initial peers this daemon is connected to: (peer id, the `--initial-peers` text)."""
    connected = {str(info.peer_id) for info in await p2p.list_peers()}
    peers = [parse_initial_peer(text) for text in net.initial_peers]
    return [(p.peer_id, p.text) for p in peers if str(p.peer_id) in connected]


async def ask_helpers(
    p2p: P2P, net: NetworkConfig, helpers: list[tuple[PeerID, str]] | None = None
) -> list[tuple[str, DialbackAnswer]]:
    """Ask every initial peer this daemon is connected to (or `helpers`) to dial it back, all at once, bounded by
    `network.reachability_timeout`: (its `--initial-peers` text, its answer) for each that answered."""
    own = [str(a) for a in await p2p.get_visible_maddrs(latest=True)]
    helpers = await helpers_reached(p2p, net) if helpers is None else helpers
    found = await asyncio.gather(*(ask_dialback(p2p, peer, own, net.reachability_timeout) for peer, _ in helpers))
    return [(text, a) for (_, text), a in zip(helpers, found) if a is not None]


def how_many(answers: list[DialbackAnswer]) -> str:
    """E.g. "1 of 2 bootstraps dialled back"."""
    return f"{sum(a.reachable for a in answers)} of {len(answers)} bootstraps dialled back"


async def check(p2p: P2P, net: NetworkConfig) -> tuple[Reachability, list[str]]:
    """Decide whether others can dial this daemon (see the module docstring); and the helpers that relay."""
    port = _listen_port([str(a) for a in await p2p.get_visible_maddrs(latest=True)])
    helpers = await helpers_reached(p2p, net)
    if net.reachability != "auto":
        status = PUBLIC if net.reachability == "public" else CLIENT_ONLY
        return Reachability(status, f"network.reachability={net.reachability}", port=port), [t for _, t in helpers]
    answered = await ask_helpers(p2p, net, helpers)
    answers = [a for _, a in answered]
    relays = [text for text, a in answered if a.relay]
    verdict = decide(answers)
    observed = next((a.observed for a in answers if a.observed), None)
    if verdict is None:
        how = "no initial peer could check" if helpers else "no initial peers to ask"
        return Reachability(UNKNOWN, how, port=port), relays
    how = how_many(answers)
    addr = next((a.addr for a in answers if a.addr), None)
    return Reachability(
        PUBLIC if verdict else CLIENT_ONLY, how, addr=addr, observed=observed, port=port, relays_offered=relays
    ), relays


async def start_checked_p2p(net: NetworkConfig, identity: Identity, *, relay_service: bool) -> tuple[P2P, Reachability]:
    """Start p2pd, decide reachability, and for a node that cannot be dialled restart it with a relay reservation
    where a helper offers one (see the module docstring). Bounded: `reachability_timeout` for the check,
    `relay_wait` for the reservation."""
    p2p = await start_p2p(net, identity, relay_service=relay_service)
    try:
        reach, relays = await check(p2p, net)
    except BaseException:
        await stop_p2p(p2p)
        raise
    if reach.status in (PUBLIC, UNKNOWN):
        return p2p, reach
    if not net.use_relay or not relays:
        reach.how += (
            "; relaying is off here (network.use_relay=false)" if not net.use_relay else "; no bootstrap offers a relay"
        )
        return p2p, reach
    await stop_p2p(p2p)
    p2p = await start_p2p(net, identity, relays=relays)
    try:
        relay = await wait_for_relay(p2p, net.relay_wait)
    except BaseException:
        await stop_p2p(p2p)
        raise
    if relay is None:
        reach.how += f"; no relay reservation within {net.relay_wait:.0f} s"
    else:
        reach.status, reach.relay = RELAYED, relay
    return p2p, reach
