"""Liars whose only lie is the shape of their behaviour log-probs (issue #47) against a real learner: a bootstrap,
a learner and an honest sampler as processes on 127.0.0.1 (tiny-cpu), and hostile samplers in this process that
take the honest sampler's newest groups, tell one lie of `shaped_lies` about their log-probs (the cancelling
+-2 nats on 48 % of the tokens, +-0.5 nats on a tenth of them, on the largest-advantage completions, on the long
ones, -0.5 on the best completion) and push them under their own keys, claiming the version they were sampled at.
Each is caught on its first checked group (none of its groups trains); the honest sampler is never struck and the
learner keeps training its groups."""

from __future__ import annotations

import asyncio
import re

import pytest
from liar_peer import shaped_liars
from restart_helpers import WORK, learner_args, steps, wait_rows
from swarm_helpers import LocalSwarm

pytestmark = pytest.mark.usefixtures("starts_processes")  # every test here starts processes

KINDS = ["cancelling", "shaped:0.1", "advantage:0.1", "long:0.1", "advantage_down", "shaped:0.5"]


@pytest.mark.slow  # a bootstrap, a learner and a sampler: ~1-2 min on 2 cores
@pytest.mark.timeout(900)
def test_shaped_liars_are_caught_on_their_first_check_and_the_honest_sampler_trains(tmp_path):
    steps_file = tmp_path / "learner" / "learner_steps.jsonl"
    with LocalSwarm(tmp_path) as swarm:
        swarm.bootstrap()
        learner = swarm.join("learner", "learner", wait=False, **learner_args(tmp_path))
        learner_id = learner.ready_fields(timeout=300)["peer_id"]  # a loaded machine starts nodes slowly
        sampler_proc = swarm.join(
            "sampler", "sampler", work=True, wait=False, extra=[*WORK, "--set", f"data_dir={tmp_path / 'sampler'}"]
        )
        sampler_proc.ready_fields(timeout=300)
        wait_rows(steps_file, lambda rows: len(rows) >= 5, 180, "5 learner steps")
        peers = {p["peer_id"]: p for p in swarm.status()["peers"]}
        sampler = next(p for p in peers.values() if p["role"] == "sampler")
        result = asyncio.run(
            shaped_liars(
                tmp_path,
                swarm.run_id,
                f"{peers[learner_id]['addrs'][0]}/p2p/{learner_id}",
                f"{sampler['addrs'][0]}/p2p/{sampler['peer_id']}",
                KINDS,
            )
        )
        seen = len(steps(steps_file))
        wait_rows(steps_file, lambda rows: len(rows) >= seen + 20, 180, "20 steps after the lies")
        out = learner.stdout()
    for kind, liar in result.items():
        accepted = liar["statuses"].get("ok", 0)
        assert accepted >= 1, (kind, liar)  # the lies got past the door: they look like honest groups
        caught = re.findall(
            rf"caught sampler {liar['peer_id']} claiming version \d+: (.*?); (\d+) of its groups "
            r"passed to training so far",
            out,
        )
        assert caught, f"{kind}: never caught; acks {liar['statuses']}\n{out[-3000:]}"
        assert int(caught[0][1]) == 0, f"{kind}: {caught[0][1]} groups passed before the first catch"
        print(f"{kind}: acks {liar['statuses']}; caught: {caught[0][0]}")
    assert f"caught sampler {sampler['peer_id']}" not in out
    trained = [r for r in steps(steps_file)[seen:] if r.get("trained")]
    assert len(trained) >= 10 and all(
        set(r["sampler_ids"]) <= {sampler["peer_id"]} | {liar["peer_id"] for liar in result.values()} for r in trained
    )
    assert any(sampler["peer_id"] in r["sampler_ids"] for r in trained)
