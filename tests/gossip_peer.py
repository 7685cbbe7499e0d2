"""A real gossip peer in its own process (own p2pd), for tests/test_gossip.py and bench/data-plane/data_plane.py.

    python tests/gossip_peer.py learner --identity F --port P --journal J --received R --ready READY
    python tests/gossip_peer.py sampler --identity F --learner ADDR --count N --interval S --created C --ready READY

The learner appends `group_id created_at received_at` to R for every accepted group and runs until signalled.
The sampler appends every group id it creates to C before sending it; after `count` groups, or on SIGTERM, it
flushes its outbox and exits 0 if everything was acknowledged.
"""

from __future__ import annotations

import os
import signal

signal.signal(signal.SIGTERM, lambda *_: os._exit(0))  # before the imports below: nothing to flush yet (or still)

import argparse  # noqa: E402
import asyncio  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from hivemind.p2p import P2P, PeerID  # noqa: E402

from swarmnode.identity import Identity  # noqa: E402
from swarmnode.protocol.rollout import RolloutGroup, RolloutLimits  # noqa: E402
from swarmnode.swarm.rollout_push import RolloutReceiver, RolloutSender  # noqa: E402

RUN = "gossip-test"
LIMITS = RolloutLimits(vocab_size=128, max_generations=8, max_completion_tokens=64, max_prompt_tokens=64)


def make_group(identity: Identity, rng: random.Random, tag: str, i: int, version: int = 0) -> RolloutGroup:
    """A small real signed group (G=4, 16 tokens each)."""
    comps = [[rng.randrange(128) for _ in range(16)] for _ in range(4)]
    return RolloutGroup.create(
        identity=identity,
        run_id=RUN,
        prompt_id=f"{tag}-{i}",
        prompt_tokens=[rng.randrange(128) for _ in range(12)],
        completions=comps,
        logprobs=[[-rng.random() for _ in c] for c in comps],
        temperature=1.0,
        rewards=[rng.random() for _ in comps],
        policy_version=version,
        lineage="test",
    )


async def start_p2p(identity_path: str, port: int, initial: list[str]) -> P2P:
    Identity.load_or_create(identity_path)
    return await P2P.create(
        identity_path=identity_path,
        host_maddrs=[f"/ip4/127.0.0.1/tcp/{port}"],
        initial_peers=initial,
        nat_port_map=False,
        auto_nat=False,
        startup_timeout=30,
        check_if_identity_free=False,
    )


def stop_event() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def learner(args) -> int:
    stop = stop_event()
    p2p = await start_p2p(args.identity, args.port, [])
    out = open(args.received, "a", buffering=1)

    def on_group(group: RolloutGroup) -> str:
        out.write(f"{group.group_id} {group.created_at:.6f} {time.time():.6f}\n")
        return "ok"

    receiver = RolloutReceiver(RUN, on_group, LIMITS, journal=args.journal, rate=args.rate, burst=args.rate * 2)
    await receiver.start(p2p)
    maddrs = [f"{a}/p2p/{p2p.peer_id}" for a in await p2p.get_visible_maddrs()]
    Path(args.ready).write_text(maddrs[0])
    await stop.wait()
    receiver.close()
    await p2p.shutdown()
    return 0


async def sampler(args) -> int:
    stop = stop_event()
    identity = Identity.load_or_create(args.identity)
    p2p = await start_p2p(args.identity, 0, [args.learner])
    sender = RolloutSender(p2p, RUN, ack_timeout=5.0, max_backoff=1.0)
    await sender.start()
    sender.set_destinations([PeerID.from_base58(args.learner.rsplit("/p2p/", 1)[1])])
    Path(args.ready).write_text(str(p2p.peer_id))
    rng = random.Random(f"{args.tag}")
    created = open(args.created, "a", buffering=1)
    for i in range(args.count):
        if stop.is_set():
            break
        group = make_group(identity, rng, args.tag, i)
        created.write(group.group_id + "\n")
        sender.send(group)
        try:
            await asyncio.wait_for(stop.wait(), args.interval)
        except TimeoutError:
            pass
    flushed = await sender.flush(args.flush_timeout)
    print(
        f"delivered={sender.delivered} dropped={sender.dropped} retries={sender.retries} flushed={flushed}", flush=True
    )
    await sender.close()
    await p2p.shutdown()
    return 0 if flushed and not sender.dropped else 3


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("role", choices=["learner", "sampler"])
    ap.add_argument("--identity", required=True)
    ap.add_argument("--ready", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--journal")
    ap.add_argument("--received")
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--learner")
    ap.add_argument("--count", type=int, default=20)
    ap.add_argument("--interval", type=float, default=0.1)
    ap.add_argument("--created")
    ap.add_argument("--tag", default="s")
    ap.add_argument("--flush-timeout", type=float, default=60.0)
    args = ap.parse_args()
    try:
        return asyncio.run(learner(args) if args.role == "learner" else sampler(args))
    finally:  # the loop's handlers are gone with it; everything is flushed and stopped by now
        signal.signal(signal.SIGTERM, lambda *_: os._exit(0))


if __name__ == "__main__":
    sys.exit(main())
