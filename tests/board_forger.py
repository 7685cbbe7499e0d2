"""A key that is not the run's learner, in its own process: it advertises itself as a learner and publishes a
forged contributors board (and curves) under its own board key every heartbeat, for tests/test_run_page.py.

    python tests/board_forger.py --initial-peers ADDR --run RUN --victim PEER_ID [--set KEY=VALUE ...]

Prints `forging` once its first board is stored; runs until signalled.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import time

from swarmnode.board.curves import Curves
from swarmnode.board.record import BoardRecord, CurveRecord
from swarmnode.board.tally import ContributorTally
from swarmnode.config import load_config
from swarmnode.identity import Identity
from swarmnode.swarm.board_keys import store_board
from swarmnode.swarm.membership import Membership


async def main(args: argparse.Namespace) -> None:
    cfg = load_config(
        None,
        [
            f"run_id={args.run}",
            "network.nat_port_map=false",
            "network.auto_nat=false",
            "network.host_maddrs=[/ip4/127.0.0.1/tcp/0]",
            "network.heartbeat_interval=1",
            "network.missed_beats_to_expire=2",
            f"network.initial_peers=[{args.initial_peers}]",
            *args.set,
        ],
    )
    identity = Identity.generate()
    member = await Membership(cfg, identity, "learner").start()
    tally = ContributorTally()
    tally.add_step({"time": time.time(), "sampler_ids": [args.victim], "sampler_valid": [10**9], "sampler_tokens": [1]})
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    said = False
    try:
        while not stop.is_set():
            assert member.dht is not None
            board = BoardRecord.of(tally, identity, cfg.run_id)
            if await store_board(member.dht, board, CurveRecord.of(Curves(), identity, cfg.run_id)) and not said:
                print("forging", flush=True)
                said = True
            try:
                await asyncio.wait_for(stop.wait(), 1.0)
            except TimeoutError:
                pass
    finally:
        await member.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--initial-peers", required=True)
    parser.add_argument("--run", required=True)
    parser.add_argument("--victim", required=True)
    parser.add_argument("--set", action="append", default=[])
    asyncio.run(main(parser.parse_args()))
