"""Per-address and per-prefix limits in front of a bootstrap's relay, enforced by the kernel (iptables).

p2pd 1.1.12's relay (go-libp2p circuit v2) refuses a reservation over its total (`network.relay_max_reservations`),
but sets its per-IP, per-ASN and per-peer limits to that same total, and exposes no way to change them: one
address with many throwaway keys could take every reservation and leave the honest nodes behind NAT unrelayed.
Every reservation needs a connection to the relay, so a bootstrap that relays from a public address caps what
reaches its listening TCP ports before p2pd sees it:
- at most `network.relay_conns_per_address` open connections per IPv4 address (IPv6: per /64),
- at most `network.relay_conns_per_prefix` per IPv4 /24 (IPv6: per /48),
- at most `network.relay_new_conns_per_minute` new connections per minute per address, after a burst of
  `relay_conns_per_address` (p2pd counts each reservation it granted against its total for 30 minutes, even
  after its holder left, so an address that reconnects with new keys must be slowed too).
A refused connection is reset at once (the dialler sees "connection refused"). Loopback is exempt. A key holds at
most one reservation (the protocol) and `network.relay_max_circuits` relayed connections.

Against an attacker with addresses in many prefixes, `network.relay_stranger_conns` (0: off) caps the open
connections of every address the bootstrap does not know, all together (`relay_known`: addresses the run's
established keys connect from are known, kept in a chain of their own, `SWN-KNOWN-<port>`, updated as the run
changes): with it under `relay_max_reservations`, the rest of the reservations stay for known addresses.

The rules live in a chain of their own per port (`SWN-RELAY-<port>`, jumped to from INPUT), are replaced when a
bootstrap starts on that port again (a killed bootstrap's leftovers), and are removed when it stops. They need
root and iptables (ip6tables for IPv6 ports); without them the bootstrap says so in one line and relays unguarded.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from dataclasses import dataclass, field

from swarmnode.config import NetworkConfig

logger = logging.getLogger(__name__)

MASKS = {"iptables": (32, 24), "ip6tables": (64, 48)}  # (address, prefix) mask bits
LOOPBACK = {"iptables": "127.0.0.0/8", "ip6tables": "::1/128"}


@dataclass(frozen=True)
class Limits:
    """The caps of one guard (0 in `per_address`: no guard)."""

    per_address: int
    per_prefix: int
    new_per_minute: int
    strangers: int = 0  # open connections of all unknown addresses together (0: no such cap)

    @classmethod
    def of(cls, net: NetworkConfig) -> Limits:
        return cls(
            net.relay_conns_per_address,
            net.relay_conns_per_prefix,
            net.relay_new_conns_per_minute,
            net.relay_stranger_conns,
        )


def chain_name(port: int) -> str:
    return f"SWN-RELAY-{port}"


def known_chain(port: int) -> str:
    return f"SWN-KNOWN-{port}"


def guard_rules(tool: str, port: int, limits: Limits) -> list[list[str]]:
    """The `tool` (iptables or ip6tables) commands that make the guard of TCP `port`, in order."""
    chain, (addr_mask, prefix_mask) = chain_name(port), MASKS[tool]
    reject = ["-j", "REJECT", "--reject-with", "tcp-reset"]
    rules = [["-N", chain], ["-A", chain, "-s", LOOPBACK[tool], "-j", "RETURN"]]
    for above, mask in ((limits.per_address, addr_mask), (limits.per_prefix, prefix_mask)):
        if above > 0:
            rules.append(
                [
                    "-A",
                    chain,
                    "-p",
                    "tcp",
                    "-m",
                    "connlimit",
                    "--connlimit-above",
                    str(above),
                    "--connlimit-mask",
                    str(mask),
                    *reject,
                ]
            )
    if limits.new_per_minute > 0:
        rules.append(
            [
                "-A",
                chain,
                "-p",
                "tcp",
                "-m",
                "hashlimit",
                "--hashlimit-above",
                f"{limits.new_per_minute}/minute",
                "--hashlimit-burst",
                str(max(1, limits.per_address)),
                "--hashlimit-mode",
                "srcip",
                "--hashlimit-srcmask",
                str(addr_mask),
                "--hashlimit-name",
                f"swn{port}{tool[:3]}",
                *reject,
            ]
        )
    if limits.strangers > 0:  # known addresses RETURN before it (`RelayGuard.set_known`); the rest share the cap
        known = known_chain(port)
        rules += [
            ["-N", known],
            [
                "-A",
                known,
                "-p",
                "tcp",
                "-m",
                "connlimit",
                "--connlimit-above",
                str(limits.strangers),
                "--connlimit-mask",
                "0",
                *reject,
            ],
            ["-A", chain, "-j", known],
        ]
    rules.append(["-I", "INPUT", "-p", "tcp", "--dport", str(port), "--syn", "-j", chain])
    return rules


def _run(tool: str, args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([tool, "-w", *args], capture_output=True, text=True, timeout=30)


def remove_guard(tool: str, port: int) -> None:
    """Remove the guard of `port` (its INPUT jumps and its chain), whoever made it; nothing if there is none."""
    chain = chain_name(port)
    while _run(tool, ["-D", "INPUT", "-p", "tcp", "--dport", str(port), "--syn", "-j", chain]).returncode == 0:
        pass
    _run(tool, ["-F", chain])
    _run(tool, ["-F", known_chain(port)])
    _run(tool, ["-X", known_chain(port)])
    _run(tool, ["-X", chain])


def tcp_ports(maddrs: list[str]) -> dict[str, set[int]]:
    """Listening TCP ports by the tool that guards them: {"iptables": {...}, "ip6tables": {...}}."""
    ports: dict[str, set[int]] = {"iptables": set(), "ip6tables": set()}
    for addr in maddrs:
        parts = addr.split("/")
        if len(parts) > 4 and parts[1] in ("ip4", "ip6") and parts[3] == "tcp" and "p2p-circuit" not in parts:
            ports["iptables" if parts[1] == "ip4" else "ip6tables"].add(int(parts[4]))
    return ports


@dataclass
class RelayGuard:
    """The guards one bootstrap installed; `remove()` takes them away."""

    installed: list[tuple[str, int]] = field(default_factory=list)
    strangers: int = 0  # the cap on unknown addresses' connections (0: none installed)
    known: set[str] = field(default_factory=set)  # addresses in the SWN-KNOWN chains

    @classmethod
    def install(cls, net: NetworkConfig, maddrs: list[str]) -> RelayGuard:
        """Guard every TCP port in `maddrs` (the bootstrap's listening addresses), or say in one line why not."""
        guard, limits = cls(), Limits.of(net)
        ports = tcp_ports(maddrs)
        if limits.per_address <= 0 or not any(ports.values()):
            return guard
        missing = [t for t, p in ports.items() if p and shutil.which(t) is None]
        if os.geteuid() != 0 or missing:
            logger.warning(
                "relay: per-address limits are not enforced (they need %s): one address with many keys "
                "can take every reservation",
                "root" if os.geteuid() != 0 else " and ".join(missing),
            )
            return guard
        for tool, tool_ports in ports.items():
            for port in sorted(tool_ports):
                remove_guard(tool, port)
                for args in guard_rules(tool, port, limits):
                    done = _run(tool, args)
                    if done.returncode != 0:
                        remove_guard(tool, port)
                        guard.remove()
                        logger.warning(
                            "relay: per-address limits are not enforced (%s %s: %s)",
                            tool,
                            " ".join(args),
                            done.stderr.strip().splitlines()[-1:] or done.returncode,
                        )
                        return cls()
                guard.installed.append((tool, port))
        guard.strangers = limits.strangers
        logger.info(
            "relay: at most %d connections per address, %d per prefix and %d new per minute per address%s (ports %s)",
            limits.per_address,
            limits.per_prefix,
            limits.new_per_minute,
            f", {limits.strangers} from unknown addresses in all" if limits.strangers else "",
            ", ".join(str(p) for _, p in guard.installed),
        )
        return guard

    def set_known(self, addresses: set[str]) -> None:
        """Make `addresses` (IPs) the known ones: exempt from the cap on unknown addresses (added before it,
        removed one by one: the cap never lapses). Nothing without that cap."""
        if not self.strangers:
            return
        for ip, add in [
            *((ip, True) for ip in sorted(addresses - self.known)),
            *((ip, False) for ip in sorted(self.known - addresses)),
        ]:
            tool = "ip6tables" if ":" in ip else "iptables"
            for t, port in self.installed:
                if t == tool:
                    _run(
                        tool,
                        ["-I" if add else "-D", known_chain(port), *(["1"] if add else []), "-s", ip, "-j", "RETURN"],
                    )
            (self.known.add if add else self.known.discard)(ip)

    def remove(self) -> None:
        """Remove what `install` made (idempotent)."""
        while self.installed:
            remove_guard(*self.installed.pop())
