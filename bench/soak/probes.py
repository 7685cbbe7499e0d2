"""What the soak reads of a live process and a node, from /proc and the node's /metrics: resident memory, open
files, established TCP connections (in the process's own network namespace), its p2pd child, the bytes under a
directory, and the Prometheus gauges and counters a node serves."""

from __future__ import annotations

import os
import urllib.request
from pathlib import Path

_ESTABLISHED = "01"
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never through a configured proxy


def rss_mb(pid: int) -> float | None:
    """Resident set size of `pid` in MB, or None when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    except (OSError, ValueError, IndexError):
        return None
    return None


def open_files(pid: int) -> int | None:
    """Open file descriptors of `pid`, or None when it is gone."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        pass
    return inodes


def tcp_connections(pid: int) -> int | None:
    """Established TCP connections held by `pid` (read in its own network namespace), or None when it is gone."""
    mine = _socket_inodes(pid)
    if not mine and not Path(f"/proc/{pid}").exists():
        return None
    count = 0
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if len(cols) > 9 and cols[3] == _ESTABLISHED and cols[9] in mine:
                count += 1
    return count


def children(pid: int) -> list[tuple[int, str]]:
    """(pid, command name) of `pid`'s direct children."""
    out = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            kids = Path(f"/proc/{pid}/task/{tid}/children").read_text().split()
        except OSError:
            continue
        for kid in kids:
            try:
                out.append((int(kid), Path(f"/proc/{kid}/comm").read_text().strip()))
            except OSError:
                continue
    return out


def p2pd_of(pid: int) -> int | None:
    """The p2pd daemon a node process started (its child), or None."""
    return next((kid for kid, name in children(pid) if name.startswith("p2pd")), None)


def dir_bytes(path: Path) -> int:
    """Bytes of the regular files under `path` (0 when it does not exist)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def scrape(address: str, port: int, timeout: float = 3.0) -> dict[str, float] | None:
    """A node's /metrics as {name or name{labels}: value}, or None when it does not answer."""
    try:
        with _DIRECT.open(f"http://{address}:{port}/metrics", timeout=timeout) as answer:
            text = answer.read().decode(errors="replace")
    except (OSError, ValueError):
        return None
    values = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        try:
            values[name] = float(value)
        except ValueError:
            continue
    return values


def metric(values: dict[str, float], name: str) -> float | None:
    """The value of `name` in a scrape, whatever its labels (a counter's `_total` too); None when absent."""
    for key, value in values.items():
        base = key.split("{", 1)[0]
        if base in (name, name + "_total"):
            return value
    return None
