"""Join-to-ready time and per-node memory (RSS of Python + its p2pd) for 1..N nodes joining one bootstrap.

    python bench/join_scaling.py [--sizes 1,2,4,8]

For each swarm size n: start n `swarmnode join` processes at once against a fresh bootstrap on 127.0.0.1 and
report, per node, the wall time from spawn to its `ready` line (process start, imports, p2pd, DHT join, first
record), the in-process join time (`join_s`: p2pd + DHT + first record), and RSS. Ratios are against n=1
measured in the same run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from swarm_helpers import LocalSwarm  # noqa: E402


def rss_mb(pid: int) -> tuple[float, float]:
    """(python RSS, p2pd RSS) in MiB for node process `pid`."""
    proc = psutil.Process(pid)
    daemons = [c for c in proc.children() if "p2pd" in c.name()]
    return proc.memory_info().rss / 2**20, sum(d.memory_info().rss for d in daemons) / 2**20


def measure(n: int, root: Path) -> dict:
    with LocalSwarm(root / f"n{n}", run_id=f"bench-{n}") as swarm:
        swarm.bootstrap()
        spawned = time.monotonic()
        nodes = [swarm.join(f"node{i}", "sampler", wait=False) for i in range(n)]
        wall, inner = [], []
        for node in nodes:
            fields = node.ready_fields(timeout=180)
            wall.append(time.monotonic() - spawned)
            inner.append(float(fields["join_s"]))
        time.sleep(1.0)  # let the first heartbeats settle before sampling memory
        mem = [rss_mb(node.pid) for node in nodes]
        listed = swarm.status()["count"]
    return {
        "n": n,
        "ready_wall_s": statistics.mean(wall),
        "ready_wall_max_s": max(wall),
        "join_s": statistics.mean(inner),
        "py_mb": statistics.mean(m[0] for m in mem),
        "p2pd_mb": statistics.mean(m[1] for m in mem),
        "listed": listed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,2,4,8", help="comma-separated swarm sizes (first is the baseline)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    root = Path(tempfile.mkdtemp(prefix="swarmnode-bench-join-"))
    rows = [measure(n, root) for n in sizes]
    base = rows[0]
    print(f"{'nodes':>5} {'ready(wall) s':>14} {'max s':>7} {'join s':>7} {'x base':>7} "
          f"{'py MiB':>7} {'p2pd MiB':>9} {'total MiB':>9} {'listed':>7}")
    for r in rows:
        print(f"{r['n']:>5} {r['ready_wall_s']:>14.2f} {r['ready_wall_max_s']:>7.2f} {r['join_s']:>7.2f} "
              f"{r['join_s'] / base['join_s']:>7.2f} {r['py_mb']:>7.0f} {r['p2pd_mb']:>9.0f} "
              f"{r['py_mb'] + r['p2pd_mb']:>9.0f} {r['listed']:>4}/{r['n'] + 1}")


if __name__ == "__main__":
    main()
