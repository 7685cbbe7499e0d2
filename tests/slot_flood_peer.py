"""Throwaway keys holding a weight server's streams, in their own process (one real p2pd per key), for
tests/test_slot_flood.py and bench/hostile-peers/fuzz_learner.py.

    python tests/slot_flood_peer.py --target MADDR/p2p/ID --run RUN --keys 33 --streams 8 --every 8 --ready FILE

Each key opens `streams` streams to each target's weight server (`--target` may be given more than once) and
sends a valid request on each every `every` seconds: `have` (default) or, with `--op manifest`, a manifest; a
stream the server refuses or closes is opened again `reopen` seconds later. Once every key has tried all its
streams, FILE gets one JSON line; on SIGTERM (or a failure) the process appends its counts to FILE, marked
"final", then stops its daemons and exits.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
from pathlib import Path

from hivemind.p2p import P2P, PeerID

from swarmnode.protocol.codec import pack
from swarmnode.swarm.frames import read_frame, write_frame
from swarmnode.swarm.weights import protocol_name

counts = {"opened": 0, "refused": 0, "closed": 0, "haves": 0}  # haves: answered requests of either op


async def hold(
    p2p: P2P, target: PeerID, proto: str, every: float, reopen: float, tried: asyncio.Event, op: str = "have"
) -> None:
    """One stream slot, held for as long as the server lets it, then taken again."""
    while True:
        try:
            _, reader, writer = await asyncio.wait_for(p2p.call_binary_stream_handler(target, proto), 10)
        except Exception:
            counts["refused"] += 1
            tried.set()
            await asyncio.sleep(reopen)
            continue
        counts["opened"] += 1
        tried.set()
        try:
            while True:
                await write_frame(writer, pack({"op": op, "version": 1}))
                if await asyncio.wait_for(read_frame(reader, 1 << 20), 30) is None:
                    break
                counts["haves"] += 1
                await asyncio.sleep(every)
        except Exception:
            pass
        finally:
            writer.close()
        counts["closed"] += 1
        await asyncio.sleep(reopen)


async def create(kw: dict, tries: int = 5) -> P2P:
    """One daemon connected to the targets; tried again when it did not start (a loaded machine)."""
    for attempt in range(1, tries + 1):
        try:
            return await P2P.create(**kw)
        except Exception:
            if attempt == tries:
                raise
    raise AssertionError("unreachable")


async def main(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    targets = [PeerID.from_base58(t.rpartition("/p2p/")[2]) for t in args.target]
    kw = dict(
        host_maddrs=["/ip4/127.0.0.1/tcp/0"],
        initial_peers=args.target,
        nat_port_map=False,
        auto_nat=False,
        startup_timeout=120,
    )
    daemons: list[P2P] = []
    tasks: list[asyncio.Task] = []
    try:
        for start in range(0, args.keys, 8):  # a few at a time: a loaded machine starts 33 daemons slowly
            daemons += await asyncio.gather(*(create(kw) for _ in range(min(8, args.keys - start))))
        events = []
        for p2p in daemons:
            for target in targets:
                for _ in range(args.streams):
                    events.append(asyncio.Event())
                    tasks.append(
                        asyncio.create_task(
                            hold(p2p, target, protocol_name(args.run), args.every, args.reopen, events[-1], args.op)
                        )
                    )
        await asyncio.gather(*(e.wait() for e in events))
        Path(args.ready).write_text(json.dumps({"keys": len(daemons), **counts}) + "\n")
        await stop.wait()
    finally:
        # the counts first: cancelling 264 streams and stopping 33 daemons may take longer than the caller waits
        with contextlib.suppress(OSError):
            with open(args.ready, "a") as f:
                f.write(json.dumps({"keys": len(daemons), **counts, "final": True}) + "\n")
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=30)  # a stream call that ignores its cancellation holds no one up
        for p2p in daemons:
            with contextlib.suppress(Exception):
                await p2p.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--target", required=True, action="append", help="a weight server's multiaddr with /p2p/ID (repeat for several)"
    )
    parser.add_argument("--run", required=True, help="run id (the weights protocol name)")
    parser.add_argument("--keys", type=int, default=33)
    parser.add_argument("--streams", type=int, default=8, help="streams per key")
    parser.add_argument("--every", type=float, default=8.0, help="seconds between requests on a stream")
    parser.add_argument("--op", choices=["have", "manifest"], default="have", help="the request sent every `every` s")
    parser.add_argument("--reopen", type=float, default=1.0, help="seconds before a closed stream is opened again")
    parser.add_argument("--ready", required=True, help="file that gets a JSON line once every stream was tried")
    asyncio.run(main(parser.parse_args()))
