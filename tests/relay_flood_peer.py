"""Relay reservations from one host, for tests/bench/test_relay_flood.py: a flood of throwaway keys, or an honest node
timing its reservation. Run inside a NAT-lab namespace; each daemon asks the relay for a reservation the way a
node that cannot be dialled does (`swarm/p2p.relay_flags`: the relay as its only trusted relay, reachability
forced private, listening nowhere).

    python tests/relay_flood_peer.py hold --relay MADDR/p2p/ID --keys 10 --ready FILE
    python tests/relay_flood_peer.py time --relay A --relay B --pairs 4 --timeout 30

`hold`: `keys` daemons ask at once; after `wait` seconds FILE gets {"keys": n, "reserved": k}; on SIGTERM the
daemons stop. `time`: `pairs` times, for each relay in turn, a fresh daemon (a new key) asks; one JSON line per
try, {"relay": i, "seconds": s} (s null: no reservation within `timeout`), timed from the daemon's start.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import time
from pathlib import Path

from hivemind.p2p import P2P

from swarmnode.swarm.hivemind_compat import p2p_class_with_daemon_flags
from swarmnode.swarm.relay import wait_for_relay


async def reserving(relay: str) -> P2P:
    """A daemon that asks `relay` for a reservation (and holds it while it runs)."""
    return await p2p_class_with_daemon_flags({"relayService": False, "relayDiscovery": False}).create(
        initial_peers=[relay],
        host_maddrs=[],
        no_listen=True,
        nat_port_map=False,
        auto_nat=False,
        use_relay=True,
        use_auto_relay=True,
        trusted_relays=[relay],
        force_reachability="private",
        check_if_identity_free=False,
        startup_timeout=60,
    )


async def stop(daemons: list[P2P]) -> None:
    for p2p in daemons:
        with contextlib.suppress(Exception):
            await p2p.shutdown()


async def start_one(relay: str) -> P2P | None:
    try:
        return await reserving(relay)
    except Exception:  # refused by the relay's guard: the daemon's initial peer is unreachable
        return None


async def hold(args: argparse.Namespace) -> None:
    stopped = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stopped.set)
    daemons: list[P2P] = []
    try:
        for start in range(0, args.keys, 5):  # a few at a time: a loaded machine starts daemons slowly
            daemons += [
                d
                for d in await asyncio.gather(*(start_one(args.relay[0]) for _ in range(min(5, args.keys - start))))
                if d
            ]
        held = await asyncio.gather(*(wait_for_relay(d, args.wait) for d in daemons))
        reserved = sum(h is not None for h in held)
        Path(args.ready).write_text(
            json.dumps({"keys": args.keys, "daemons": len(daemons), "reserved": reserved}) + "\n"
        )
        await stopped.wait()
    finally:
        await stop(daemons)


async def timed(args: argparse.Namespace) -> None:
    for _ in range(args.pairs):
        for i, relay in enumerate(args.relay):
            began = time.monotonic()
            p2p = await start_one(relay)
            got = p2p is not None and await wait_for_relay(p2p, args.timeout) is not None
            seconds = round(time.monotonic() - began, 3) if got else None
            if p2p is not None:
                await stop([p2p])
            print(json.dumps({"relay": i, "seconds": seconds}), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["hold", "time"])
    parser.add_argument("--relay", action="append", required=True, help="the relay's multiaddr with /p2p/ID")
    parser.add_argument("--keys", type=int, default=10, help="hold: daemons (keys) asking for a reservation")
    parser.add_argument("--wait", type=float, default=30.0, help="hold: seconds to wait for the reservations")
    parser.add_argument("--ready", help="hold: the file that gets the counts")
    parser.add_argument("--pairs", type=int, default=4, help="time: tries per relay")
    parser.add_argument("--timeout", type=float, default=30.0, help="time: seconds a try waits for its reservation")
    a = parser.parse_args()
    asyncio.run(hold(a) if a.mode == "hold" else timed(a))
