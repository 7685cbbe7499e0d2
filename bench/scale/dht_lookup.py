"""What one DHT store and one DHT read cost as a run grows, by Kademlia bucket size (`network.dht_bucket_size`).

    python bench/scale/dht_lookup.py --sizes 10 20 40 80 --buckets 20 8 --json bench/scale/results/dht_lookup.json

One process, N real `SwarmDHT` nodes (each its own identity, p2pd, DHT node and validator, joined through the first),
grown within one run per bucket size. At each size every node heartbeats twice (its peer record's store) to settle
the routing tables, then the calls and bytes of three operations are counted (`counters`: every unary DHT call,
once at its caller), each done by every node: its record's store (a heartbeat), a read of one key (the learners'
index: what a node reads every refresh) and a batched read of 8 shards (a sampler's refresh at most). Counting calls,
not timing them, makes the figures independent of the machine's load: a node's control plane a minute is these costs
times its operations a minute (`network.heartbeat_interval`, the sampler's refresh). Also counted: the records a full
census from one node finds (of N), the read's recall.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this checkout's swarmnode, not an installed one
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # bench/, for `scale`

from scale import counters  # noqa: E402

counters.install()

from swarmnode.config import load_config  # noqa: E402
from swarmnode.identity import Identity  # noqa: E402
from swarmnode.protocol.peer import PeerRecord  # noqa: E402
from swarmnode.swarm.dht import SwarmDHT  # noqa: E402

SETS = [
    "network.nat_port_map=false",
    "network.auto_nat=false",
    "network.use_relay=false",
    "network.host_maddrs=[/ip4/127.0.0.1/tcp/0]",
    "network.heartbeat_interval=60",
    "network.startup_timeout=120",
]
SHARDS_A_READ = 8  # a sampler's refresh reads at most this many shards (swarmnode.swarm.shard_window)
CONCURRENCY = 16  # operations in flight at once over the lab


def totals(peers: list[str]) -> tuple[int, int]:
    """(calls, bytes in + out) of the DHT handlers over `peers`, each call counted once (at its answerer)."""
    calls = size = 0
    for peer in peers:
        for handle, (inbound, outbound, count) in counters.snapshot(peer).items():
            if handle.startswith(counters.CONTROL_PREFIX):
                calls += count
                size += inbound + outbound
    return calls // 2, size // 2  # every call is counted at its caller and at its answerer


async def each(nodes: list[SwarmDHT], op) -> tuple[float, float, int]:
    """Run `op(node)` once for every node (CONCURRENCY at a time): (calls, bytes) per operation, failures."""
    peers = [n.identity.peer_id for n in nodes]
    calls0, bytes0 = totals(peers)
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(node: SwarmDHT) -> bool:
        async with gate:
            try:
                return bool(await op(node))
            except Exception:
                return False

    ok = await asyncio.gather(*(one(n) for n in nodes))
    calls1, bytes1 = totals(peers)
    return (calls1 - calls0) / len(nodes), (bytes1 - bytes0) / len(nodes), ok.count(False)


async def grow(sizes: list[int], bucket: int, run: str, say) -> list[dict]:
    cfg = load_config(None, [*SETS, f"run_id={run}", f"network.dht_bucket_size={bucket}"])
    nodes: list[SwarmDHT] = [await SwarmDHT.create(cfg, Identity.generate())]
    boot = str((await nodes[0].p2p.get_visible_maddrs())[0])
    joined = load_config(
        None, [*SETS, f"run_id={run}", f"network.dht_bucket_size={bucket}", f"network.initial_peers=[{boot}]"]
    )
    rng = random.Random(0)
    rows = []

    def store(node: SwarmDHT):
        return node.store_peer(PeerRecord.create(node.identity, role="sampler", version=1))

    async def read_key(node: SwarmDHT) -> bool:
        await node.learners()
        return True

    async def read_shards(node: SwarmDHT) -> bool:
        await node.read_shards(rng.sample(range(node.shards), SHARDS_A_READ))
        return True

    try:
        for size in sizes:
            started = time.monotonic()
            while len(nodes) < size:
                nodes.append(await SwarmDHT.create(joined, Identity.generate()))
            for _ in range(2):
                await each(nodes, store)
            store_calls, store_bytes, store_failed = await each(nodes, store)
            key_calls, key_bytes, _ = await each(nodes, read_key)
            shard_calls, shard_bytes, _ = await each(nodes, read_shards)
            census = [len(await node.all_peers()) for node in rng.sample(nodes, 3)]
            row = {
                "nodes": size,
                "bucket": bucket,
                "store": {"calls": store_calls, "bytes": store_bytes, "failed": store_failed},
                "read_key": {"calls": key_calls, "bytes": key_bytes},
                "read_8_shards": {"calls": shard_calls, "bytes": shard_bytes},
                "census_found": census,
                "grow_s": round(time.monotonic() - started, 1),
            }
            say(
                f"bucket {bucket:2d}  N {size:4d}: store {store_calls:5.1f} calls {store_bytes / 1e3:6.1f} KB; "
                f"key read {key_calls:5.1f} calls {key_bytes / 1e3:6.1f} KB; 8 shards {shard_calls:5.1f} calls "
                f"{shard_bytes / 1e3:6.1f} KB; census found {census} of {size}"
            )
            rows.append(row)
    finally:
        await asyncio.gather(*(n.shutdown() for n in reversed(nodes)), return_exceptions=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10, 20, 40, 80])
    ap.add_argument("--buckets", type=int, nargs="+", default=[20, 8])
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rows = []
    for bucket in args.buckets:
        rows += asyncio.run(grow(sorted(args.sizes), bucket, f"lookup-k{bucket}", lambda s: print(s, flush=True)))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {"sizes": args.sizes, "buckets": args.buckets, "rows": rows, "date": time.strftime("%Y-%m-%d")},
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
