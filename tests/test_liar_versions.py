"""A liar that claims an old version gets almost nothing trained (issue #40): real bootstrap, learner and honest
sampler processes on 127.0.0.1 (tiny-cpu), and a hostile sampler in this process that shifts every behaviour
log-prob by +0.3 nats and claims the learner's version - 6. The learner keeps every version of the staleness
window, checks a new key's groups at rate 1, drops a caught liar's buffered groups and says so on stdout."""

from __future__ import annotations

import asyncio
import re

import pytest
from liar_peer import lie, lying_groups
from restart_helpers import WORK, start_learner_and_sampler, steps, wait_rows
from swarm_helpers import LocalSwarm

from swarmnode.config import load_config
from swarmnode.identity import Identity

pytestmark = pytest.mark.usefixtures("starts_processes")  # every test here starts processes

LIES = 40
BEHIND = 6


@pytest.mark.slow  # a bootstrap, a learner and a sampler: ~1-2 min on 2 cores
@pytest.mark.timeout(900)
def test_a_liar_claiming_old_versions_is_caught_and_at_most_a_tenth_of_its_groups_train(tmp_path):
    steps_file = tmp_path / "learner" / "learner_steps.jsonl"
    cfg = load_config(WORK[1], [WORK[3]])
    liar = Identity.generate()
    with LocalSwarm(tmp_path) as swarm:
        learner = start_learner_and_sampler(swarm, tmp_path)
        learner_id = learner.ready_fields()["peer_id"]
        groups = lying_groups(cfg, swarm.run_id, liar, learner_id, LIES, shift=0.3)
        wait_rows(steps_file, lambda rows: rows and rows[-1]["version"] >= 2 * BEHIND, 180, f"version {2 * BEHIND}")
        record = next(p for p in swarm.status()["peers"] if p["peer_id"] == learner_id)
        statuses = asyncio.run(lie(tmp_path, swarm.run_id, learner_id, record["addrs"][0], groups, liar, BEHIND))
        seen = len(steps(steps_file))
        wait_rows(steps_file, lambda rows: len(rows) >= seen + 20, 180, "20 steps after the lies")
        accepted = statuses["ok"]
        assert accepted >= 3, statuses  # the lies got past the door (they look like honest groups)
        caught = re.findall(
            rf"caught sampler {liar.peer_id} claiming version (\d+): .*?; (\d+) of its groups "
            r"passed to training so far",
            learner.stdout(),
        )
        assert caught, f"the liar was never caught; acks {statuses}\n{learner.stdout()[-3000:]}"
        passed = max(int(p) for _, p in caught)
        print(f"liar: acks {dict(statuses)}; caught {len(caught)} times; {passed} of its groups passed")
        assert passed <= 0.1 * accepted, f"{passed} of {accepted} accepted lies passed to training"
        claimed = int(caught[0][0])
        assert claimed <= steps(steps_file)[-1]["version"] - BEHIND  # what it claimed was versions back
