"""A group made under other generation settings than the run's is refused by the learner's receiver with the
status `settings` (counted), and the ack carries the run's values to its sender, whose log can then say which
setting differs. Real hivemind P2P daemons on 127.0.0.1."""

from __future__ import annotations

import asyncio
import random
import sys
from pathlib import Path

import pytest

from swarmnode.config import SamplerConfig
from swarmnode.identity import Identity
from swarmnode.protocol.run_settings import SETTINGS_STATUS, differences, group_mismatch, run_values
from swarmnode.swarm.rollout_push import RolloutReceiver, RolloutSender

sys.path.insert(0, str(Path(__file__).parent))
from gossip_peer import LIMITS, RUN, make_group  # noqa: E402
from push_helpers import daemons  # noqa: E402


def test_what_a_group_shows_is_checked_against_the_runs_values():
    run = run_values(SamplerConfig(num_generations=4, max_completion_length=16))
    group = make_group(Identity.generate(), random.Random(0), "g", 0)  # G=4, 16 tokens, temperature 1.0
    assert group_mismatch(group, run) == []
    assert group_mismatch(group, {**run, "sampler.temperature": 0.7}) == ["sampler.temperature"]
    assert group_mismatch(group, {**run, "sampler.num_generations": 8, "sampler.max_completion_length": 8}) == [
        "sampler.num_generations",
        "sampler.max_completion_length",
    ]
    mine = {**run, "sampler.temperature": 0.7}
    assert differences(mine, run) == "sampler.temperature 0.7, run 1.0"
    assert differences(run, run) is None and differences(mine, "junk") is None


@pytest.mark.usefixtures("starts_processes")
def test_a_group_made_under_other_settings_is_refused_and_the_sender_told_why(tmp_path):
    run = {"sampler.temperature": 0.7, "sampler.num_generations": 4, "sampler.max_completion_length": 16}
    told: list[tuple[str, object]] = []
    taken: list[str] = []

    def admit(group):
        if group_mismatch(group, run):
            return SETTINGS_STATUS
        taken.append(group.group_id)
        return "ok"

    async def scenario():
        sampler_id = Identity.generate()
        async with daemons(2, [Identity.generate(), sampler_id], tmp_path) as (lp, sp):
            receiver = RolloutReceiver(RUN, admit, LIMITS, settings=run)
            await receiver.start(lp)
            sender = RolloutSender(sp, RUN, ack_timeout=10, max_backoff=0.5)
            sender.on_settings = lambda peer, values: told.append((peer, values))
            await sender.start()
            sender.set_destinations([lp.peer_id])
            sender.send(make_group(sampler_id, random.Random(1), "g", 0))  # made at temperature 1.0
            assert await sender.flush(30)
            await sender.close()
            receiver.close()
            return receiver.statuses, sender.statuses

    received, sent = asyncio.run(scenario())
    assert not taken and received[SETTINGS_STATUS] == 1 and sent[SETTINGS_STATUS] == 1
    ((peer, values),) = told
    assert values == run
    assert differences({**run, "sampler.temperature": 1.0}, values) == "sampler.temperature 1.0, run 0.7"
