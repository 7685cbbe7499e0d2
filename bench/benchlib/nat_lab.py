"""Home networks on this machine: an "internet" bridge with public hosts, and hosts behind NAT routers (one router,
or two in a row for a double NAT), each a network namespace; a host's uplink can be capped (tc tbf). A router
masquerades what leaves by its outside interface (iptables MASQUERADE) and drops new connections coming in, as a
home router does. Needs root, iproute2 and iptables; `missing_for_nat_lab()` says why not otherwise. Everything
made is removed when the `NatLab` closes, even on failure. Used by tests/bench/test_nat_lab.py and bench/relay-cost/.

    with NatLab() as lab:
        boot = lab.public("boot")
        home = lab.behind_nat("home", routers=2, mbit=5)
        subprocess.run([*lab.prefix(home), "ping", boot.ip])
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

from benchlib.netns_hosts import in_namespace, missing_for_namespaces

INTERNET = "11.232.0"  # public-looking addresses (libp2p drops private relay addresses); they exist only inside the lab
HOME = "10.233"  # router k's home network: HOME.k.0/24, the router at .1, its host at .2


@dataclass(frozen=True)
class Host:
    """A namespaced machine: its name in the lab, namespace and IPv4 address (private behind a NAT)."""

    name: str
    ns: str
    ip: str
    public: bool


def missing_for_nat_lab() -> str | None:
    """Why a NAT lab cannot be made here, or None when it can (a router is made and removed to be sure)."""
    why = missing_for_namespaces()
    if why is not None:
        return why
    if shutil.which("iptables") is None:
        return "a NAT lab needs iptables (apt-get install iptables)"
    try:
        with NatLab() as lab:
            lab.behind_nat("probe")
    except subprocess.CalledProcessError as exc:
        detail = (exc.stderr or b"").decode(errors="replace").strip() or f"exit code {exc.returncode}"
        return f"cannot make a NAT router here ({' '.join(exc.cmd)}: {detail})"
    return None


class NatLab:
    """The namespaces, links and routers of one lab; `close()` (or leaving the `with`) removes them all."""

    def __init__(self, prefix: str = "swl") -> None:
        """`prefix`: the start of every namespace and link name (labs of different prefixes never clash)."""
        self.tag = f"{prefix}{os.getpid() % 100000}"
        self.namespaces: list[str] = []
        self.links: list[str] = []
        self.hosts: dict[str, Host] = {}
        self._public = 0
        self._routers = 0
        self._sh("ip", "link", "add", self.bridge, "type", "bridge")
        self.links.append(self.bridge)
        self._sh("ip", "link", "set", self.bridge, "up")

    @property
    def bridge(self) -> str:
        return f"{self.tag}br"

    @staticmethod
    def _sh(*cmd: str) -> None:
        subprocess.run(cmd, check=True, capture_output=True)

    def _ns(self, ns: str, *cmd: str) -> None:
        self._sh(*in_namespace(ns), *cmd)

    def _namespace(self, short: str) -> str:
        ns = f"{self.tag}{short}"
        self._sh("ip", "netns", "add", ns)
        self.namespaces.append(ns)
        self._ns(ns, "ip", "link", "set", "lo", "up")
        return ns

    def _on_internet(self, ns: str, ip: str, short: str) -> None:
        veth = f"{self.tag}{short}"
        self._sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        self.links.append(veth)
        self._sh("ip", "link", "set", veth, "master", self.bridge)
        self._sh("ip", "link", "set", veth, "up")
        self._ns(ns, "ip", "addr", "add", f"{ip}/8", "dev", "eth0")  # all of 11/8 on the bridge: several prefixes
        self._ns(ns, "ip", "link", "set", "eth0", "up")

    def _cap(self, ns: str, mbit: float | None) -> None:
        if mbit:
            self._ns(
                ns,
                "tc",
                "qdisc",
                "add",
                "dev",
                "eth0",
                "root",
                "tbf",
                "rate",
                f"{mbit}mbit",
                "burst",
                "256kb",
                "latency",
                "50ms",
            )

    def public(self, name: str, mbit: float | None = None, ip: str | None = None) -> Host:
        """A host with a public address on the internet bridge (`ip`, any free address in 11.0.0.0/8, else the
        next one in INTERNET); its uplink capped at `mbit` if given."""
        self._public += 1
        ns = self._namespace(f"p{self._public}")
        ip = ip or f"{INTERNET}.{self._public + 1}"
        self._on_internet(ns, ip, f"pv{self._public}")
        self._cap(ns, mbit)
        return self._add(Host(name, ns, ip, True))

    def _router(self, outside_ns: str | None, outside_prefix: str | None) -> tuple[str, str]:
        """A NAT router whose outside is the internet (`outside_ns` None) or the home network (`outside_prefix`)
        of another router; returns (its namespace, its home network prefix)."""
        self._routers += 1
        k = self._routers
        ns = self._namespace(f"r{k}")
        if outside_ns is None:
            self._on_internet(ns, f"{INTERNET}.{100 + k}", f"rv{k}")
        else:
            self._home_link(outside_ns, ns, outside_prefix, f"r{k}")
        prefix = f"{HOME}.{k}"
        self._ns(ns, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        self._ns(ns, "iptables", "-t", "nat", "-A", "POSTROUTING", "-o", "eth0", "-j", "MASQUERADE")
        self._ns(
            ns,
            "iptables",
            "-A",
            "FORWARD",
            "-i",
            "eth0",
            "-m",
            "conntrack",
            "--ctstate",
            "ESTABLISHED,RELATED",
            "-j",
            "ACCEPT",
        )
        self._ns(ns, "iptables", "-A", "FORWARD", "-i", "eth0", "-j", "DROP")  # nothing new comes in
        return ns, prefix

    def _home_link(self, router_ns: str, inside_ns: str, prefix: str, short: str) -> None:
        """A cable from `router_ns`'s home side (`lan<k>`, at prefix.1) to `inside_ns`'s eth0 (prefix.2)."""
        lan = f"lan{short}"
        self._sh(
            "ip", "link", "add", lan, "netns", router_ns, "type", "veth", "peer", "name", "eth0", "netns", inside_ns
        )
        self._ns(router_ns, "ip", "addr", "add", f"{prefix}.1/24", "dev", lan)
        self._ns(router_ns, "ip", "link", "set", lan, "up")
        self._ns(inside_ns, "ip", "addr", "add", f"{prefix}.2/24", "dev", "eth0")
        self._ns(inside_ns, "ip", "link", "set", "eth0", "up")
        self._ns(inside_ns, "ip", "route", "add", "default", "via", f"{prefix}.1")

    def behind_nat(self, name: str, routers: int = 1, mbit: float | None = None) -> Host:
        """A host in a home network behind `routers` NAT routers in a row (2: a double NAT), its uplink capped at
        `mbit` if given; it reaches the internet, the internet cannot reach it."""
        outside, prefix = None, None
        for _ in range(routers):
            outside, prefix = self._router(outside, prefix)
        ns = self._namespace(f"h{self._routers}")
        self._home_link(outside, ns, prefix, f"h{self._routers}")
        self._cap(ns, mbit)
        return self._add(Host(name, ns, f"{prefix}.2", False))

    def _add(self, host: Host) -> Host:
        self.hosts[host.name] = host
        return host

    @staticmethod
    def prefix(host: Host) -> list[str]:
        """The command prefix that runs a program on `host`."""
        return in_namespace(host.ns)

    def close(self) -> None:
        """Remove every namespace (their interfaces and iptables rules go with them) and link made."""
        for ns in reversed(self.namespaces):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        for link in self.links:
            subprocess.run(["ip", "link", "del", link], capture_output=True)
        self.namespaces, self.links = [], []

    def __enter__(self) -> NatLab:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
