"""Separate machines on one switch, on this one: network namespaces on a bridge, each with its own address and
its upload limited (tc tbf). Needs root and iproute2. Used by data_plane.py and swarm_value.py."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator

SUBNET = "10.231.77"  # the hosts get SUBNET.2, SUBNET.3, ...


def missing_for_namespaces() -> str | None:
    """Why namespaced hosts cannot be made here (not root, no iproute2, a kernel or container that refuses), or
    None when they can (one throwaway host was made and removed)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    lacking = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if lacking:
        return f"network namespaces need iproute2 ({', '.join(lacking)} not found)"
    try:
        with limited_hosts(1, 8):  # the whole recipe once: bridge, namespace, veth pair, tbf
            return None
    except subprocess.CalledProcessError as exc:
        why = (exc.stderr or b"").decode(errors="replace").strip() or f"exit code {exc.returncode}"
        return f"cannot make namespaced hosts here ({' '.join(exc.cmd)}: {why})"


@contextlib.contextmanager
def limited_hosts(n: int, mbit: float) -> Iterator[list[tuple[str, str]]]:
    """`n` network namespaces on one bridge, each host's upload limited to `mbit` (tc tbf): separate machines
    on one switch. Yields (namespace, address) pairs; removes everything it made, even on failure."""
    tag = f"swnb{os.getpid() % 100000}"
    namespaces, links = [], []

    def sh(*cmd: str) -> None:
        subprocess.run(cmd, check=True, capture_output=True)

    try:
        sh("ip", "link", "add", f"{tag}br", "type", "bridge")
        links.append(f"{tag}br")
        sh("ip", "link", "set", f"{tag}br", "up")
        hosts = []
        for k in range(n):
            ns, veth, ip = f"{tag}n{k}", f"{tag}v{k}", f"{SUBNET}.{k + 2}"
            sh("ip", "netns", "add", ns)
            namespaces.append(ns)
            sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            links.append(veth)
            sh("ip", "link", "set", veth, "master", f"{tag}br")
            sh("ip", "link", "set", veth, "up")
            inside = ("ip", "netns", "exec", ns)
            sh(*inside, "ip", "addr", "add", f"{ip}/24", "dev", "eth0")
            sh(*inside, "ip", "link", "set", "eth0", "up")
            sh(*inside, "ip", "link", "set", "lo", "up")
            sh(
                *inside,
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
            hosts.append((ns, ip))
        yield hosts
    finally:
        for ns in namespaces:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        for link in links:
            subprocess.run(["ip", "link", "del", link], capture_output=True)


def in_namespace(namespace: str) -> list[str]:
    """The command prefix that runs a program inside `namespace`."""
    return ["ip", "netns", "exec", namespace]
