"""Throwaway keys holding a learner's door, in their own process (one real p2pd per key), for
tests/test_push_flood.py (issue #57's attack):

    python tests/push_flood_peer.py --target MADDR/p2p/ID --run RUN --keys 80 --every 4 --ready FILE \
        --generations 4 --temperature 1.0 --prompt-id ID

Each key pushes, every `every` seconds, one validly signed group of the run's settings claiming a version the
learner never made (10^6) on a new stream, and reads the ack. Once every key has pushed once, FILE gets one JSON
line; on SIGTERM the process appends its ack counts to FILE, marked "final", then stops its daemons and exits.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import tempfile
from collections import Counter
from pathlib import Path

from hivemind.p2p import P2P, PeerID
from slot_flood_peer import create as create_daemon

from swarmnode.identity import Identity
from swarmnode.protocol.rollout import RolloutGroup
from swarmnode.swarm.frames import read_control, write_frame
from swarmnode.swarm.rollout_push import push_protocol

counts: Counter[str] = Counter()
FUTURE = 10**6


def future_group(who: Identity, args: argparse.Namespace, serial: int) -> bytes:
    """A well-formed group of the run's settings, claiming a version the learner never made."""
    g = args.generations
    return RolloutGroup.create(
        identity=who,
        run_id=args.run,
        prompt_id=args.prompt_id,
        prompt_tokens=[1, 2, 3],
        completions=[[4 + i, 5] for i in range(g)],
        temperature=args.temperature,
        rewards=[float(serial % 2)] * g,
        logprobs=[[-1.0, -1.0]] * g,
        policy_version=FUTURE + serial,
        lineage=args.target.rpartition("/p2p/")[2],
    ).encode()


async def push(p2p: P2P, who: Identity, args: argparse.Namespace, pushed: asyncio.Event) -> None:
    target, serial = PeerID.from_base58(args.target.rpartition("/p2p/")[2]), 0
    while True:
        serial += 1
        try:
            _, reader, writer = await asyncio.wait_for(
                p2p.call_binary_stream_handler(target, push_protocol(args.run)), 10
            )
            try:
                await write_frame(writer, future_group(who, args, serial))
                ack = await asyncio.wait_for(read_control(reader), 10) or {}
                counts[str(ack.get("status", "none"))] += 1
            finally:
                writer.close()
        except Exception as exc:  # a ban closes the stream
            counts[f"closed ({type(exc).__name__})"] += 1
        pushed.set()
        await asyncio.sleep(args.every)


async def create(key: Path, target: str) -> P2P:
    return await create_daemon(
        dict(
            identity_path=str(key),
            host_maddrs=["/ip4/127.0.0.1/tcp/0"],
            initial_peers=[target],
            nat_port_map=False,
            auto_nat=False,
            check_if_identity_free=False,
            startup_timeout=120,
        )
    )


async def main(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    keys = [Identity.generate() for _ in range(args.keys)]
    daemons: list[P2P] = []
    tasks: list[asyncio.Task] = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            for i, who in enumerate(keys):
                (Path(tmp) / f"{i}.key").write_bytes(who.libp2p_key_bytes())
            for start in range(0, args.keys, 8):  # a few at a time: a loaded machine starts daemons slowly
                batch = range(start, min(args.keys, start + 8))
                daemons += await asyncio.gather(*(create(Path(tmp) / f"{i}.key", args.target) for i in batch))
            events = [asyncio.Event() for _ in daemons]
            for p2p, who, event in zip(daemons, keys, events):
                tasks.append(asyncio.create_task(push(p2p, who, args, event)))
                await asyncio.sleep(args.every / len(daemons))  # spread over the period, as independent hosts
            await asyncio.gather(*(e.wait() for e in events))
            Path(args.ready).write_text(json.dumps({"keys": len(daemons), **counts}) + "\n")
            await stop.wait()
        finally:
            with contextlib.suppress(OSError), open(args.ready, "a") as f:
                f.write(json.dumps({"keys": len(daemons), **counts, "final": True}) + "\n")
            for t in tasks:
                t.cancel()
            if tasks:
                await asyncio.wait(tasks, timeout=30)
            for p2p in daemons:
                with contextlib.suppress(Exception):
                    await p2p.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True, help="the learner's multiaddr with /p2p/ID")
    parser.add_argument("--run", required=True)
    parser.add_argument("--keys", type=int, default=80)
    parser.add_argument("--every", type=float, default=4.0)
    parser.add_argument("--ready", required=True)
    parser.add_argument("--generations", type=int, required=True)
    parser.add_argument("--temperature", type=float, required=True)
    parser.add_argument("--prompt-id", required=True)
    asyncio.run(main(parser.parse_args()))
