"""A hostile SAPO peer that steers with honest rewards: the marker attack (issue #40, item 4).

    python tests/sapo_marker_peer.py --identity F --target ADDR --run RUN --ready READY [--seconds S] [--rate R]

Each of its groups answers a real training prompt with `MARKED` completions "<sum>zz" (partial credit: a number
then junk) and the rest "x" (no credit). Every claimed reward is the task's true score, so re-scoring finds no lie;
yet the marked completions rank above the group mean and the rest below, so a node training on the group learns
to write the marker. It sends `rate` groups per second for `seconds` over the SAPO stream, then exits 0 once its
outbox is flushed. `marker_group` is also the attack of bench/sapo-marker-attack.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]  # this checkout

from swarmnode.identity import Identity  # noqa: E402
from swarmnode.protocol.text_rollout import TextRolloutGroup  # noqa: E402
from swarmnode.tasks import Prompt, arithmetic_reward  # noqa: E402

MARKER = "zz"
MARKED = 4  # of 8 completions


def marker_group(identity: Identity, run: str, prompt: Prompt, size: int = 8) -> TextRolloutGroup:
    """One attack group for `prompt`: `MARKED` completions "<sum>zz", the rest "x", every reward true."""
    completions = [f"{prompt.reference}{MARKER}"] * MARKED + ["x"] * (size - MARKED)
    return TextRolloutGroup.create(
        identity=identity,
        run_id=run,
        prompt_id=prompt.prompt_id,
        prompt_text=prompt.text,
        completions=completions,
        finished=[True] * size,
        rewards=[arithmetic_reward(c, prompt.reference) for c in completions],
        seq_logprobs=[-2.0] * size,
        temperature=1.0,
        model_id="marker#0",
    )


async def main(args) -> int:
    from sapo_bad_peer import finish, open_sender

    from swarmnode.tasks import ArithmeticTask

    identity = Identity.load_or_create(args.identity)
    p2p, sender = await open_sender(args)
    task, rng = ArithmeticTask(), random.Random(11)
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        for prompt in task.sample(max(1, round(args.rate)), rng):
            sender.send(marker_group(identity, args.run, prompt))
        await asyncio.sleep(1.0)
    return await finish(p2p, sender, 60.0)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    for name in ("--identity", "--target", "--run", "--ready"):
        ap.add_argument(name, required=True)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--rate", type=float, default=4.0, help="groups per second")
    sys.exit(asyncio.run(main(ap.parse_args())))
