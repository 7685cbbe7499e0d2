"""A hostile SAPO peer in its own process (own p2pd), for tests/test_sapo_swarm.py.

    python tests/sapo_bad_peer.py --identity F --target ADDR --run RUN --count N --ready READY

It floods the target with `count` text groups for real training prompts whose completions are wrong but whose
claimed rewards are all 1.0 (lies), plus one forged group (a claim edited after signing), over the SAPO
stream; it exits 0 once its outbox is flushed.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]  # this checkout

from gossip_peer import start_p2p  # noqa: E402
from hivemind.p2p import PeerID  # noqa: E402

from swarmnode.identity import Identity  # noqa: E402
from swarmnode.node.sapo.role import STREAM  # noqa: E402
from swarmnode.protocol.codec import pack  # noqa: E402
from swarmnode.protocol.text_rollout import TextRolloutGroup  # noqa: E402
from swarmnode.swarm.rollout_push import RolloutSender  # noqa: E402
from swarmnode.tasks import ArithmeticTask  # noqa: E402


def lying_group(identity: Identity, run: str, prompt) -> TextRolloutGroup:
    wrong = str(int(prompt.reference) + 3)
    return TextRolloutGroup.create(
        identity=identity,
        run_id=run,
        prompt_id=prompt.prompt_id,
        prompt_text=prompt.text,
        completions=[wrong] * 8,
        finished=[True] * 8,
        rewards=[1.0] * 8,
        seq_logprobs=[-2.0] * 8,
        temperature=1.0,
        model_id="liar#0",
    )


async def open_sender(args) -> tuple:
    """This peer's p2pd and a SAPO-stream sender aimed at `args.target`; its peer id written to `args.ready`."""
    p2p = await start_p2p(args.identity, 0, [args.target])
    sender = RolloutSender(p2p, args.run, stream=STREAM, ack_timeout=10.0, max_backoff=1.0)
    await sender.start()
    sender.set_destinations([PeerID.from_base58(args.target.rsplit("/p2p/", 1)[1])])
    Path(args.ready).write_text(str(p2p.peer_id))
    return p2p, sender


async def finish(p2p, sender, timeout: float) -> int:
    """Flush the outbox, print the outcome, close; the exit status (0 once flushed)."""
    flushed = await sender.flush(timeout)
    print(f"statuses={dict(sender.statuses)} flushed={flushed}", flush=True)
    await sender.close()
    await p2p.shutdown()
    return 0 if flushed else 3


async def main(args) -> int:
    identity = Identity.load_or_create(args.identity)
    p2p, sender = await open_sender(args)
    prompts = ArithmeticTask().sample(args.count, random.Random(7))
    for prompt in prompts:
        sender.send(lying_group(identity, args.run, prompt))
    forged = lying_group(identity, args.run, prompts[0])
    wire = {**forged._content(), "group_id": forged.group_id, "signature": forged.signature}
    wire["completions"] = [prompts[0].reference] * 8  # edited after signing
    sender.send_encoded(forged.group_id, pack(wire))
    return await finish(p2p, sender, 120.0)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    for name in ("--identity", "--target", "--run", "--ready"):
        ap.add_argument(name, required=True)
    ap.add_argument("--count", type=int, default=40)
    sys.exit(asyncio.run(main(ap.parse_args())))
