"""CPU seconds and resident memory of a process and its children (a lab host and its p2pd daemons), from /proc."""

from __future__ import annotations

import os
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


def _one(pid: int) -> tuple[float, int, str]:
    stat = Path(f"/proc/{pid}/stat").read_text()
    name = stat[stat.index("(") + 1 : stat.rindex(")")]
    fields = stat[stat.rindex(")") + 2 :].split()
    cpu = (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime
    rss = int(fields[21]) * PAGE
    return cpu, rss, name


def process_tree_stats(pid: int) -> dict:
    """{cpu_s, rss, p2pd_cpu_s, p2pd_rss, p2pd}: the process itself and its p2pd children (grandchildren too)."""
    cpu, rss, _ = _one(pid)
    out = {"cpu_s": cpu, "rss": rss, "p2pd_cpu_s": 0.0, "p2pd_rss": 0, "p2pd": 0}
    todo = _children(pid)
    while todo:
        child = todo.pop()
        try:
            c_cpu, c_rss, name = _one(child)
        except (OSError, ValueError, IndexError):
            continue
        todo += _children(child)
        if name == "p2pd":
            out["p2pd_cpu_s"] += c_cpu
            out["p2pd_rss"] += c_rss
            out["p2pd"] += 1
    return out
