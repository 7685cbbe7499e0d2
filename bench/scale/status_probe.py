"""One `swarmnode status` snapshot of a lab run, timed and its bytes counted (the read-only client's own DHT
handlers, `counters.py`): prints {join_s, read_s, bytes_in, bytes_out, peers}.

    python -P bench/scale/status_probe.py CONFIG INITIAL_PEER [--set key=value ...]
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

from scale import counters  # noqa: E402

counters.install()

from swarmnode.config import load_config  # noqa: E402
from swarmnode.observe.status import client_member, read_status  # noqa: E402


async def probe(config: str, initial: str, sets: list[str]) -> dict:
    cfg = load_config(
        config,
        [*sets, f"network.initial_peers={json.dumps([initial])}", 'network.host_maddrs=["/ip4/127.0.0.1/tcp/0"]'],
    )
    began = time.monotonic()
    member = await client_member(cfg).start()
    joined = time.monotonic()
    peer = str(member.dht.p2p.peer_id)
    before = counters.control_bytes(counters.snapshot(peer))
    try:
        doc = await read_status(member)
        read = time.monotonic()
        after = counters.control_bytes(counters.snapshot(peer))
    finally:
        await member.stop()
    return {
        "join_s": joined - began,
        "read_s": read - joined,
        "bytes_in": after[0] - before[0],
        "bytes_out": after[1] - before[1],
        "join_bytes_in": before[0],
        "join_bytes_out": before[1],
        "peers": doc.get("count"),
        "doc_bytes": len(json.dumps(doc, default=str)),
    }


if __name__ == "__main__":
    config, initial, *rest = sys.argv[1:]
    sets = [rest[i + 1] for i in range(0, len(rest), 2) if rest[i] == "--set"]
    print(json.dumps(asyncio.run(probe(config, initial, sets))))
