"""A SAPO node nobody can dial pulls its peers' text (`sapo.pull.TextPuller`) over real p2pd daemons on
127.0.0.1: each pull fetches only what is newer than the newest group it holds from that peer, never what is older
than the pool keeps, and a peer that cannot be reached is counted, not fatal. (The NAT lab, tests/bench/test_nat_lab.py,
runs it behind a real NAT router.)"""

from __future__ import annotations

import asyncio
import time

import pytest
from hivemind.p2p import PeerID
from push_helpers import daemons

from swarmnode.identity import Identity
from swarmnode.node.sapo.pull import TextPuller
from swarmnode.node.sapo.role import STREAM
from swarmnode.protocol.text_rollout import TextRolloutGroup, TextRolloutLimits
from swarmnode.swarm.rollout_push import RolloutReceiver, RolloutSender

pytestmark = pytest.mark.usefixtures("starts_processes")  # every test here starts processes

RUN = "pull-test"
LIMITS = TextRolloutLimits(max_generations=4, max_completion_chars=32, max_prompt_chars=64, max_bytes=64 * 1024)


def _group(identity: Identity, i: int, created_at: float) -> TextRolloutGroup:
    return TextRolloutGroup.create(
        identity=identity,
        run_id=RUN,
        prompt_id=f"p{i}",
        prompt_text=f"{i}+1=",
        completions=[str(i + 1)],
        finished=[True],
        rewards=[1.0],
        seq_logprobs=[-0.5],
        temperature=1.0,
        model_id="builtin:tiny",
        created_at=created_at,
    )


def test_a_client_only_node_pulls_each_peers_new_text_once(tmp_path):
    peer_id = Identity.generate()
    got: list[str] = []

    async def scenario():
        async with daemons(2, [peer_id, Identity.generate()], tmp_path) as (peer, me):
            sender = RolloutSender(peer, RUN, stream=STREAM)  # the peer: it serves its recent ring to pullers
            await sender.start()
            now = time.time()
            sender.send(_group(peer_id, 0, now - 500))  # older than the pool keeps: never pulled
            for i in range(1, 4):
                sender.send(_group(peer_id, i, now - 10 + i))
            await asyncio.sleep(0.1)  # send() queues on the loop

            def admit(group: TextRolloutGroup) -> str:
                got.append(group.prompt_id)
                puller.saw(group.sampler_id, group.created_at)
                return "ok"

            receiver = RolloutReceiver(
                RUN, admit, LIMITS, stream=STREAM, decode=lambda body: TextRolloutGroup.decode(body, LIMITS)
            )
            puller = TextPuller(me, receiver, limit=16, max_age=120.0)
            first = await puller.pull_once([peer.peer_id])
            again = await puller.pull_once([peer.peer_id])
            sender.send(_group(peer_id, 4, now))
            await asyncio.sleep(0.1)
            newer = await puller.pull_once([peer.peer_id])
            nobody = PeerID.from_base58(Identity.generate().peer_id)
            puller.timeout = 2.0
            failed = await puller.pull_once([nobody])
            await sender.close()
            receiver.close()
            return first, again, newer, failed

    first, again, newer, failed = asyncio.run(scenario())
    assert first == {"ok": 3} and got[:3] == ["p1", "p2", "p3"]
    assert not again  # nothing newer than the cursor: not even duplicates travel
    assert newer == {"ok": 1} and got == ["p1", "p2", "p3", "p4"]
    assert failed == {"pull_failed": 1}
