"""The reachability decision at join and what follows from it: the dial-back verdict, which addresses a helper
dials, the one line a node prints, the daemon flags for relaying, which peers are weight holders and send
targets when some cannot be dialled; the recheck after join (what one look shows, when the status changes); dial-backs
between real p2pd hosts on 127.0.0.1, and a recheck through them; `status` against a
bootstrap that refuses the connection; a node given a dead and a live bootstrap."""

from __future__ import annotations

import asyncio
import socket
import subprocess

import pytest
from google.protobuf.wrappers_pb2 import BytesValue
from hivemind.p2p import P2P
from swarm_helpers import LocalSwarm, swarmnode_cmd

from swarmnode.config import load_config
from swarmnode.errors import ExitCode
from swarmnode.identity import Identity
from swarmnode.observe.metrics import HealthCollector
from swarmnode.protocol.peer import PeerRecord
from swarmnode.protocol.reachability import CLIENT_ONLY, PUBLIC, RELAYED, UNKNOWN, by_dial_cost, reachability_of
from swarmnode.swarm.follower import send_targets, weight_holders
from swarmnode.swarm.membership import network_part
from swarmnode.swarm.p2p import relay_flags
from swarmnode.swarm.reachability import (
    DIALBACK,
    DialbackAnswer,
    DialbackService,
    Reachability,
    ask_dialback,
    decide,
    dial_candidates,
)
from swarmnode.swarm.recheck import ReachabilityWatch, Transition, observed

KW = dict(host_maddrs=["/ip4/127.0.0.1/tcp/0"], nat_port_map=False, auto_nat=False)


def answer(ok: bool, relay: bool = True) -> DialbackAnswer:
    return DialbackAnswer("helper", ok, "/ip4/1.2.3.4/tcp/5" if ok else None, "/ip4/1.2.3.4/tcp/5", relay)


def test_reachable_when_at_least_half_of_the_helpers_dialled_back():
    assert decide([]) is None
    assert decide([answer(True)]) is True and decide([answer(False)]) is False
    assert decide([answer(True), answer(False)]) is True
    assert decide([answer(True), answer(False), answer(False)]) is False


def test_a_helper_dials_the_askers_own_host_and_its_observed_address_only():
    home = dial_candidates(["/ip4/192.168.1.7/tcp/4100", "/ip4/127.0.0.1/tcp/4100"], "/ip4/84.1.2.3/tcp/51000")
    assert home == ["/ip4/84.1.2.3/tcp/4100"]  # its LAN address means nothing from outside: the router's, same port
    lan = dial_candidates(["/ip4/192.168.1.7/tcp/4100"], "/ip4/192.168.1.7/tcp/4100")
    assert lan[0] == "/ip4/192.168.1.7/tcp/4100"
    third_party = dial_candidates(
        ["/ip4/93.184.216.34/tcp/80", "/ip4/84.1.2.3/tcp/4100/p2p-circuit"], "/ip4/84.1.2.3/tcp/4100"
    )
    assert "/ip4/93.184.216.34/tcp/80" not in third_party and not any("circuit" in a for a in third_party)
    many = dial_candidates([f"/ip4/10.0.0.{i}/tcp/{4000 + i}" for i in range(20)], "/ip4/10.0.0.1/tcp/4001")
    assert len(many) == 8
    assert dial_candidates(["/ip4/10.0.0.1/tcp/1"], None) == []


def test_the_reachability_line_says_what_works_and_what_to_forward():
    public = Reachability(PUBLIC, "1 of 1 bootstraps dialled back", addr="/ip4/84.1.2.3/tcp/4100", port=4100)
    assert public.line() == "reachability: public at /ip4/84.1.2.3/tcp/4100 (1 of 1 bootstraps dialled back)"
    relayed = Reachability(
        RELAYED,
        "0 of 2 bootstraps dialled back",
        observed="/ip4/84.1.2.3/tcp/51000",
        relay="/ip4/5.6.7.8/tcp/31337/p2p/QmRelay",
        port=4100,
    )
    line = relayed.line()
    assert "not reachable" in line and "relayed through /ip4/5.6.7.8/tcp/31337/p2p/QmRelay" in line
    assert "forward TCP port 4100" in line and "--announce-maddrs /ip4/84.1.2.3/tcp/4100" in line
    alone = Reachability(CLIENT_ONLY, "0 of 1 bootstraps dialled back", port=4100).line()
    assert "no relay" in alone and "sampling works" in alone and "\n" not in alone


def test_bootstraps_relay_within_their_limits_and_unreachable_nodes_reserve_at_once():
    cfg = load_config(
        None,
        [
            "network.use_relay=true",
            "network.relay_max_reservations=7",
            "network.relay_data_limit_mb=100",
            "network.relay_time_limit_s=600",
        ],
    )
    flags, kwargs = relay_flags(cfg.network, relay_service=True, relays=None)
    assert flags == {
        "relayService": True,
        "relayMaxReservations": 7,
        "relayMaxCircuits": 16,
        "relayDataLimit": 100_000_000,
        "relayTimeLimit": "600s",
    }
    assert kwargs == {"force_reachability": "public"}
    flags, kwargs = relay_flags(cfg.network, relay_service=False, relays=["/ip4/5.6.7.8/tcp/1/p2p/QmX"])
    assert flags == {"relayService": False, "relayDiscovery": False}
    assert kwargs["use_auto_relay"] and kwargs["force_reachability"] == "private"
    off = load_config(None, ["network.use_relay=false"])
    assert relay_flags(off.network, relay_service=True, relays=["/ip4/5.6.7.8/tcp/1/p2p/QmX"]) == (
        {"relayService": False},
        {},
    )
    assert network_part(cfg.network, "bootstrap", False) == {"check_reachability": False, "relay_service": True}
    assert network_part(cfg.network, "auto", False) == {"check_reachability": True, "relay_service": False}
    assert network_part(cfg.network, "client", True)["check_reachability"] is False
    forced = load_config(None, ["network.relay_service=true"])
    assert network_part(forced.network, "sampler", False)["relay_service"] is True


def record(reach: str | None, role: str = "sampler", version: int = 3) -> PeerRecord:
    health = {} if reach is None else {"reachability": reach}
    return PeerRecord.create(Identity.generate(), role=role, version=version, health=health)


def test_peers_nobody_can_dial_are_never_holders_or_targets_and_relayed_ones_come_last():
    public, relayed, alone, old = record(PUBLIC), record(RELAYED), record(CLIENT_ONLY), record(None)
    assert reachability_of(old) == UNKNOWN and reachability_of(old.summary()) == UNKNOWN
    me = record(CLIENT_ONLY)
    holders = weight_holders([relayed, alone, public, me, old], me.peer_id)
    assert [h.peer_id for h in holders] == [public.peer_id, old.peer_id, relayed.peer_id]
    learners = [
        record(PUBLIC, "learner"),
        record(RELAYED, "learner"),
        record(CLIENT_ONLY, "learner"),
        record(PUBLIC, "learner", version=-1),
    ]
    assert send_targets(learners) == learners[:2]
    assert by_dial_cost([alone]) == []


def test_metrics_show_the_nodes_reachability_as_a_label():
    families = {
        f.name: f for f in HealthCollector(lambda: {"uptime": 1.0, "reachability": RELAYED}, "sampler").collect()
    }
    sample = families["swarmnode_reachability"].samples[0]
    assert sample.labels == {"reachability": RELAYED} and sample.value == 1.0


def test_a_look_shows_public_relayed_or_client_only_and_the_status_changes_when_two_looks_agree():
    relay = "/ip4/11.0.0.1/tcp/4001/p2p/QmRelay"
    assert observed(CLIENT_ONLY, True, None) == PUBLIC and observed(RELAYED, True, relay) == PUBLIC
    assert observed(PUBLIC, False, None) == CLIENT_ONLY and observed(PUBLIC, False, relay) == RELAYED
    assert observed(RELAYED, None, None) == CLIENT_ONLY  # the reservation lost, nobody asked
    assert observed(CLIENT_ONLY, None, relay) == RELAYED  # p2pd holds a reservation again
    assert observed(PUBLIC, None, None) == PUBLIC and observed(UNKNOWN, None, None) == UNKNOWN  # not asked: no news
    t = Transition(PUBLIC)
    assert t.observe(CLIENT_ONLY) is None and t.status == PUBLIC and t.pending == CLIENT_ONLY
    assert t.observe(PUBLIC) is None and t.pending is None  # one lost dial-back flips nothing
    assert t.observe(CLIENT_ONLY) is None and t.observe(RELAYED) is None  # two different news: still pending
    assert t.observe(RELAYED) == RELAYED and t.status == RELAYED and t.pending is None
    assert t.observe(RELAYED) is None


async def _hosts(n: int) -> list[P2P]:
    first = await P2P.create(**KW)
    rest = [await P2P.create(initial_peers=await first.get_visible_maddrs(), **KW) for _ in range(n - 1)]
    return [first, *rest]


@pytest.mark.usefixtures("starts_processes")
def test_a_bootstrap_dials_a_loopback_node_back_and_not_an_address_where_nobody_listens():
    async def main():
        boot, node = await _hosts(2)
        service = await DialbackService(boot, relay=True).start()
        try:
            own = [str(a) for a in await node.get_visible_maddrs()]
            got = await ask_dialback(node, boot.peer_id, own, timeout=30)
            assert got is not None and got.reachable and got.relay and got.addr in [a.split("/p2p/")[0] for a in own]
            stranger = await P2P.create(initial_peers=await boot.get_visible_maddrs(), **KW)
            try:  # a node the helper never reached, claiming a port nobody listens on (bound, never listening)
                with socket.socket() as closed:
                    closed.bind(("127.0.0.1", 0))
                    nobody = f"/ip4/127.0.0.1/tcp/{closed.getsockname()[1]}"
                    got = await ask_dialback(stranger, boot.peer_id, [nobody], timeout=30)
            finally:
                await stranger.shutdown()
            assert got is not None and not got.reachable and got.addr is None
            # a malformed request is answered, not a crash of the helper
            reply = await node.call_protobuf_handler(boot.peer_id, DIALBACK, BytesValue(value=b"\xff"), BytesValue)
            assert reply.value and service.answered == 3
            assert await ask_dialback(boot, node.peer_id, own, timeout=5) is None  # the node offers no check
        finally:
            await service.close()
            await node.shutdown()
            await boot.shutdown()

    asyncio.run(main())


@pytest.mark.usefixtures("starts_processes")
def test_a_node_judged_unreachable_at_join_is_public_after_two_rechecks_that_dial_it_back(caplog):
    """As when a volunteer forwards the port after joining: two dial-backs that reach it make it public, in one
    log line; then with the helper gone nobody answers and the status stays."""

    async def main():
        boot, node = await _hosts(2)
        service = await DialbackService(boot, relay=False).start()
        try:
            addr = str((await boot.get_visible_maddrs())[0])
            cfg = load_config(
                None,
                [
                    f"network.initial_peers=[{addr}]",
                    "network.reachability_recheck=0.001",
                    "network.reachability_timeout=30",
                ],
            )
            reach = Reachability(CLIENT_ONLY, "0 of 1 bootstraps dialled back", port=1)
            watch = ReachabilityWatch(node, cfg.network, reach)
            assert await watch.look() is None and reach.status == CLIENT_ONLY  # one look: pending at most
            # the second look confirms it, unless a look's dial-back was lost (the helper's probe daemon starting
            # under load): then the next two agreeing looks do; never a change without two
            for _ in range(4):
                if await watch.look() == PUBLIC:
                    break
            assert reach.status == PUBLIC and watch.changes == 1
            assert reach.how == "rechecked: 1 of 1 bootstraps dialled back"
            await service.close()
            await boot.remove_protobuf_handler(DIALBACK)
            assert await watch.look() is None and reach.status == PUBLIC  # no helper answers: no news
        finally:
            await service.close()
            await node.shutdown()
            await boot.shutdown()

    with caplog.at_level("WARNING", logger="swarmnode.swarm.recheck"):
        asyncio.run(main())
    changed = [r.getMessage() for r in caplog.records if "reachability changed" in r.getMessage()]
    assert changed == [
        "reachability changed from client-only: reachability: public (rechecked: 1 of 1 bootstraps dialled back)"
    ], changed


@pytest.mark.usefixtures("starts_processes")
def test_status_against_a_bootstrap_that_refuses_the_connection_fails_at_once(tmp_path):
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        ghost = f"/ip4/127.0.0.1/tcp/{port}/p2p/{Identity.generate().peer_id}"
        done = subprocess.run(
            swarmnode_cmd("status", "--initial-peers", ghost, "--startup-timeout", "300"),
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == ExitCode.NETWORK, done.stderr[-2000:]
    assert "refused the connection" in done.stderr and ghost in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.usefixtures("starts_processes")
def test_a_node_given_a_dead_and_a_live_bootstrap_joins_and_names_the_dead_one(tmp_path):
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        ghost = f"/ip4/127.0.0.1/tcp/{closed.getsockname()[1]}/p2p/{Identity.generate().peer_id}"
        with LocalSwarm(tmp_path) as swarm:
            swarm.bootstrap()
            node = swarm.join("sampler", initial_peers=[ghost, swarm.initial_peers])
            assert node.stderr().count(f"initial peer {ghost} unreachable") == 1
            doc = swarm.status()
            assert {p["role"]: p["reachability"] for p in doc["peers"]} == {"bootstrap": PUBLIC, "sampler": PUBLIC}
            assert doc["reachability"] == {PUBLIC: 2}


def test_a_bootstrap_named_by_dns_is_a_valid_initial_peer():
    from swarmnode.swarm.p2p import parse_initial_peer

    peer = Identity.generate().peer_id
    parsed = parse_initial_peer(f"/dns4/boot.example.org/tcp/31337/p2p/{peer}")
    assert str(parsed.addr) == "/dns4/boot.example.org/tcp/31337" and str(parsed.peer_id) == peer
