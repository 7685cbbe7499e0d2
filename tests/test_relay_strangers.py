"""The relay guard's cap on unknown addresses (swarm/relay_guard.py, swarm/relay_known.py): which keys and
addresses a relaying bootstrap knows, and the real iptables rules in a network namespace of their own, with real
TCP connections from many /24s: the connections of unknown addresses together stop at the cap, while a known
address still connects, and stops being exempt once it is forgotten."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid

import pytest

from swarmnode.config import NetworkConfig
from swarmnode.swarm import relay_guard
from swarmnode.swarm.relay_guard import Limits, RelayGuard, guard_rules
from swarmnode.swarm.relay_known import KnownAddresses, KnownPeers

LAB_PREFIX = os.environ.get("SWARMNODE_LAB_PREFIX", "tn")  # namespaces of parallel labs never clash


def test_rules_send_every_address_through_the_known_chain_to_one_shared_cap():
    rules = [" ".join(r) for r in guard_rules("iptables", 4001, Limits(8, 32, 6, strangers=40))]
    assert "-N SWN-KNOWN-4001" in rules
    assert (
        "-A SWN-KNOWN-4001 -p tcp -m connlimit --connlimit-above 40 --connlimit-mask 0 -j REJECT "
        "--reject-with tcp-reset" in rules
    )
    # after the per-address, per-prefix and rate caps (known addresses keep those), before the INPUT jump
    assert rules.index("-A SWN-RELAY-4001 -j SWN-KNOWN-4001") == len(rules) - 2
    assert not any("KNOWN" in r for r in (" ".join(x) for x in guard_rules("iptables", 1, Limits(8, 32, 6))))


def test_keys_are_known_after_their_records_age_and_addresses_while_they_connect():
    peers = KnownPeers(after=600, always=frozenset({"learner"}))
    peers.observe(["old", "flood"], now=0)
    peers.observe(["old"], now=500)
    peers.observe(["old", "flood", "new"], now=700)
    assert peers.known(now=700) == {"learner", "old", "flood"}  # a record seen 10 minutes ago
    peers.observe(["new"], now=700 + 4 * 600 + 1)  # "flood" vanished for 4x the age: it starts over
    assert "flood" not in peers.seen and peers.known(now=700 + 4 * 600 + 1) == {"learner", "new"}

    addresses = KnownAddresses(ttl=3600)
    conns = [
        ("old", ["/ip4/11.1.1.1/tcp/5"]),
        ("flood", ["/ip4/11.2.2.2/tcp/5"]),
        ("learner", ["/ip4/11.3.3.3/tcp/1/p2p/R/p2p-circuit", "/ip6/2001:db8::1/tcp/5"]),
    ]
    assert addresses.observe(conns, {"old", "learner"}, now=0) == {"11.1.1.1", "2001:db8::1"}  # relayed: no address
    assert addresses.observe([], {"old"}, now=3000) == {"11.1.1.1", "2001:db8::1"}  # a reconnect stays known
    assert addresses.observe([], {"old"}, now=3601) == set()


NEEDS = None if os.geteuid() == 0 and shutil.which("iptables") and shutil.which("ip") else "needs root and iptables"
SERVER = "11.9.0.100"
PORT = 4001
CONNECT = """
import socket, sys
s = socket.socket()
s.settimeout(5)
s.bind((sys.argv[1], 0))
try:
    s.connect((sys.argv[2], int(sys.argv[3])))
except OSError as exc:
    print(type(exc).__name__)
    sys.exit(1)
print("connected", flush=True)
sys.stdin.read()  # held until the test closes stdin
"""


@pytest.mark.skipif(NEEDS is not None, reason=str(NEEDS))
@pytest.mark.usefixtures("starts_processes")
def test_unknown_addresses_share_one_cap_and_known_ones_pass_it(monkeypatch):
    ns = f"{LAB_PREFIX}k{uuid.uuid4().hex[:6]}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    held: list[subprocess.Popen] = []

    def in_ns(*args: str, **kw):
        return subprocess.run(["ip", "netns", "exec", ns, *args], capture_output=True, text=True, **kw)

    def connect(src: str) -> bool:
        """A connection from `src` to the guarded port, held open if it got through."""
        proc = subprocess.Popen(
            ["ip", "netns", "exec", ns, sys.executable, "-c", CONNECT, src, SERVER, str(PORT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        line = proc.stdout.readline().strip()
        if line == "connected":
            held.append(proc)
            return True
        proc.wait(30)
        assert line in ("ConnectionRefusedError", "ConnectionResetError"), line
        return False

    try:
        in_ns("ip", "link", "set", "lo", "up", check=True)
        sources = [f"11.9.{k}.1" for k in range(1, 8)]  # each in its own /24: the per-prefix cap never bites
        for ip in [SERVER, *sources]:
            in_ns("ip", "addr", "add", f"{ip}/32", "dev", "lo", check=True)
        server = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                ns,
                sys.executable,
                "-c",
                f"import socket,time;s=socket.socket();s.bind(('{SERVER}',{PORT}));s.listen(64);"
                "print('up',flush=True);time.sleep(600)",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        held.append(server)
        assert server.stdout.readline().strip() == "up"
        monkeypatch.setattr(relay_guard, "_run", lambda tool, args: in_ns(tool, "-w", *args))
        net = NetworkConfig(relay_conns_per_address=8, relay_new_conns_per_minute=0, relay_stranger_conns=3)
        guard = RelayGuard.install(net, [f"/ip4/{SERVER}/tcp/{PORT}"])
        try:
            assert guard.strangers == 3
            assert [connect(ip) for ip in sources[:4]] == [True, True, True, False]  # 3 strangers in all
            guard.set_known({sources[4], sources[5]})
            assert connect(sources[4]) and connect(sources[5])  # known: past the cap
            assert not connect(sources[6])  # strangers still share 3
            guard.set_known({sources[5]})  # sources[4] forgotten: it is a stranger again
            assert not connect(sources[4]) and connect(sources[5])
            listed = in_ns("iptables", "-S", "SWN-KNOWN-4001").stdout
            assert listed.count("-j RETURN") == 1 and f"-s {sources[5]}/32" in listed, listed
        finally:
            guard.remove()
        assert "SWN-" not in in_ns("iptables", "-S").stdout
    finally:
        for proc in held:
            if proc.stdin:
                proc.stdin.close()
            proc.kill()
            proc.wait(10)
        subprocess.run(["ip", "netns", "del", ns])


class Guard:
    """What `keep_known` gives a RelayGuard: the known addresses, each time (the iptables side is tested above)."""

    def __init__(self) -> None:
        self.given: list[set[str]] = []

    def set_known(self, addresses: set[str]) -> None:
        self.given.append(set(addresses))


@pytest.mark.usefixtures("starts_processes")
def test_a_bootstrap_knows_the_addresses_of_keys_in_the_run_and_the_designated_learners():
    """A real DHT: a bootstrap and a member that stored its record; the member's loopback address becomes known
    once its record aged (here at once), never while it is too young, and at once for a designated learner."""
    import asyncio

    from swarm_helpers import FAST_NET, LOOPBACK

    from swarmnode.config import load_config
    from swarmnode.identity import Identity
    from swarmnode.protocol.peer import PeerRecord
    from swarmnode.swarm.dht import SwarmDHT
    from swarmnode.swarm.relay_known import keep_known

    async def scenario() -> dict[str, list[set[str]]]:
        run = f"t-known-{uuid.uuid4().hex[:6]}"
        boot_cfg = load_config(None, [*FAST_NET, f"run_id={run}", f"network.host_maddrs=[{LOOPBACK}]"])
        boot = await SwarmDHT.create(boot_cfg, Identity.generate())
        addr = str((await boot.p2p.get_visible_maddrs())[0])  # with its /p2p/ id
        me = Identity.generate()
        member_cfg = load_config(
            None,
            [
                *FAST_NET,
                f"run_id={run}",
                f"network.host_maddrs=[{LOOPBACK}]",
                "network.missed_beats_to_expire=100",  # its record lives 100 s
                f"network.initial_peers=[{addr}]",
            ],
        )
        member = await SwarmDHT.create(member_cfg, me)
        out: dict[str, list[set[str]]] = {}
        try:
            for name, keys, after in (("young", [], 3600.0), ("aged", [], 0.0), ("designated", [me.peer_id], 3600.0)):
                assert await member.store_peer(PeerRecord.create(me, role="sampler", version=0))  # a heartbeat
                guard, stop = Guard(), asyncio.Event()
                task = asyncio.create_task(keep_known(guard, boot, keys, after, stop, every=0.2))
                for _ in range(100):
                    if guard.given and (name == "young" and len(guard.given) >= 3 or guard.given[-1]):
                        break
                    await asyncio.sleep(0.2)
                stop.set()
                await task
                out[name] = guard.given
        finally:
            await member.shutdown()
            await boot.shutdown()
        return out

    given = asyncio.run(scenario())
    assert given["young"] and all(not g for g in given["young"]), given  # a record seen now is not known yet
    assert given["aged"][-1] == {"127.0.0.1"}, given
    assert given["designated"][-1] == {"127.0.0.1"}, given
