"""The soak's two pieces of real infrastructure, each removed even on failure: a network namespace joined to this
host by a veth pair (the namespaced sampler; its link goes down and up), and a small tmpfs (the small-disk
sampler's data directory; it fills up and gets its space back). Both need root."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SUBNET = "10.231.144"  # host side .1, namespace side .2


@dataclass(frozen=True)
class Namespace:
    """A namespace `name` reached through `host_link`; this host is `host_ip`, the namespace `inner_ip`."""

    name: str
    host_link: str
    host_ip: str
    inner_ip: str

    def prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.name]

    def link(self, up: bool) -> None:
        """Cut (`up=False`) or restore the namespace's only link."""
        _sh("ip", "link", "set", self.host_link, "up" if up else "down")


def _sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True)


@contextlib.contextmanager
def namespace(tag: str) -> Iterator[Namespace]:
    """A namespace `<tag>n` with a veth pair (`<tag>h` here, eth0 inside) on `SUBNET`; removed on exit."""
    ns = Namespace(f"{tag}n", f"{tag}h", f"{SUBNET}.1", f"{SUBNET}.2")
    made = []
    try:
        _sh("ip", "netns", "add", ns.name)
        made.append("ns")
        _sh("ip", "link", "add", ns.host_link, "type", "veth", "peer", "name", "eth0", "netns", ns.name)
        made.append("link")
        _sh("ip", "addr", "add", f"{ns.host_ip}/24", "dev", ns.host_link)
        _sh("ip", "link", "set", ns.host_link, "up")
        inside = ns.prefix()
        _sh(*inside, "ip", "addr", "add", f"{ns.inner_ip}/24", "dev", "eth0")
        _sh(*inside, "ip", "link", "set", "eth0", "up")
        _sh(*inside, "ip", "link", "set", "lo", "up")
        yield ns
    finally:
        if "link" in made:
            subprocess.run(["ip", "link", "del", ns.host_link], capture_output=True)
        if "ns" in made:
            subprocess.run(["ip", "netns", "del", ns.name], capture_output=True)


@contextlib.contextmanager
def small_fs(path: Path, megabytes: int) -> Iterator[Path]:
    """A tmpfs of `megabytes` MB mounted at `path`; unmounted (lazily, if still busy) on exit."""
    path.mkdir(parents=True, exist_ok=True)
    _sh("mount", "-t", "tmpfs", "-o", f"size={megabytes}m,mode=0755", "tmpfs", str(path))
    try:
        yield path
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill(path: Path, name: str = "filler") -> int:
    """Write `<path>/<name>` until the filesystem is full; the bytes written."""
    written = 0
    block = b"\0" * (1 << 20)
    with open(path / name, "wb") as fh:
        try:
            while True:
                fh.write(block)
                fh.flush()
                written += len(block)
        except OSError:
            pass
        try:
            os.fsync(fh.fileno())
        except OSError:
            pass
    return written


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize
