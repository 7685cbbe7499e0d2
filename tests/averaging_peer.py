"""A learner's averaging alone, in its own process (own p2pd), for tests/bench/test_nat_lab.py: it joins the run as a
node does (the reachability check first, a relay reservation where nobody can dial it), then takes part in one
round of parameter averaging with the run's other learner and prints the outcome as one JSON line.

    python tests/averaging_peer.py --initial-peers ADDR --host IP --seed S --version V [--rounds N]

Its parameters are seeded random tensors (seed S); the line gives its reachability, each round's agreed version
and group size, and a hash of the parameters after the last round (equal at both members: identical weights).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json

import torch

from swarmnode.config import load_config
from swarmnode.identity import Identity
from swarmnode.swarm.averaging import LearnerAveraging
from swarmnode.swarm.dht import SwarmDHT

RUN = "nat-avg"


async def main(args: argparse.Namespace) -> None:
    cfg = load_config(
        None,
        [
            f"run_id={RUN}",
            f"network.initial_peers=[{args.initial_peers}]",
            f"network.host_maddrs=[/ip4/{args.host}/tcp/0]",
            "network.nat_port_map=false",
            "network.auto_nat=false",
            "network.use_relay=true",
        ],
    )
    dht = await SwarmDHT.create(cfg, Identity.generate(), check_reachability=True)
    torch.manual_seed(args.seed)
    params = [torch.randn(20_000), torch.randn(64, 33)]
    averager = LearnerAveraging(params, dht, RUN, group_size=2, timeout=args.timeout)
    rounds = []
    try:
        await asyncio.to_thread(averager.start)
        for _ in range(args.rounds):
            result = await asyncio.to_thread(averager.round, args.version)
            rounds.append({"version": result.version, "group_size": result.group_size, "error": result.error})
            if result.version is not None:
                break
    finally:
        await asyncio.to_thread(averager.stop)
        await dht.shutdown()
    digest = hashlib.sha256(b"".join(p.double().numpy().tobytes() for p in params)).hexdigest()
    print(json.dumps({"reachability": dht.reachability.status, "rounds": rounds, "params": digest}), flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--initial-peers", required=True)
    ap.add_argument("--host", required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--version", type=int, required=True)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=60.0)
    asyncio.run(main(ap.parse_args()))
