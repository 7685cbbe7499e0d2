"""The relay guard's iptables rules (swarm/relay_guard.py), made and removed in a network namespace of their own;
the NAT-lab flood is tests/bench/test_relay_flood.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid

import pytest

from swarmnode.config import NetworkConfig
from swarmnode.node.bootstrap import listening
from swarmnode.swarm import relay_guard
from swarmnode.swarm.relay_guard import Limits, RelayGuard, guard_rules, tcp_ports


def test_rules_cap_each_address_and_prefix_and_exempt_loopback():
    rules = [" ".join(r) for r in guard_rules("iptables", 31337, Limits(8, 32, 6))]
    assert rules[0] == "-N SWN-RELAY-31337" and "-s 127.0.0.0/8 -j RETURN" in rules[1]
    assert "--connlimit-above 8 --connlimit-mask 32" in rules[2]
    assert "--connlimit-above 32 --connlimit-mask 24" in rules[3]
    assert "--hashlimit-above 6/minute --hashlimit-burst 8" in rules[4]
    assert rules[-1] == "-I INPUT -p tcp --dport 31337 --syn -j SWN-RELAY-31337"
    six = " ".join(" ".join(r) for r in guard_rules("ip6tables", 1, Limits(8, 0, 0)))
    assert "--connlimit-mask 64" in six and "--connlimit-mask 48" not in six and "hashlimit" not in six


def test_listening_ports():
    net = NetworkConfig(host_maddrs=["/ip4/0.0.0.0/tcp/31337"], announce_maddrs=["/ip4/5.6.7.8/tcp/40000"])
    addrs = listening(
        net,
        [
            "/ip4/5.6.7.8/tcp/40000/p2p/X",
            "/ip4/10.0.0.2/tcp/31337/p2p/X",
            "/ip6/::1/tcp/31338/p2p/X",
            "/ip4/5.6.7.8/tcp/1/p2p/R/p2p-circuit",
        ],
    )
    assert tcp_ports(addrs) == {"iptables": {31337}, "ip6tables": {31338}}  # the announced port is the router's


NEEDS = None if os.geteuid() == 0 and shutil.which("iptables") and shutil.which("ip") else "needs root and iptables"


@pytest.mark.skipif(NEEDS is not None, reason=str(NEEDS))
@pytest.mark.usefixtures("starts_processes")
def test_install_replaces_leftovers_and_remove_takes_everything(monkeypatch):
    ns = f"{os.environ.get('SWARMNODE_LAB_PREFIX', 'tn')}g{uuid.uuid4().hex[:6]}"  # parallel labs never clash
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:

        def in_ns(tool, args):
            return subprocess.run(["ip", "netns", "exec", ns, tool, "-w", *args], capture_output=True, text=True)

        monkeypatch.setattr(relay_guard, "_run", in_ns)  # the real iptables, in the namespace made here
        net = NetworkConfig(relay_conns_per_address=3)
        RelayGuard.install(net, ["/ip4/11.1.1.1/tcp/4001"])  # a killed bootstrap's rules, left behind
        guard = RelayGuard.install(net, ["/ip4/11.1.1.1/tcp/4001"])
        listed = in_ns("iptables", ["-S"]).stdout
        assert listed.count("-j SWN-RELAY-4001") == 1 and "--connlimit-above 3 " in listed, listed
        guard.remove()
        assert "SWN-RELAY" not in in_ns("iptables", ["-S"]).stdout
        off = NetworkConfig(relay_conns_per_address=0)
        assert RelayGuard.install(off, ["/ip4/11.1.1.1/tcp/4001"]).installed == []
    finally:
        subprocess.run(["ip", "netns", "del", ns])
